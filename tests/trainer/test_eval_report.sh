# test_eval_report.sh: what a Keras user reads after training.
# weft eval --json adds top-5 accuracy, per-class accuracy and the confusion
# matrix (consistent with the top-1 accuracy); class names are checked
# (evaluating or validating on a data set whose classes are other names is
# an error showing both lists); TensorBoard gets Keras's train/ and
# validation/ runs with the same tags, so the curves overlay.
. "$WEFT_SRC/tests/trainer/lib.sh"
make_synth tr.h5 1000 32 1
make_synth ev.h5 300 32 2
python3 "$WEFT_SRC/tests/trainer/make_digits.py" d.bin 50 1
"$WEFT" data cifar10 --out other.h5 d.bin >/dev/null # 10 classes named airplane ... truck
run() {
	"$WEFT" train --config /dev/stdin --device cpu --threads 1 --no-progress-line \
		--set data.train=tr.h5 --set train.steps=60 --set train.batch_size=32 \
		--set optimizer.lr=0.05 --set log.every_steps=20 --set train.eval_every_steps=30 \
		--set log.dir=lg --set checkpoint.dir=ck "$@" <<<'{}'
}
run --set data.eval=ev.h5 >/dev/null 2>err.txt || { cat err.txt; fail "training failed"; }
"$WEFT" eval --model ck/step-60/model.h5 --data ev.h5 --device cpu --json >ev.txt || fail "weft eval failed"
python3 - <<'PY' || fail "eval --json report: $(tail -1 ev.txt)"
import json
r = json.loads(open("ev.txt").read().splitlines()[-1])
k, cm = len(r["class_names"]), r["confusion_matrix"]
assert k == 10 and r["class_names"][0] == "square", r["class_names"]
assert len(cm) == k and all(len(row) == k for row in cm)
assert sum(map(sum, cm)) == r["count"] == 300
assert abs(sum(cm[i][i] for i in range(k)) / 300 - r["accuracy"]) < 1e-9
for i in range(k):
    n = sum(cm[i])
    assert (r["per_class_accuracy"][i] is None) if n == 0 else abs(r["per_class_accuracy"][i] - cm[i][i] / n) < 1e-9
assert r["accuracy"] <= r["top5_accuracy"] <= 1 and r["top5_accuracy"] > 0.5
m = [json.loads(l) for l in open("lg/metrics.jsonl")]
assert any("eval_top5_accuracy" in x for x in m)
print("eval report ok: accuracy", r["accuracy"], "top-5", r["top5_accuracy"])
PY
# TensorBoard: train/ and validation/ runs, both with epoch_loss and epoch_accuracy
for run in train validation; do
	f=$(ls lg/$run/events.out.tfevents.* 2>/dev/null | head -1)
	[ -n "$f" ] || fail "no TensorBoard $run run"
	grep -aq epoch_loss "$f" && grep -aq epoch_accuracy "$f" || fail "$run run lacks Keras's tags"
done
# Class names: a data set with other names is refused, both lists shown
set +e
"$WEFT" eval --model ck/step-60/model.h5 --data other.h5 --device cpu >/dev/null 2>names.err
rc=$?
set -e
cat names.err
[ "$rc" -ge 1 ] && [ "$rc" -le 127 ] || fail "eval on other class names exited $rc"
grep -q "class names differ" names.err && grep -q "square" names.err && grep -q "airplane" names.err ||
	fail "the error does not show both lists"
set +e
run --set data.eval=other.h5 --set log.dir=lg2 --set checkpoint.dir=ck2 >/dev/null 2>names2.err
rc=$?
set -e
[ "$rc" -ge 1 ] && [ "$rc" -le 127 ] && grep -q "class names differ" names2.err ||
	fail "data.eval with other class names is not refused: $(cat names2.err)"
echo ok
