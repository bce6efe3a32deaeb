# test_evaluator.sh: an `evaluator` task in TF_CONFIG. Hand-started
# processes (one ps, one worker that is the chief, one evaluator) train with
# checkpoints every 20 steps; the evaluator evaluates new complete
# checkpoints as they appear, appends each to log.dir/eval.jsonl, and exits 0
# after the last step's, whose accuracy is what `weft eval` says of it. The
# worker pauses 3 s before step 30 (WEFT_PS_DEBUG_STALL), so the evaluator,
# which polls every second, sees step 20 before the run ends.
. "$WEFT_SRC/tests/ps/lib.sh"
make_synth train.h5 1024 16 3
make_synth eval.h5 256 16 4
"$WEFT" keygen --out keys >/dev/null || fail "weft keygen"
export WEFT_KEY_DIR=$WORK/keys # every task finds the cluster's CURVE keys here
cat >c.json <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "train.h5", "eval": "eval.h5"},
 "train": {"batch_size": 16, "steps": 60, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.02, "momentum": 0.9},
 "strategy": {"name": "parameter_server", "mode": "sync"},
 "checkpoint": {"dir": "run/ckpt", "every_steps": 20, "keep": 5},
 "log": {"dir": "run/logs", "every_steps": 10}}
JSON
read -r p1 p2 p3 < <(free_ports 3)
cluster="{\"ps\": [\"127.0.0.1:$p1\"], \"worker\": [\"127.0.0.1:$p2\"], \"evaluator\": [\"127.0.0.1:$p3\"]}"
# start TYPE LOG: one task of the cluster in the background, in its own
# process group (killed by lib.sh's cleanup on any exit)
start() {
	WEFT_PS_DEBUG_STALL=0:30:3 \
		TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"$1\", \"index\": 0}}" \
		setsid "$WEFT" train --config c.json --device cpu --threads 1 >"$2" 2>&1 &
	LAUNCH_PIDS+=("$!")
}
start evaluator evaluator.log
eval_pid=$!
start ps ps.log
start worker worker.log
worker_pid=$!
rc=0
wait "$worker_pid" || rc=$?
[ $rc = 0 ] || fail "the worker exited $rc"
for ((i = 0; i < 600; i++)); do
	kill -0 "$eval_pid" 2>/dev/null || break
	sleep 0.1
done
rc=0
wait "$eval_pid" || rc=$?
[ $rc = 0 ] || fail "the evaluator exited $rc"
grep -q "evaluator: watching run/ckpt" evaluator.log || fail "the evaluator did not start"
[ -f run/logs/eval.jsonl ] || fail "no run/logs/eval.jsonl"
python3 - run/logs/eval.jsonl <<'PY' || fail "eval.jsonl is wrong: $(cat run/logs/eval.jsonl)"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r["step"] for r in rows]
assert steps == sorted(set(steps)), steps  # each checkpoint once, in order
assert steps[-1] == 60 and 20 in steps, steps
assert all(0 <= r["eval_accuracy"] <= 1 and r["eval_loss"] > 0 for r in rows), rows
PY
last=$(tail -1 run/logs/eval.jsonl | python3 -c 'import json,sys; print(json.load(sys.stdin)["eval_accuracy"])')
ref=$("$WEFT" eval --model run/ckpt/step-60/model.h5 --data eval.h5 --json | tail -1 |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["accuracy"])')
python3 -c "import sys; sys.exit(0 if abs($last - $ref) < 1e-6 else 1)" ||
	fail "the evaluator says $last for step 60, weft eval says $ref"
grep -q "evaluator: step 60: " evaluator.log || fail "the evaluator did not log step 60"
echo "ok: evaluated steps $(python3 -c 'import json,sys; print([json.loads(l)["step"] for l in open(sys.argv[1])])' run/logs/eval.jsonl), accuracy $last"
