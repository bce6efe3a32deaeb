# test_job_over.sh: hand-started processes (one ps, worker 0 the chief,
# worker 1), as Kubernetes pods run them.
#  1. The chief is killed after a checkpoint and started again with the same
#     command (no --resume, as a pod restart does): it finds the newest
#     complete checkpoint, and since the server still holds the job at a
#     newer step it rejoins there (nothing rolls back) instead of throwing
#     the job back to step 0; the job ends exit 0 at its last step.
#  2. After the job ended (servers shut down), a restarted worker and a
#     restarted chief see that it is complete and exit 0 quickly (not 138
#     after the connect timeout).
#  3. --fresh starts over explicitly, and that rollback reaches a worker
#     already waiting at the final barrier.
. "$WEFT_SRC/tests/ps/lib.sh"
make_synth train.h5 1024 16 3
"$WEFT" keygen --out keys >/dev/null || fail "weft keygen"
export WEFT_KEY_DIR=$WORK/keys WEFT_PS_CONNECT_TIMEOUT=60 WEFT_PS_HEARTBEAT_TIMEOUT=3
cat >c.json <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "train.h5"},
 "train": {"batch_size": 16, "steps": 80, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.02, "momentum": 0.9},
 "strategy": {"name": "parameter_server", "mode": "sync"},
 "checkpoint": {"dir": "run/ckpt", "every_steps": 20, "keep": 5},
 "log": {"dir": "run/logs", "every_steps": 10}}
JSON
read -r p1 p2 p3 < <(free_ports 3)
cluster="{\"ps\": [\"127.0.0.1:$p1\"], \"worker\": [\"127.0.0.1:$p2\", \"127.0.0.1:$p3\"]}"
# start TYPE INDEX LOG [args]: one task in the background, own process group; pid in $!
start() {
	local type=$1 index=$2 log=$3
	shift 3
	TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"$type\", \"index\": $index}}" \
		setsid "$WEFT" train --config c.json --device cpu --threads 1 --no-progress-line "$@" \
		>"$log" 2>&1 &
	LAUNCH_PIDS+=("$!")
}
# wait_pid PID SECONDS: its exit status in $rc (fails when it runs longer)
wait_pid() {
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		if ! kill -0 "$1" 2>/dev/null; then
			rc=0
			wait "$1" || rc=$?
			return 0
		fi
		sleep 0.1
	done
	fail "pid $1 still running after $2 s"
}
start ps 0 ps.log
ps_pid=$!
start worker 0 chief1.log
chief_pid=$!
start worker 1 worker.log
worker_pid=$!
for ((i = 0; i < 900; i++)); do
	[ -f run/ckpt/step-40/DONE ] && break
	sleep 0.1
done
[ -f run/ckpt/step-40/DONE ] || fail "no checkpoint step-40"
kill -9 "$chief_pid"
wait "$chief_pid" 2>/dev/null || true
start worker 0 chief2.log # the same command: a pod restart
chief_pid=$!
wait_pid "$chief_pid" 120
[ $rc = 0 ] || fail "the restarted chief exited $rc"
step=$(events get resume step pid=$chief_pid) || fail "the restarted chief did not resume"
[ "$step" -ge 40 ] || fail "the restarted chief resumed at step $step, before the newest checkpoint (40)"
[ "$(events count rollback)" = 0 ] || fail "the chief's restart rolled the job back"
grep -q "the chief rejoins the servers at step" chief2.log ||
	fail "the restarted chief did not rejoin the servers at their step"
[ "$(events count seed pid=$chief_pid)" = 0 ] || fail "the restarted chief reseeded the servers"
wait_pid "$worker_pid" 60
[ $rc = 0 ] || fail "worker 1 exited $rc"
wait_pid "$ps_pid" 30
[ $rc = 0 ] || fail "the ps exited $rc"
[ -f run/ckpt/step-80/DONE ] || fail "no final checkpoint"

# 2. the job is over: restarted processes exit 0 at once
t0=$(date +%s)
start worker 1 late-worker.log
late=$!
wait_pid $late 45
[ $rc = 0 ] || fail "a worker started after the job ended exited $rc: $(tail -3 late-worker.log)"
[ "$(events count job_over pid=$late step=80)" = 1 ] || fail "the late worker did not see that the job is over"
start worker 0 late-chief.log
late=$!
wait_pid $late 45
[ $rc = 0 ] || fail "a chief started after the job ended exited $rc: $(tail -3 late-chief.log)"
[ "$(events count job_over pid=$late step=80)" = 1 ] || fail "the late chief did not see that the job is over"
t1=$(date +%s)
[ $((t1 - t0)) -lt 50 ] || fail "late processes took $((t1 - t0)) s"

# 3. --fresh starts over, and the rollback reaches a worker waiting at the
#    final barrier: the server restores step 80 when it starts, so worker 1
#    joins at 80, has nothing to train and waits at the barrier; then the
#    chief starts over (--fresh seeds step 0): the worker must train the 5
#    steps again with it instead of holding the chief's first step forever
start ps 0 ps3.log
ps_pid=$!
start worker 1 worker3.log --set train.steps=5
worker_pid=$!
events wait nothing_to_do 60 pid=$worker_pid step=80 steps=5 || fail "worker 1 did not wait at the barrier"
sleep 1
start worker 0 chief3.log --fresh --set train.steps=5
chief_pid=$!
wait_pid "$chief_pid" 90
[ $rc = 0 ] || fail "the --fresh chief exited $rc"
[ "$(events count resume pid=$chief_pid)" = 0 ] || fail "--fresh resumed"
[ "$(events get trained steps pid=$chief_pid)" = 5 ] || fail "--fresh did not train 5 steps from 0"
wait_pid "$worker_pid" 30
[ $rc = 0 ] || fail "worker 1 exited $rc after the rollback"
[ "$(events count rollback pid=$worker_pid to=0)" = 1 ] || fail "the rollback did not reach worker 1 at the barrier"
[ "$(events get trained steps pid=$worker_pid)" = 5 ] || fail "worker 1 did not train again from step 0"
wait_pid "$ps_pid" 30
echo "ok"
