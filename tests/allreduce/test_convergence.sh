# test_convergence.sh: `mpirun -np 2` on the quick start's synthetic data and
# configs/synth-smallcnn.json reaches the single-process bar (>= 95% eval
# accuracy), rank 0 alone writes the logs, and `weft eval` of the final
# checkpoint agrees.
. "$WEFT_SRC/tests/allreduce/lib.sh"
mkdir data
make_synth data/synth-train.h5 4000 16 1
make_synth data/synth-eval.h5 500 16 2
export OMP_NUM_THREADS=1
start=$SECONDS
weft_mpirun 2 train --config "$WEFT_SRC/configs/synth-smallcnn.json" --device cpu --threads 1 \
	--set strategy.name=allreduce --set log.dir=run/logs --set checkpoint.dir=run/ckpt \
	>out.txt 2>err.txt || { cat err.txt; fail "mpirun -np 2 training failed"; }
elapsed=$((SECONDS - start))
acc=$(last_metric run/logs/metrics.jsonl eval_accuracy)
echo "2 ranks: eval accuracy $acc after ${elapsed}s"
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 0.95 else 1)" "$acc" ||
	fail "eval accuracy $acc < 0.95"
grep -q "allreduce: 2 ranks" err.txt || fail "did not run as 2 allreduce ranks"
[ "$(ls run/logs/*tfevents* | wc -l)" -eq 1 ] || fail "expected one TensorBoard file (rank 0's)"
[ -f run/ckpt/step-1000/DONE ] || fail "no final checkpoint"
"$WEFT" eval --model run/ckpt/step-1000/model.h5 --data data/synth-eval.h5 --device cpu \
	--json >eval.txt || fail "weft eval failed"
python3 - "$acc" <<'PY' || fail "weft eval disagrees with training: $(cat eval.txt)"
import json, sys
r = json.loads(open("eval.txt").read().splitlines()[-1])
assert r["trained_steps"] == 1000, r
assert abs(r["accuracy"] - float(sys.argv[1])) < 1e-6, r
PY
echo ok
