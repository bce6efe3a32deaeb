# test_empty_server.sh: 2 parameter servers and a model that fits in one
# chunk (smallcnn), so server 1 holds nothing. A worker killed mid-run and
# restarted by `weft launch` must rejoin at once in async and in sync mode:
# joining never waits for a server without chunks to reach the job's step
# (it never does). Worker 1 pauses before step 40 (WEFT_PS_DEBUG_STALL) and
# is killed there, so the kill always lands mid-run. Bounded: a worker that cannot join gives up after
# WEFT_PS_CONNECT_TIMEOUT=20 s, three times, and the run fails.
. "$WEFT_SRC/tests/ps/lib.sh"
mkdir -p data
make_synth data/train.h5 2000 16 1
export WEFT_PS_CONNECT_TIMEOUT=20
# async applies every worker's push: half the sync learning rate (the
# config's 0.05 diverges now and then with 2 async workers)
declare -A lr=([sync]=0.05 [async]=0.025)
for mode in async sync; do
	WEFT_PS_DEBUG_STALL=1:40:20 launch_bg $mode.log --ps 2 --workers 2 --threads 2 --device cpu \
		--config "$WEFT_SRC/configs/synth-smallcnn.json" --max-restarts 2 \
		--set data.train=data/train.h5 --set data.eval= --set train.steps=800 \
		--set strategy.mode=$mode --set optimizer.lr=${lr[$mode]} --set checkpoint.dir=$mode/ckpt \
		--set checkpoint.every_steps=0 --set log.dir=$mode/logs --set log.every_steps=10
	wait_for $mode.log 'WEFT_PS_DEBUG_STALL: worker 1 sleeps' 90
	grep -qE "\[ps:1\] .*listening on .*: 0 of 1 chunks" $mode.log ||
		fail "$mode: ps 1 should hold no chunk (smallcnn is one chunk)"
	pid=$(pid_of worker:1)
	[ -n "$pid" ] || fail "$mode: no pid for worker:1"
	kill -9 "$pid"
	rc=0
	wait "$LAUNCH_PID" || rc=$?
	[ $rc = 0 ] || fail "$mode: launch exited $rc"
	grep -qE "\[worker:1\] ps: worker 1 joins at the servers' step [1-9]" $mode.log ||
		fail "$mode: the restarted worker did not join at the servers' step"
	grep -q "\[worker:1\] trained 800 steps" $mode.log || fail "$mode: the restarted worker did not finish"
	grep -q "\[launch\] done: every process exited 0" $mode.log || fail "$mode: not every process exited 0"
	n=$(grep -c "stall: worker" $mode.log || true)
	[ "$n" -le 3 ] || fail "$mode: $n stall lines: not rate-limited"
	echo "ok: $mode"
done
