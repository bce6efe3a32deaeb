# test_divergence_ckpt.sh: a run that diverges slowly (the loss climbs for 20
# steps before it crosses train.divergence_factor) writes checkpoints on the
# way up; none of them may become the newest good one. The checkpoints from
# the last healthy step on are marked DIVERGED, pruning kept the last
# confirmed one (keep 3 would otherwise have deleted it), and resume and
# export take it.
. "$WEFT_SRC/tests/trainer/lib.sh"
make_synth train.h5 512 16 1
make_synth eval.h5 128 16 2
cat >cfg.json <<'JSON'
{"model": {"name": "mlp"}, "data": {"train": "train.h5", "eval": "eval.h5"},
 "train": {"batch_size": 16, "steps": 5, "eval_every_steps": 0, "seed": 1},
 "optimizer": {"lr": 0.01}, "log": {"dir": "logs", "every_steps": 1},
 "checkpoint": {"dir": "ck", "every_steps": 5, "keep": 3}}
JSON
"$WEFT" train --config cfg.json --device cpu --no-progress-line 2>/dev/null ||
	fail "the healthy first 5 steps failed"
# lr 0.05 from step 5 on: the loss rises from ~3 to ~40 by step 26
set +e
"$WEFT" train --config cfg.json --device cpu --no-progress-line --resume \
	--set optimizer.lr=0.05 --set train.steps=60 2>div.err
rc=$?
set -e
cat div.err
[ $rc = 2 ] || fail "the diverging run exited $rc, want 2"
failed=$(grep -Eo "loss is [^ ]+ at step [0-9]+" div.err | grep -Eo "[0-9]+$")
[ "$failed" -gt 10 ] || fail "the run diverged at step $failed: too early to write checkpoints on the way up"
# every checkpoint the run wrote is marked, with its reason; step-5 is intact
written=0
for d in ck/step-*; do
	s=${d#ck/step-}
	if [ "$s" = 5 ]; then
		[ -f $d/DONE ] && [ ! -f $d/DIVERGED ] || fail "step-5, written before the divergence, lost its DONE"
		continue
	fi
	written=$((written + 1))
	[ ! -f $d/DONE ] || fail "$d, written while the loss climbed, still has DONE"
	grep -q "the last whose loss was at most the first step's" $d/DIVERGED || fail "$d has no DIVERGED reason"
done
[ $written -ge 2 ] || fail "only $written checkpoints written while diverging: $(ls ck)"
grep -q "ck/step-$((failed - 1 - (failed - 1) % 5)) marked DIVERGED" div.err || fail "the marking is not reported"
# export and resume take step-5, saying why they skip the newer ones
"$WEFT" export --checkpoint ck --out exp/m >exp.out 2>exp.err || { cat exp.err; fail "export failed"; }
grep -q "exported ck/step-5/model.h5" exp.out exp.err || { cat exp.out exp.err; fail "export did not take step-5"; }
grep -q "skipped: .*written while the run diverged" exp.err || { cat exp.err; fail "export does not say why it skipped"; }
"$WEFT" eval --model exp/m/1/model.h5 --data eval.h5 --device cpu --json >ev.json
python3 -c 'import json,sys; r=json.loads(open("ev.json").read().splitlines()[-1]); sys.exit(0 if r["loss"] < 5 else 1)' ||
	fail "the newest good checkpoint evaluates to $(cat ev.json)"
"$WEFT" train --config cfg.json --device cpu --no-progress-line --resume --set train.steps=10 \
	2>res.err || { cat res.err; fail "resume after the divergence failed"; }
grep -q "resuming from ck/step-5 " res.err || { cat res.err; fail "resume did not take step-5"; }
[ -f ck/step-10/DONE ] && [ ! -f ck/step-10/DIVERGED ] || fail "step-10 written again is not a plain complete step"
echo PASS
