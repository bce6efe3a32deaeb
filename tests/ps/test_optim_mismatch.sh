# test_optim_mismatch.sh: the parameter servers apply the updates with their
# own copy of the optimizer settings. A worker whose settings differ from a
# server's (learning rate, momentum, weight decay, schedule) must stop at
# registration, well before its connect timeout, with a permanent exit code
# (1..127: a restart with the same config fails the same way) and a message
# naming each differing key with both values; so must one whose
# ps.compression differs. Matching settings train.
. "$WEFT_SRC/tests/ps/lib.sh"
mkdir -p data
make_synth data/train.h5 256 8 1
read -r PS_PORT W_PORT < <(free_ports 2)
CLUSTER="\"cluster\": {\"worker\": [\"127.0.0.1:$W_PORT\"], \"ps\": [\"127.0.0.1:$PS_PORT\"]}"
cat >c.json <<'JSON'
{"model": {"name": "mlp"}, "data": {"train": "data/train.h5"},
 "train": {"batch_size": 16, "steps": 5},
 "optimizer": {"lr": 0.1, "momentum": 0.9},
 "strategy": {"name": "parameter_server"},
 "checkpoint": {"dir": "ckpt"}, "log": {"dir": "logs"}}
JSON
# the worker would wait this long for servers that are merely absent
export WEFT_PS_CONNECT_TIMEOUT=60

TF_CONFIG="{$CLUSTER, \"task\": {\"type\": \"ps\", \"index\": 0}}" \
	setsid "$WEFT" ps --config c.json --insecure >ps.log 2>&1 &
PS_PID=$!
LAUNCH_PIDS+=("$PS_PID")
wait_for ps.log "ps 0 of 1: " 30

# worker NAME ARGS...: run the worker (chief) against the server
worker() {
	local name=$1
	shift
	WORKER_RC=0
	local t0=$SECONDS
	TF_CONFIG="{$CLUSTER, \"task\": {\"type\": \"worker\", \"index\": 0}}" \
		timeout 45 "$WEFT" train --config c.json --device cpu --threads 1 --insecure \
		--no-progress-line "$@" >"$name.log" 2>&1 || WORKER_RC=$?
	WORKER_TOOK=$((SECONDS - t0))
	echo "$name: exit $WORKER_RC after ${WORKER_TOOK}s: $(grep -m1 "error" "$name.log" || tail -1 "$name.log")"
}
# refused NAME WANT... -- ARGS...: the worker exits 1..127 within 30 s and
# its log names every WANT
refused() {
	local name=$1 wants=()
	shift
	while [ "$1" != "--" ]; do
		wants+=("$1")
		shift
	done
	shift
	worker "$name" "$@"
	[ "$WORKER_RC" != 124 ] || fail "$name: the worker hung (killed after 45 s)"
	[ "$WORKER_RC" -ge 1 ] && [ "$WORKER_RC" -le 127 ] ||
		{ cat "$name.log"; fail "$name: exit $WORKER_RC, want 1..127 (permanent)"; }
	[ "$WORKER_TOOK" -le 30 ] || fail "$name: took ${WORKER_TOOK}s (the connect timeout is 60 s)"
	for w in "${wants[@]}"; do
		grep -qF -- "$w" "$name.log" || { cat "$name.log"; fail "$name: the error does not name '$w'"; }
	done
}

refused lr "optimizer.lr: 0.05 on worker 0, 0.1 on parameter server 0" -- --set optimizer.lr=0.05
refused momentum "optimizer.momentum: 0.5 on worker 0, 0.9 on parameter server 0" \
	-- --set optimizer.momentum=0.5
refused decay_and_schedule "optimizer.weight_decay: 0.0001 on worker 0, 0 on parameter server 0" \
	"optimizer.schedule.name: cosine on worker 0, constant on parameter server 0" \
	"optimizer.schedule.min_lr: 0 on worker 0, not used on parameter server 0" \
	-- --set optimizer.weight_decay=0.0001 --set optimizer.schedule.name=cosine
# ps.compression is checked the same way: bf16 pushes against a server that
# expects fp32 ones
refused compression "ps.compression: bf16 on worker 0, none on parameter server 0" \
	-- --set ps.compression=bf16
refused topk "ps.compression: topk on worker 0, none on parameter server 0" \
	-- --set ps.compression=topk:0.01
grep -q "register from sender .* refused: optimizer.lr" ps.log || { cat ps.log; fail "the server did not log the refusal"; }

# the same settings: the job trains
worker same
[ "$WORKER_RC" = 0 ] || { cat same.log; fail "matching settings: exit $WORKER_RC, want 0"; }
echo ok
