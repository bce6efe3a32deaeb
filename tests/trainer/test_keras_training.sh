# test_keras_training.sh: training that does what Keras does.
# On a small high-contrast image set (make_digits.py) with the hyperparameters
# a Keras user copies (SGD lr 0.05, momentum 0.9, cosine with warm-up):
# - the old default initialisation (he_normal convs) dies at chance, Keras's
#   default (glorot_uniform, what model.kernel_initializer auto gives) learns;
# - a forced divergence stops with the documented exit code (1..127), a
#   message naming the step, the loss and what to try, and no checkpoint
#   written past the failure;
# - global clipping keeps a too-high learning rate finite; label smoothing
#   shows in the loss floor.
. "$WEFT_SRC/tests/trainer/lib.sh"
python3 "$WEFT_SRC/tests/trainer/make_digits.py" train.bin 1500 5
python3 "$WEFT_SRC/tests/trainer/make_digits.py" eval.bin 300 6
"$WEFT" data cifar10 --out train.h5 train.bin >/dev/null
"$WEFT" data cifar10 --out eval.h5 eval.bin >/dev/null
cat >cfg.json <<'JSON'
{
  "model": {"name": "smallcnn"},
  "data": {"train": "train.h5", "eval": "eval.h5"},
  "train": {"batch_size": 32, "steps": 150, "seed": 1},
  "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9,
                "schedule": {"name": "cosine", "warmup_steps": 20}},
  "log": {"every_steps": 10}
}
JSON
train() { # DIR ARGS...: train into DIR
	local d=$1
	shift
	"$WEFT" train --config cfg.json --device cpu --threads 1 --no-progress-line \
		--set log.dir="$d/logs" --set checkpoint.dir="$d/ckpt" "$@"
}
ge() { python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= float(sys.argv[2]) else 1)' "$1" "$2"; }

# 1. Same network, data and hyperparameters: the old init at chance, Keras's learns.
train old --set model.kernel_initializer=he_normal >/dev/null 2>old.err || {
	cat old.err
	fail "he_normal run failed"
}
old=$(last_metric old/logs/metrics.jsonl eval_accuracy)
train new >/dev/null 2>new.err || {
	cat new.err
	fail "default run failed"
}
new=$(last_metric new/logs/metrics.jsonl eval_accuracy)
echo "eval accuracy: he_normal (old default) $old, auto (glorot_uniform) $new"
ge 0.3 "$old" || fail "he_normal no longer reproduces the divergence ($old): the test lost its point"
ge "$new" 0.9 || fail "Keras-default initialisation reaches only $new (want >= 0.9)"
grep -q '"kernel_initializer": "auto"' new/logs/config.json || fail "resolved config lacks model.kernel_initializer"

# 2. Forced divergence: lr 2 explodes within a few steps; checkpoints every step.
set +e
train div --set optimizer.lr=2 --set checkpoint.every_steps=1 >div.out 2>div.err
rc=$?
set -e
cat div.err
[ "$rc" -ge 1 ] && [ "$rc" -le 127 ] || fail "diverged run exited $rc (want 1..127)"
# the exit code is the one the config table (--help-config, README) and the
# README's divergence note give
"$WEFT" train --help-config | grep "train.divergence_factor" | grep -Eq "exit $rc([^0-9]|$)" ||
	fail "--help-config gives another exit code than $rc: $("$WEFT" train --help-config | grep train.divergence_factor)"
for n in $(grep -A2 "train.divergence_factor" "$WEFT_SRC/README.md" | grep -Eo "exits? [0-9]+" | grep -Eo "[0-9]+"); do
	[ "$n" = "$rc" ] || fail "README says divergence exits $n, the run exited $rc"
done
grep -Eq "loss is [^ ]+ at step [0-9]+" div.err || fail "message names no step and loss"
grep -q "optimizer.lr" div.err && grep -q "clipnorm" div.err || fail "message says nothing to try"
failed=$(grep -Eo "at step [0-9]+" div.err | head -1 | grep -Eo "[0-9]+")
newest=$(ls div/ckpt | sed -n 's/^step-//p' | sort -n | tail -1)
[ -z "$newest" ] || [ "$newest" -lt "$failed" ] || fail "checkpoint step-$newest written at/after the failure at step $failed"
if [ -n "$newest" ]; then
	"$WEFT" eval --model "div/ckpt/step-$newest/model.h5" --data eval.h5 --device cpu --json >ev.json ||
		fail "the last checkpoint before the divergence does not evaluate"
	python3 -c 'import json,math,sys; r=json.loads(open("ev.json").read().splitlines()[-1]); sys.exit(0 if math.isfinite(r["loss"]) else 1)' ||
		fail "the last checkpoint before the divergence is not finite: $(cat ev.json)"
fi
# A non-finite loss too (lr 1e5: inf/nan at once).
set +e
train div2 --set optimizer.lr=1e5 --set train.divergence_factor=0 >/dev/null 2>div2.err
rc=$?
set -e
[ "$rc" -ge 1 ] && [ "$rc" -le 127 ] || fail "non-finite run exited $rc"
grep -Eq "(loss is (nan|inf|-nan)|parameters are not finite)" div2.err || fail "no non-finite message: $(cat div2.err)"
[ -z "$(ls div2/ckpt 2>/dev/null)" ] || fail "a diverged run wrote a checkpoint: $(ls div2/ckpt)"

# 3. The same lr 2 with global clipping stays finite to the end.
train clip --set optimizer.lr=2 --set optimizer.global_clipnorm=1 --set train.steps=40 \
	>/dev/null 2>clip.err || {
	cat clip.err
	fail "global_clipnorm did not keep lr 2 from diverging"
}

# 4. Label smoothing 0.1 over 10 classes: the loss cannot fall below the
# smoothed targets' entropy (~0.5); without it the same run goes near 0.
train ls --set train.label_smoothing=0.1 >/dev/null 2>ls.err || {
	cat ls.err
	fail "label smoothing run failed"
}
lsl=$(last_metric ls/logs/metrics.jsonl loss)
lsa=$(last_metric ls/logs/metrics.jsonl eval_accuracy)
nol=$(last_metric new/logs/metrics.jsonl loss)
echo "final loss: smoothing 0.1 $lsl (eval accuracy $lsa), none $nol"
ge "$lsl" 0.45 || fail "label smoothing loss $lsl below the smoothed entropy floor"
ge 0.2 "$nol" || fail "unsmoothed loss $nol not near 0"
ge "$lsa" 0.9 || fail "label smoothing hurt accuracy: $lsa"
echo ok
