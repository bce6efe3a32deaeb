# test_ps_no_data.sh: with model.input_shape and model.classes in the config
# a parameter server builds the model without the training data (a server
# pod needs no data volume): hand-started processes, the server's data.train
# pointing nowhere, the job trains and ends exit 0. Without the two keys the
# server fails naming data.train and how to do without it; a worker whose
# data disagrees with model.input_shape fails naming both.
. "$WEFT_SRC/tests/ps/lib.sh"
make_synth train.h5 512 16 3
"$WEFT" keygen --out keys >/dev/null || fail "weft keygen"
export WEFT_KEY_DIR=$WORK/keys
cat >c.json <<JSON
{"model": {"name": "smallcnn", "input_shape": [16, 16, 3], "classes": 10},
 "data": {"train": "train.h5"},
 "train": {"batch_size": 16, "steps": 30, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.02, "momentum": 0.9},
 "strategy": {"name": "parameter_server", "mode": "sync"},
 "checkpoint": {"dir": "run/ckpt", "every_steps": 10},
 "log": {"dir": "run/logs", "every_steps": 10}}
JSON
read -r p1 p2 p3 < <(free_ports 3)
cluster="{\"ps\": [\"127.0.0.1:$p1\"], \"worker\": [\"127.0.0.1:$p2\", \"127.0.0.1:$p3\"]}"
start() { # TYPE INDEX LOG [args]: one task in the background; pid in $!
	local type=$1 index=$2 log=$3
	shift 3
	TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"$type\", \"index\": $index}}" \
		setsid "$WEFT" train --config c.json --device cpu --threads 1 --no-progress-line "$@" \
		>"$log" 2>&1 &
	LAUNCH_PIDS+=("$!")
}
start ps 0 ps.log --set data.train=/nonexistent/train.h5
ps_pid=$!
start worker 0 chief.log
chief_pid=$!
start worker 1 worker.log
worker_pid=$!
for p in $chief_pid $worker_pid $ps_pid; do
	rc=0
	timeout 120 tail --pid=$p -f /dev/null || fail "pid $p still running after 120 s"
	wait $p || rc=$?
	[ $rc = 0 ] || { tail -5 ps.log chief.log worker.log; fail "a process exited $rc"; }
done
grep -q "trained 30 steps" chief.log || fail "the chief did not train 30 steps"
grep -q "shut down by the chief" ps.log || fail "the server did not end with the job"

# without the two keys the server needs the data, and says how to do without
rc=0
TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"ps\", \"index\": 0}}" "$WEFT" train \
	--config c.json --set model.input_shape= --set data.train=/nonexistent/train.h5 \
	>ps2.log 2>&1 || rc=$?
[ $rc != 0 ] || fail "a server without data or model.input_shape started"
grep -q "data.train.*model.input_shape and model.classes" ps2.log || fail "not named: $(tail -2 ps2.log)"

# a worker's data must match model.input_shape
rc=0
"$WEFT" train --config c.json --set strategy.name=local --set model.input_shape=32,32,3 \
	--set checkpoint.dir=run2/ckpt --set log.dir=run2/logs >bad.log 2>&1 || rc=$?
[ $rc != 0 ] || fail "data of another shape than model.input_shape was accepted"
grep -q "model.input_shape: is \[32, 32, 3\] but data.train (train.h5) holds 16x16x3" bad.log ||
	fail "not named: $(tail -2 bad.log)"
echo ok
