# test_chief_restart.sh: the chief killed with SIGKILL before the job's first
# checkpoint is restarted by `weft launch` (--resume, nothing to resume from)
# and rejoins the servers at their step: no rollback to step 0 (the servers
# still hold the job), the job finishes with the right accuracy.
. "$WEFT_SRC/tests/ps/lib.sh"
mkdir -p data
make_synth data/train.h5 2000 16 1
make_synth data/eval.h5 500 16 2
launch_bg launch.log --ps 1 --workers 2 --threads 2 --config "$WEFT_SRC/configs/synth-smallcnn.json" \
	--set data.train=data/train.h5 --set data.eval=data/eval.h5 --set train.steps=600 \
	--set train.eval_every_steps=600 --set checkpoint.dir=run/ckpt --set checkpoint.every_steps=0 \
	--set log.dir=run/logs --set log.every_steps=20
wait_for launch.log '\[worker:0\] step +60/' 60
kill -9 "$(pid_of worker:0)"
rc=0
wait_launch 120 || rc=$?
[ $rc = 0 ] || fail "launch exited $rc"
[ "$(events count exited task=worker:0 signal=9 restart=true)" = 1 ] || fail "the chief was not restarted"
grep -qE "\[worker:0\] .*the chief rejoins the servers at step [0-9]+ \(no checkpoint yet\)" launch.log ||
	fail "the restarted chief did not rejoin the servers' step"
[ "$(events count rollback)" = 0 ] || fail "the job rolled back"
step=$(events get join step who=worker:0) || fail "no join event of the chief"
[ "$step" -ge 60 ] || fail "the chief rejoined at step $step, before the kill"
[ -f run/ckpt/step-600/DONE ] || fail "no complete final checkpoint"
acc=$(eval_accuracy run/logs/metrics.jsonl)
python3 -c "import sys; sys.exit(0 if $acc >= 0.9 else 1)" || fail "eval accuracy $acc"
echo "ok: rejoined at step $step, eval accuracy $acc"
