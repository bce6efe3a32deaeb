# test_bn_warning.sh: a short run whose batch-norm moving statistics have not
# converged (model.bn_momentum 0.999 averages over ~1000 steps) evaluates far
# below its train accuracy; weft says so once, naming what to change
# (model.bn_momentum), and with that change (0.9) the same run evaluates as
# it trains and says nothing.
. "$WEFT_SRC/tests/trainer/lib.sh"
"$WEFT" data synth --out t.h5 --count 1000 --size 16 --seed 1 --classes 4 >/dev/null
"$WEFT" data synth --out e.h5 --count 200 --size 16 --seed 2 --classes 4 >/dev/null
run() { # NAME BN_MOMENTUM
	"$WEFT" train --config /dev/stdin --device cpu --threads 2 --no-progress-line \
		--set data.train=t.h5 --set data.eval=e.h5 --set model.name=resnet20 \
		--set model.bn_momentum="$2" --set train.steps=150 --set train.batch_size=32 \
		--set optimizer.name=adam --set optimizer.lr=0.003 --set train.eval_every_steps=50 \
		--set log.dir="$1/logs" --set checkpoint.dir="$1/ckpt" <<<'{}' >"$1.out" 2>"$1.err" ||
		{ cat "$1.err"; fail "training $1 failed"; }
}
run slow 0.999
n=$(grep -c "warning: eval accuracy .* is far below the train accuracy" slow.err || true)
[ "$n" = 1 ] || { cat slow.err; fail "the batch-norm warning appeared $n times, want once"; }
grep -q "set model.bn_momentum: 0.9" slow.err || fail "the warning does not say what to change"
run fast 0.9
grep -q "far below the train accuracy" fast.err && fail "a warning with bn_momentum 0.9: $(cat fast.err)"
acc=$(last_metric fast/logs/metrics.jsonl eval_accuracy)
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 0.8 else 1)" "$acc" ||
	fail "with bn_momentum 0.9 the eval accuracy is only $acc"
echo "ok: warned once at momentum 0.999; at 0.9 eval accuracy $acc, no warning"
