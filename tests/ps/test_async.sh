# test_async.sh: strategy.mode async with `weft launch --ps 1 --workers 2`:
# the job trains to a sane accuracy on the synthetic data, every process
# exits 0, and a worker killed mid-run rejoins at the step the job reached
# (the servers' version is the global step, not the number of pushes: with
# two workers the latter would be about twice the step). Each push applies
# as its own update, so two workers make two updates per step: the learning
# rate is a fifth of the sync one (0.05): at 0.025 one run in five ended
# below 0.9 (stale pushes right after the restart).
. "$WEFT_SRC/tests/ps/lib.sh"
mkdir -p data
make_synth data/train.h5 4000 32 1
make_synth data/eval.h5 1000 32 2
steps=300
launch_bg launch.log --ps 1 --workers 2 --config "$WEFT_SRC/configs/synth-smallcnn.json" \
	--set strategy.mode=async --set optimizer.lr=0.01 --set data.train=data/train.h5 \
	--set data.eval=data/eval.h5 \
	--set train.steps=$steps --set train.eval_every_steps=$steps --set checkpoint.dir=run/ckpt \
	--set checkpoint.every_steps=100 --set log.dir=run/logs --set log.every_steps=10
wait_for launch.log '\[worker:1\] step +100/' 60
pid=$(pid_of worker:1)
[ -n "$pid" ] || fail "no pid for worker:1"
kill -9 "$pid"
rc=0
wait "$LAUNCH_PID" || rc=$?
[ $rc = 0 ] || fail "launch exited $rc"
grep -q "\[ps:0\] .*mode async" launch.log || fail "the server did not run in async mode"
grep -q "\[launch\] worker:1 was killed by signal 9.*restarting" launch.log ||
	fail "the killed worker was not restarted"
join=$(grep -oE "\[worker:1\] ps: worker 1 joins at the servers' step [0-9]+" launch.log |
	grep -oE "[0-9]+$" | tail -1)
[ -n "$join" ] || fail "the restarted worker did not say where it joined"
# the job's step when worker 1 rejoined: the highest step any worker logged
# before (counting pushes would put it near the sum of both workers' steps)
# (only the join after the kill counts: under load worker 1 may first join late)
top=$(awk '/\[launch\] worker:1 was killed/ {killed = 1}
	killed && /\[worker:1\] ps: worker 1 joins at the servers. step [1-9][0-9]/ {print top; exit}
	/\[worker:[01]\] step +[0-9]+\// {sub(/.*step +/, ""); sub(/\/.*/, "");
		if ($0 + 0 > top) top = $0 + 0}' launch.log)
[ -n "$top" ] || fail "no logged step before the rejoin"
[ "$join" -ge $((top - 20)) ] && [ "$join" -le $((top * 13 / 10 + 20)) ] ||
	fail "worker 1 rejoined at step $join; the workers had logged up to step $top"
grep -q "\[worker:1\] trained $steps steps" launch.log || fail "the restarted worker did not finish"
grep -q "\[worker:0\] trained $steps steps" launch.log || fail "the chief did not finish"
grep -q "\[launch\] done: every process exited 0" launch.log || fail "not every process exited 0"
[ -f run/ckpt/step-$steps/DONE ] || fail "no complete final checkpoint"
acc=$(eval_accuracy run/logs/metrics.jsonl)
python3 -c "import sys; sys.exit(0 if float('$acc') >= 0.9 else 1)" ||
	fail "async eval accuracy $acc < 0.9"
echo "ok: worker 1 rejoined at step $join (logged up to $top), eval accuracy $acc"
