# test_register_stop.sh: a worker whose parameter servers are not (or no
# longer) there waits for them while it registers; SIGTERM then stops it at
# once (exit 130, "stopped"), as Kubernetes deleting a pod that never found
# its servers expects, instead of after the connect timeout (the chief and
# a plain worker alike). An elastic worker stopped while it waits for the
# chief leaves the job: its server counts it out at once (worker_left), not
# after ps.heartbeat_timeout (30 s here), and the chief trains without it.
. "$WEFT_SRC/tests/ps/lib.sh"
make_synth train.h5 64 16 3
cat >c.json <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "train.h5"},
 "train": {"batch_size": 16, "steps": 10, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.05},
 "strategy": {"name": "parameter_server", "mode": "sync"},
 "checkpoint": {"dir": "run/ckpt", "every_steps": 0}, "log": {"dir": "run/logs", "every_steps": 10}}
JSON
# term PID: SIGTERM it and wait; its exit status in $rc, the seconds it
# took in $took
term() {
	local t0
	t0=$(date +%s.%N)
	kill -TERM "$1"
	rc=0
	wait "$1" || rc=$?
	took=$(python3 -c "print(round($(date +%s.%N) - $t0, 1))")
}
# a port nobody listens on: bound by the kernel, then released
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
for index in 0 1; do
	tf="{\"cluster\": {\"ps\": [\"127.0.0.1:$port\"], \"worker\": [\"127.0.0.1:1\", \"127.0.0.1:2\"]},
	     \"task\": {\"type\": \"worker\", \"index\": $index}}"
	TF_CONFIG=$tf "$WEFT" train --config c.json --insecure --threads 1 >w$index.log 2>&1 &
	pid=$!
	wait_for w$index.log "ps: worker $index of 2" 60
	term $pid
	echo "worker $index: SIGTERM while registering: exit $rc after $took s: $(tail -1 w$index.log)"
	[ $rc = 130 ] || { cat w$index.log; fail "worker $index: exit $rc, want 130"; }
	python3 -c "import sys; sys.exit(0 if $took < 10 else 1)" || fail "worker $index: took $took s to stop"
done

# elastic: worker 1 registers with a running server and waits for the chief
read -r p1 p2 p3 < <(free_ports 3)
sed -e 's/"mode": "sync"}/"mode": "sync", "min_workers": 1}/' \
	-e 's/"checkpoint"/"ps": {"heartbeat_timeout": 30}, "checkpoint"/' c.json >e.json
cluster="{\"ps\": [\"127.0.0.1:$p1\"], \"worker\": [\"127.0.0.1:$p2\", \"127.0.0.1:$p3\"]}"
start() { # TYPE INDEX LOG: one task in the background, its pid in $!
	TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"$1\", \"index\": $2}}" \
		setsid "$WEFT" train --config e.json --insecure --threads 1 --no-progress-line >"$3" 2>&1 &
	LAUNCH_PIDS+=("$!")
}
start ps 0 ps.log
ps_pid=$!
start worker 1 e1.log
pid=$!
events wait worker_joined 60 worker=1 >/dev/null || fail "worker 1 did not register with the server"
term $pid
echo "elastic worker 1: SIGTERM while waiting for the chief: exit $rc after $took s: $(tail -1 e1.log)"
[ $rc = 0 ] || fail "elastic worker 1: exit $rc, want 0 (it left the job)"
events wait worker_left 10 worker=1 >/dev/null ||
	fail "the server did not count the stopped worker 1 out (no worker_left)"
start worker 0 e0.log
rc=0
wait $! || rc=$?
[ $rc = 0 ] || fail "the chief exited $rc"
wait $ps_pid || fail "the server failed"
! grep -q "declared dead" ps.log || fail "the server waited for the stopped worker to be declared dead"

# and when the server it registered with is gone by then (kill -9), it
# stops and leaves at once, without waiting for that server (a new job: the
# last one's final checkpoint would tell worker 1 that the job is over)
rm -rf "$WEFT_EVENTS" run
start ps 0 ps2.log
ps_pid=$!
start worker 1 e2.log
pid=$!
events wait worker_joined 60 worker=1 >/dev/null || fail "worker 1 did not register with the server"
kill -9 $ps_pid
term $pid
echo "elastic worker 1, its server gone: SIGTERM: exit $rc after $took s: $(tail -1 e2.log)"
python3 -c "import sys; sys.exit(0 if $took < 10 else 1)" || fail "the stopped worker took $took s to leave a dead server"
grep -q "left the job before its first step" e2.log || fail "worker 1 did not leave"
echo ok
