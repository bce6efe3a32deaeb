# test_register_stop.sh: a worker whose parameter servers are not (or no
# longer) there waits for them while it registers; SIGTERM then stops it at
# once (exit 130, "stopped"), as Kubernetes deleting a pod that never found
# its servers expects, instead of after the connect timeout (the chief and
# a plain worker alike).
. "$WEFT_SRC/tests/ps/lib.sh"
make_synth train.h5 64 16 3
cat >c.json <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "train.h5"},
 "train": {"batch_size": 16, "steps": 10, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.05},
 "strategy": {"name": "parameter_server", "mode": "sync"},
 "checkpoint": {"dir": "run/ckpt", "every_steps": 0}, "log": {"dir": "run/logs", "every_steps": 10}}
JSON
# a port nobody listens on: bound by the kernel, then released
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
for index in 0 1; do
	tf="{\"cluster\": {\"ps\": [\"127.0.0.1:$port\"], \"worker\": [\"127.0.0.1:1\", \"127.0.0.1:2\"]},
	     \"task\": {\"type\": \"worker\", \"index\": $index}}"
	TF_CONFIG=$tf "$WEFT" train --config c.json --insecure --threads 1 >w$index.log 2>&1 &
	pid=$!
	wait_for w$index.log "ps: worker $index of 2" 60
	t0=$(date +%s.%N)
	kill -TERM $pid
	rc=0
	wait $pid || rc=$?
	took=$(python3 -c "print(round($(date +%s.%N) - $t0, 1))")
	echo "worker $index: SIGTERM while registering: exit $rc after $took s: $(tail -1 w$index.log)"
	[ $rc = 130 ] || { cat w$index.log; fail "worker $index: exit $rc, want 130"; }
	python3 -c "import sys; sys.exit(0 if $took < 10 else 1)" || fail "worker $index: took $took s to stop"
done
echo ok
