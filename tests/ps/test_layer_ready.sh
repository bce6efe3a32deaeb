# test_layer_ready.sh: strategy.layer_ready with sync parameter servers. Two
# workers and two servers, each in its own network namespace with a shaped
# 50 Mbit/s link (`weft launch --link`), ps.priority_kb 16: the exchange's
# step returns once the pushes are out and each layer of the next forward
# waits only for its own chunks (and the first batch norm for the state).
# The job ends bitwise equal to the same job without it (weights and
# batch-norm statistics), and its events show
# the overlap: the first layer's forward of a step began while chunks of
# the previous step's replies were still on their way, before the last
# one landed. Skips (77) where network namespaces cannot be made (not
# root, no iproute2).
. "$WEFT_SRC/tests/ps/lib.sh"
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
	echo "SKIP: needs root and iproute2 (ip, tc) for network namespaces"
	exit 77
fi
ns=weft-test-$$
if ! ip netns add "$ns" 2>/dev/null; then
	echo "SKIP: this machine does not allow network namespaces"
	exit 77
fi
ip netns del "$ns"
make_synth train.h5 256 16 3
export WEFT_PS_CHUNK_BYTES=16384 # many chunks on each server
cat >c.json <<JSON
{"model": {"name": "resnet20"}, "data": {"train": "train.h5", "augment": true},
 "train": {"batch_size": 8, "steps": 8, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
 "checkpoint": {"every_steps": 4}, "log": {"every_steps": 4}}
JSON
for lr in false true; do
	"$WEFT" launch --ps 2 --workers 2 --threads 1 --device cpu --config c.json --insecure \
		--link 50mbit --set ps.priority_kb=16 --set strategy.layer_ready=$lr \
		--set checkpoint.dir=$lr/ckpt --set log.dir=$lr/logs >$lr.log 2>&1 ||
		fail "launch --link 50mbit with strategy.layer_ready=$lr failed"
done
for step in 4 8; do
	"$WEFT" inspect --model false/ckpt/step-$step/model.h5 --dump >false.txt
	"$WEFT" inspect --model true/ckpt/step-$step/model.h5 --dump >true.txt
	python3 "$WEFT_SRC/tests/trainer/compare_dump.py" true.txt false.txt 0 ||
		fail "step $step: strategy.layer_ready=true differs from the job without it"
done
grep -q "moving_mean" true.txt || fail "the model has no batch norm"
python3 - "$WEFT_EVENTS" <<'PY' || fail "the events do not show the overlap"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
lr = [e for e in ev if e["event"] == "layer_ready"]
assert len(lr) == 2 * 8, len(lr)  # both workers, every step
# the checkpoints' steps (3, 7: 0-based) settle before the next forward
settled = [e for e in lr if e["step"] in (3, 7)]
assert all(e["first_layer_ms"] < 0 for e in settled), settled
lr = [e for e in lr if e["step"] not in (3, 7)]
for e in lr:
    assert e["chunks"] > 10 and e["first_layer_ms"] >= 0, e
# the first layer ran while replies of the step before were still coming
over = [e for e in lr if e["left_at_first"] > 0 and e["first_layer_ms"] < e["last_landed_ms"]]
assert len(over) >= len(lr) // 2, ("too few steps overlap", over, lr)
print("ok:", len(over), "of", len(lr), "steps overlap; chunks still coming at the first layer:",
      sorted(e["left_at_first"] for e in over))
PY
echo ok
