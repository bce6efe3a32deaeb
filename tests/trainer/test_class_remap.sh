# test_class_remap.sh: model.init_from onto a data set that holds the
# pretrained model's classes in another order ("remapped by name"):
# the output layer's rows are taken by class name, so the model is as
# accurate on the reordered set before any further training as it was on the
# original (within 0.05); a set of other classes still gets a fresh head.
. "$WEFT_SRC/tests/trainer/lib.sh"
: "${WEFT_REORDER:?set WEFT_REORDER to the reorder_classes helper}"
"$WEFT" data synth --out a.h5 --count 600 --size 16 --seed 1 --classes 4 >/dev/null
"$WEFT" data synth --out ae.h5 --count 200 --size 16 --seed 2 --classes 4 >/dev/null
"$WEFT_REORDER" a.h5 b.h5
"$WEFT_REORDER" ae.h5 be.h5
cat >cfg.json <<'JSON'
{
  "model": {"name": "smallcnn"},
  "train": {"batch_size": 32, "steps": 120, "seed": 1},
  "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
  "log": {"every_steps": 20}
}
JSON
train() { # DIR ARGS...
	local d=$1
	shift
	"$WEFT" train --config cfg.json --device cpu --threads 1 --no-progress-line \
		--set log.dir="$d/logs" --set checkpoint.dir="$d/ckpt" "$@" >"$d.out" 2>"$d.err" || {
		cat "$d.err"
		fail "training $d failed"
	}
}
ge() { python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= float(sys.argv[2]) else 1)' "$1" "$2"; }

train pre --set data.train=a.h5 --set data.eval=ae.h5
acc0=$(last_metric pre/logs/metrics.jsonl eval_accuracy)
ge "$acc0" 0.7 || fail "the pretrained model reaches only $acc0 (chance: 0.25)"
# One step at a negligible learning rate: the eval accuracy is the remapped model's.
train ft --set data.train=b.h5 --set data.eval=be.h5 --set model.init_from=pre/ckpt \
	--set train.steps=1 --set optimizer.lr=1e-9
cat ft.err
grep -q "model.init_from: b.h5 holds the classes of pre/ckpt/step-120/model.h5 in another order: the output layer's rows are taken by class name" ft.err ||
	fail "no notice of the remap by class name"
grep -q "model.init_from: 4 of 4 layers initialised" ft.err || fail "the head was not initialised"
acc=$(last_metric ft/logs/metrics.jsonl eval_accuracy)
echo "eval accuracy: pretrained on a.h5 $acc0; initialised onto the reordered classes of b.h5 $acc"
ge "$acc" "$(python3 -c "print($acc0 - 0.05)")" ||
	fail "after init_from onto reordered classes the accuracy is $acc, pretrained $acc0 (rows not taken by name?)"
# the fine-tuned model carries the new order and scores the reordered set as weft eval
"$WEFT" eval --model ft/ckpt/step-1/model.h5 --data be.h5 --device cpu >eval.out 2>eval.err ||
	fail "weft eval on the reordered set: $(cat eval.err)"
ea=$(sed -n 's/.*accuracy \([0-9.]*\) top-5.*/\1/p' eval.out)
ge "$ea" "$(python3 -c "print($acc0 - 0.05)")" || fail "weft eval: accuracy $ea, pretrained $acc0"

# A partial overlap: c.h5 holds the 4 classes and a fifth (synthetic class
# names are shapes: square, hollow_square, circle, ring, hstripes). The head
# keeps the 4 rows by name and starts the fifth fresh, so right after init the
# 4 shared classes score as the pretrained model did.
"$WEFT" data synth --out c.h5 --count 200 --size 16 --seed 3 --classes 5 >/dev/null
"$WEFT" data synth --out ce.h5 --count 400 --size 16 --seed 4 --classes 5 >/dev/null
train part --set data.train=c.h5 --set model.init_from=pre/ckpt --set train.steps=1 \
	--set optimizer.lr=1e-9
grep -q "model.init_from: c.h5 shares 4 of its 5 classes with the 4 of pre/ckpt/step-120/model.h5: the output layer keeps their rows (by class name), the 1 others start fresh" part.err ||
	fail "partial overlap: $(cat part.err)"
"$WEFT" eval --model part/ckpt/step-1/model.h5 --data ce.h5 --device cpu --json >part.json 2>/dev/null ||
	fail "weft eval of the partly initialised model"
shared=$(python3 -c 'import json,sys
r=[json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]
pc=r["per_class_accuracy"]
print(sum(pc[i] for i in range(4)) / 4)' part.json)
echo "partial overlap: the 4 shared classes right after init: per-class accuracy $shared (pretrained $acc0)"
ge "$shared" "$(python3 -c "print($acc0 - 0.1)")" ||
	fail "the shared classes' rows were not kept: accuracy $shared, pretrained $acc0"
echo ok
