# test_convergence.sh: the quick start's job, `weft launch --ps 1 --workers 2`
# with configs/synth-smallcnn.json, reaches the single-process bar (>= 95%
# eval accuracy) on the synthetic data set, and every process exits 0.
. "$WEFT_SRC/tests/ps/lib.sh"
mkdir -p data
make_synth data/synth-train.h5 12000 32 1
make_synth data/synth-eval.h5 2000 32 2
"$WEFT" launch --ps 1 --workers 2 --config "$WEFT_SRC/configs/synth-smallcnn.json" \
	--set train.steps=500 --set checkpoint.dir=run/ckpt --set log.dir=run/logs >launch.log 2>&1 ||
	fail "launch exited $?"
grep -q "\[launch\] done: every process exited 0" launch.log || fail "not every process exited 0"
grep -q "\[ps:0\] .*shut down by the chief" launch.log || fail "the server was not shut down"
[ -f run/ckpt/step-500/DONE ] || fail "no complete final checkpoint"
[ -f run/ckpt/step-500/ps-0-of-1.h5 ] || fail "no server shard in the final checkpoint"
acc=$(eval_accuracy run/logs/metrics.jsonl)
python3 -c "import sys; sys.exit(0 if float('$acc') >= 0.95 else 1)" ||
	fail "eval accuracy $acc < 0.95"
acc2=$("$WEFT" eval --model run/ckpt/step-500/model.h5 --data data/synth-eval.h5 --json | tail -1 |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["accuracy"])')
python3 -c "import sys; sys.exit(0 if abs($acc2 - $acc) < 1e-6 else 1)" ||
	fail "weft eval of the final model says $acc2, training said $acc"
echo "ok: eval accuracy $acc"
