# test_export_once.sh: the final export happens exactly once per final
# checkpoint, also when the chief ended before it.
#  1. The export fails after the final checkpoint (export.dir lies under a
#     plain file, as a chief killed during the export leaves no version):
#     the run fails naming export.dir, the final checkpoint is complete.
#  2. The command again with --resume (as `weft launch` restarts a chief; a
#     parameter-server chief resumes by default): nothing
#     left to train, it exports version 1 from the final checkpoint, and the
#     version serves the checkpoint's weights (weft eval: same accuracy).
#  3. Once more: "already exported", still exactly one version.
#  4. Without --resume in the same directories it trains again and exports
#     version 2 (a rewritten final checkpoint is a new one), and the record
#     does not spoil that checkpoint: --resume then takes it, exports nothing.
. "$WEFT_SRC/tests/trainer/lib.sh"
make_synth train.h5 256 8 1
make_synth eval.h5 128 8 2
cat >c.json <<'JSON'
{"model": {"name": "mlp"}, "data": {"train": "train.h5", "eval": "eval.h5"},
 "train": {"batch_size": 16, "steps": 30, "eval_every_steps": 30},
 "checkpoint": {"dir": "ckpt", "every_steps": 10},
 "optimizer": {"name": "sgd", "lr": 0.01, "momentum": 0.9},
 "export": {"dir": "blocker/models/m"},
 "log": {"dir": "logs", "every_steps": 10}}
JSON
train() { # EVENTS ARGS...: one run, its events in file EVENTS
	WEFT_EVENTS=$1 "$WEFT" train --config c.json --device cpu --threads 2 "${@:2}"
}
touch blocker
rc=0
train ev1 2>err1.txt || rc=$?
[ $rc != 0 ] || fail "the export under a plain file did not fail"
grep -q "export.dir" err1.txt || { cat err1.txt; fail "the error does not name export.dir"; }
[ -f ckpt/step-30/DONE ] || fail "no complete final checkpoint before the export"

rm blocker
train ev2 --resume 2>err2.txt || { cat err2.txt; fail "the restarted run failed"; }
[ "$(events ev2 count nothing_to_do step=30)" = 1 ] || { cat err2.txt; fail "the restarted run did not resume at the end"; }
[ "$(events ev2 get export version)" = 1 ] || { cat err2.txt; fail "the restarted run did not export version 1"; }
[ "$(ls blocker/models/m)" = 1 ] || fail "versions after the restart: $(ls blocker/models/m)"
accuracy() { # MODEL: top-1 accuracy of weft eval on eval.h5
	"$WEFT" eval --model "$1" --data eval.h5 --device cpu --json 2>/dev/null |
		python3 -c 'import json,sys; print([json.loads(l) for l in sys.stdin if l.startswith("{")][-1]["accuracy"])'
}
ckpt_acc=$(accuracy ckpt/step-30/model.h5)
exp_acc=$(accuracy blocker/models/m/1/model.h5)
[ "$ckpt_acc" = "$exp_acc" ] || fail "the exported version scores $exp_acc, the final checkpoint $ckpt_acc"

train ev3 --resume 2>err3.txt || { cat err3.txt; fail "the third run failed"; }
[ "$(events ev3 count export_skipped)" = 1 ] || { cat err3.txt; fail "the third run did not see the export"; }
[ "$(ls blocker/models/m)" = 1 ] || fail "a second export of the same checkpoint: $(ls blocker/models/m)"

train ev4 2>err4.txt || { cat err4.txt; fail "the fresh run failed"; }
[ "$(events ev4 get export version)" = 2 ] || { cat err4.txt; fail "a fresh run did not export a new version"; }
train ev5 --resume 2>err5.txt || { cat err5.txt; fail "--resume after the fresh run failed"; }
grep -q "skipped" err5.txt && { cat err5.txt; fail "the rewritten final checkpoint was skipped"; }
[ "$(events ev5 count export_skipped)" = 1 ] || { cat err5.txt; fail "the fresh run's export was not recorded"; }
[ "$(ls blocker/models/m | tr '\n' ' ')" = "1 2 " ] || fail "versions: $(ls blocker/models/m)"
echo ok
