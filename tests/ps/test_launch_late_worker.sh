# test_launch_late_worker.sh: once the chief has ended the job (exit 0, the
# servers shut down), weft launch stops a worker that is still running two
# seconds later instead of letting it wait for servers that are gone (a
# worker that joined or restarted just before the end waited 10 s), counts
# its exit as no failure, and starts no worker on a SIGUSR1 any more.
# Worker 2 is stopped (SIGSTOP) mid-job, the others go on without it
# (ps.heartbeat_timeout 1 s) and finish; it is let go once launch has said
# it stops it.
. "$WEFT_SRC/tests/ps/lib.sh"
make_synth train.h5 256 16 3
cat >c.json <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "train.h5"},
 "train": {"batch_size": 16, "steps": 80, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.02},
 "strategy": {"name": "parameter_server", "mode": "sync"},
 "ps": {"heartbeat_timeout": 1},
 "checkpoint": {"dir": "run/ckpt", "every_steps": 0}, "log": {"dir": "run/logs", "every_steps": 1}}
JSON
launch_bg launch.log --ps 1 --workers 3 --elastic 2:3 --threads 1 --config c.json
wait_for launch.log '\[worker:2\] step +[0-9]+/' 60
w2=$(pid_of worker:2)
kill -STOP "$w2"
wait_for launch.log 'worker:2 still running 2 s after the chief ended the job: stopping it' 60
kill -USR1 "$LAUNCH_PID"
wait_for launch.log 'SIGUSR1: not starting a worker: the chief has ended the job' 10
kill -CONT "$w2"
rc=0
wait_launch 30 || rc=$?
[ $rc = 0 ] || fail "launch exited $rc"
grep -q "worker:2 .*(the job was over)" launch.log || fail "worker 2's end was not reported as after the job"
grep -q "done: every process exited 0" launch.log || fail "the job did not end well"
[ "$(events count started task=worker:2)" = 1 ] || fail "a worker was started after the job ended"

# A server killed after the chief shut it down, before it exited, is
# restarted (the chief still runs); nothing will shut the new one down:
# launch stops it 2 s after the chief ended the job, not after the 15 s a
# failed job's servers get. The kill follows the server's shut_down event
# within milliseconds; a try that missed the window is made again.
for attempt in 1 2 3 4 5; do
	rm -rf run2 "$WEFT_EVENTS"
	launch_bg launch2.log --ps 1 --workers 2 --threads 1 --config c.json \
		--set checkpoint.dir=run2/ckpt --set log.dir=run2/logs
	python3 - "$WEFT_EVENTS" <<'PY' || fail "no shut_down event of ps:0"
import json, os, signal, sys, time
pid, until = None, time.time() + 60
while time.time() < until:
    try:
        ev = [json.loads(l) for l in open(sys.argv[1]).read().split("\n")[:-1] if l.strip()]
    except FileNotFoundError:
        ev = []
    for e in ev:
        if e.get("event") == "started" and e.get("task") == "ps:0":
            pid = e["task_pid"]
        if e.get("event") == "shut_down" and e.get("who") == "ps:0":
            os.kill(pid, signal.SIGKILL)
            sys.exit(0)
    time.sleep(0.005)
sys.exit(1)
PY
	t0=$(date +%s)
	rc=0
	wait_launch 30 || rc=$?
	grep -q "ps:0 was killed by signal 9 (Killed): restarting it" launch2.log && break
	echo "attempt $attempt: ps:0 had exited before the kill: no restart to stop; again"
	[ $attempt = 5 ] && { echo "SKIP: the kill missed the server's exit five times"; exit 77; }
done
took=$(($(date +%s) - t0))
[ $rc = 0 ] || fail "launch exited $rc with a server restarted at the end"
grep -q "servers still running 2 s after the trainers ended: stopping them" launch2.log ||
	fail "launch did not stop the restarted server 2 s after the job's end"
[ $took -le 8 ] || fail "launch took $took s to end after the job"
echo ok
