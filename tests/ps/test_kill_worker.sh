# test_kill_worker.sh: a worker killed with SIGKILL mid-run is restarted by
# `weft launch` with the same TF_CONFIG, rejoins at the servers' current step
# (reading the run's keys from the memory file it inherits: nothing on disk)
# and the job finishes; the chief's checkpoints are complete.
. "$WEFT_SRC/tests/ps/lib.sh"
mkdir -p data
make_synth data/train.h5 4000 32 1
make_synth data/eval.h5 1000 32 2
mkdir tmp
export TMPDIR=$WORK/tmp # the run's keys must not land here (or anywhere on disk)
launch_bg launch.log --ps 1 --workers 2 --config "$WEFT_SRC/configs/synth-smallcnn.json" \
	--set data.train=data/train.h5 --set data.eval=data/eval.h5 --set train.steps=300 \
	--set train.eval_every_steps=300 --set checkpoint.dir=run/ckpt --set checkpoint.every_steps=50 \
	--set log.dir=run/logs --set log.every_steps=10
wait_for launch.log '\[worker:1\] step +100/' 60
pid=$(pid_of worker:1)
[ -n "$pid" ] || fail "no pid for worker:1"
[ -z "$(ls -A tmp)" ] || fail "weft launch wrote to TMPDIR: $(ls -A tmp)"
tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "cluster.key_dir=fd:[0-9]" ||
	fail "the worker did not get the run's keys from memory: $(tr '\0' ' ' <"/proc/$pid/cmdline")"
kill -9 "$pid"
rc=0
wait_launch 120 || rc=$?
[ $rc = 0 ] || fail "launch exited $rc"
[ "$(events count exited task=worker:1 signal=9 restart=true)" = 1 ] ||
	fail "the killed worker was not restarted"
step=$(events get join step who=worker:1) || fail "the restarted worker did not rejoin at the servers' step"
[ "$step" -ge 100 ] || fail "the restarted worker joined at step $step, before the kill"
[ "$(events get trained steps who=worker:1)" = 300 ] || fail "the restarted worker did not finish"
[ "$(events get done code who=launch)" = 0 ] || fail "launch did not end with code 0"
[ -f run/ckpt/step-300/DONE ] || fail "no complete final checkpoint"
acc=$(eval_accuracy run/logs/metrics.jsonl)
echo "ok: eval accuracy $acc"
