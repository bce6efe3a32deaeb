# test_elastic_batch.sh: strategy.elastic_batch global keeps the global
# batch of elastic allreduce whatever the workers present: a step trains the
# micro-batches of all the cluster's worker slots, shared among the workers
# there, and the update is their mean.
# 1. No change, fewer workers than slots, 12 steps. 2 workers of --elastic
#    2:4 (two micro-batches each) end within 1e-4 of one process with
#    --accumulate 4; 2 of 2:3 (two micro-batches and one) within 1e-4 of 3
#    of 3:3, which train one each (both sum batch means and divide by 3;
#    one process with --accumulate 3 scales each sample by 1 / 48, which
#    rounds otherwise, and on this small chaotic model rounding differences
#    grow to whole digits within tens of steps, so only short runs compare
#    value by value); with elastic_batch worker (each its own batch) 2 of
#    2:3 do not.
# 2. A join mid-run (2 of 3, then 3): every step reads 3 batches whoever
#    trains (the join's data position is restored_step x 48 samples into
#    the data, where each worker's own batches would give 32 a step before
#    it), and the job trains (the mean loss of its last 10 logged steps is
#    under half the first: one step's loss on this small model swings by 3x
#    from one step to the next).
. "$WEFT_SRC/tests/ps/lib.sh"
CMP="$WEFT_SRC/tests/trainer/compare_dump.py"
make_synth train.h5 480 16 3
export OMP_NUM_THREADS=1
config() { # config FILE STEPS
	cat >"$1" <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "train.h5", "augment": true},
 "train": {"batch_size": 16, "steps": $2, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9}, "log": {"every_steps": 4},
 "strategy": {"name": "allreduce", "elastic_batch": "global", "stall_timeout": 10},
 "checkpoint": {"every_steps": 0}}
JSON
}
# single MAX STEPS: one process with --accumulate MAX into single-MAX-STEPS/
single() {
	"$WEFT" train --config g$2.json --device cpu --threads 1 --accumulate "$1" \
		--set strategy.name=local --set strategy.elastic_batch=worker \
		--set checkpoint.dir=single-$1-$2/ckpt --set log.dir=single-$1-$2/logs \
		2>single-$1-$2.err || { cat single-$1-$2.err; fail "--accumulate $1 run failed"; }
	"$WEFT" inspect --model single-$1-$2/ckpt/step-$2/model.h5 --dump >single-$1-$2.txt
}

# ---- 1. fewer workers than slots, no change ---------------------------------
config g12.json 12
# ring W MAX BATCH: W workers of --elastic W:MAX, strategy.elastic_batch BATCH, dumped to r-W-MAX-BATCH.txt
ring() {
	local n=r-$1-$2-$3
	launch_bg $n.log --workers $1 --elastic $1:$2 --threads 2 --config g12.json \
		--set strategy.elastic_batch=$3 --set checkpoint.dir=$n/ckpt --set log.dir=$n/logs
	wait_launch 60 || fail "$1 workers of --elastic $1:$2 (elastic_batch $3) failed"
	"$WEFT" inspect --model $n/ckpt/step-12/model.h5 --dump >$n.txt
}
single 4 12
ring 2 4 global
python3 "$CMP" single-4-12.txt r-2-4-global.txt 1e-4 ||
	fail "2 workers of 2:4 with elastic_batch global differ from --accumulate 4"
ring 3 3 global
ring 2 3 global
python3 "$CMP" r-3-3-global.txt r-2-3-global.txt 1e-4 ||
	fail "2 workers of 2:3 with elastic_batch global differ from 3 of 3"
ring 2 3 worker
python3 "$CMP" r-3-3-global.txt r-2-3-worker.txt 1e-3 >/dev/null &&
	fail "elastic_batch worker with 2 of 3 workers equals 3 of 3: the setting changed nothing"
# without elastic membership (no --elastic) global is refused, by name
"$WEFT" train --config g12.json --set strategy.name=parameter_server 2>ps.err &&
	fail "elastic_batch global with parameter servers, not elastic, was accepted"
grep -q "strategy.elastic_batch: global needs elastic membership" ps.err ||
	fail "the refusal does not name strategy.elastic_batch: $(cat ps.err)"

# ---- 2. a join mid-run ------------------------------------------------------
steps=600
for attempt in 1 2 3; do
	rm -rf join "$WEFT_EVENTS"
	config g$steps.json $steps
	launch_bg join.log --workers 2 --elastic 2:3 --threads 2 --config g$steps.json \
		--set checkpoint.dir=join/ckpt --set log.dir=join/logs
	events wait ring_reformed 60 who=worker:0 reason=start >/dev/null || fail "no first ring"
	kill -USR1 "$LAUNCH_PID"
	rc=0
	wait_launch 120 || rc=$?
	[ $rc = 0 ] || fail "the job with a join exited $rc"
	[ "$(events count ring_reformed who=worker:0 reason=join workers=3)" -ge 1 ] && break
	[ $attempt = 3 ] && fail "the job ended before worker 2 joined, three times"
	echo "attempt $attempt: the job ($steps steps) ended before the join; again, longer"
	steps=$((steps * 2))
done
python3 - "$WEFT_EVENTS" join/logs/metrics.jsonl <<'PY' || fail "the join's data position, or the training"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
m = [json.loads(l) for l in open(sys.argv[2]) if "loss" in l]
j = [e for e in ev if e.get("event") == "ring_reformed" and e["who"] == "worker:0" and e["reason"] == "join"][0]
# an epoch is 10 steps of 3 batches of 16 (480 samples, none left over)
at = j["epoch"] * 480 + j["offset"]
assert j["workers"] == 3 and at == j["restored_step"] * 48, (j, at)
last = sum(x["loss"] for x in m[-10:]) / len(m[-10:])
assert last < 0.5 * m[0]["loss"], (m[0], m[-10:])
print("joined at step", j["restored_step"], "data position", j["epoch"], j["offset"],
      "loss", m[0]["loss"], "-> mean of the last 10", last)
PY
echo ok
