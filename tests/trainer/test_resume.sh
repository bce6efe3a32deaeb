# test_resume.sh: a run stopped half way and resumed ends with the same
# parameters as one that never stopped: bitwise on ref, 1e-6 relative on cpu.
# Also: SIGTERM writes a checkpoint and exits 130; --resume without a
# checkpoint starts fresh; directories without DONE are ignored.
. "$WEFT_SRC/tests/trainer/lib.sh"
make_synth train.h5 256 8 1
# resnet20: batch norm state and its running statistics must survive a resume too.
model=${WEFT_RESUME_MODEL:-resnet20}
cat >c.json <<JSON
{"model": {"name": "$model"},
 "data": {"train": "train.h5", "augment": true, "crop_padding": 2},
 "train": {"batch_size": 8, "steps": 12, "seed": 5},
 "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": true,
               "weight_decay": 1e-4, "schedule": {"name": "cosine", "warmup_steps": 3}},
 "checkpoint": {"every_steps": 3, "keep": 2},
 "log": {"every_steps": 2}}
JSON

check_resume() { # device tolerance extra-set...
	local dev=$1 tol=$2
	shift 2
	"$WEFT" train --config c.json --device $dev --threads 2 "$@" \
		--set checkpoint.dir=$dev-full/ckpt --set log.dir=$dev-full/logs 2>/dev/null ||
		fail "$dev: uninterrupted run failed"
	"$WEFT" train --config c.json --device $dev --threads 2 "$@" --stop-at-step 6 \
		--set checkpoint.dir=$dev-half/ckpt --set log.dir=$dev-half/logs 2>/dev/null ||
		fail "$dev: first half failed"
	# An incomplete newer checkpoint must be ignored.
	mkdir -p $dev-half/ckpt/step-9 && touch $dev-half/ckpt/step-9/model.h5
	"$WEFT" train --config c.json --device $dev --threads 2 "$@" --resume \
		--set checkpoint.dir=$dev-half/ckpt --set log.dir=$dev-half/logs 2>resume.err ||
		{ cat resume.err; fail "$dev: resumed run failed"; }
	grep -q "resuming from $dev-half/ckpt/step-6" resume.err || fail "$dev: did not resume at 6"
	"$WEFT" inspect --model $dev-full/ckpt/step-12/model.h5 --dump >full.txt
	"$WEFT" inspect --model $dev-half/ckpt/step-12/model.h5 --dump >half.txt
	python3 "$WEFT_SRC/tests/trainer/compare_dump.py" full.txt half.txt $tol ||
		fail "$dev: resumed parameters differ from the uninterrupted run"
	if [ "$tol" = 0 ]; then cmp -s full.txt half.txt || fail "$dev: not bitwise equal"; fi
	# The resumed metrics.jsonl continues the first half's: every step once, and
	# the same losses as the uninterrupted run.
	python3 - $dev-full/logs/metrics.jsonl $dev-half/logs/metrics.jsonl $tol <<'PY' ||
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
tol = float(sys.argv[3])
assert [r["step"] for r in a] == [r["step"] for r in b], (a, b)
for x, y in zip(a, b):
    assert abs(x["loss"] - y["loss"]) <= tol * max(abs(x["loss"]), 1e-3), (x, y)
PY
		fail "$dev: metrics of the resumed run differ"
	# keep=2: only the two newest complete checkpoints remain.
	[ "$(ls -d $dev-half/ckpt/step-*/DONE | wc -l)" = 2 ] || fail "$dev: keep=2 not honoured"
}

check_resume ref 0
check_resume cpu 1e-6 --set optimizer.name=adam --set optimizer.lr=0.003

# --resume with no checkpoint: a fresh start with a notice.
"$WEFT" train --config c.json --device cpu --resume --set train.steps=2 \
	--set checkpoint.dir=fresh/ckpt --set log.dir=fresh/logs 2>fresh.err ||
	fail "--resume without checkpoint failed"
grep -q "starting fresh" fresh.err || fail "no notice for a fresh start"

# SIGTERM: finishes the step, writes a checkpoint, exits 130.
"$WEFT" train --config c.json --device ref --set train.steps=100000 \
	--set checkpoint.every_steps=0 --set checkpoint.dir=sig/ckpt --set log.dir=sig/logs \
	2>sig.err &
pid=$!
for _ in $(seq 100); do
	[ -s sig/logs/metrics.jsonl ] && break
	sleep 0.1
done
kill -TERM $pid
rc=0
wait $pid || rc=$?
[ "$rc" = 130 ] || { cat sig.err; fail "SIGTERM exit code $rc, want 130"; }
ls sig/ckpt/step-*/DONE >/dev/null 2>&1 || fail "no checkpoint after SIGTERM"
echo ok
