# test_security_mismatch.sh: processes of one job started with different
# security settings, as an operator might by mistake: a worker with keys
# against a server started --insecure and the reverse, and a worker with
# another cluster's keys. Each worker must stop well before its connect
# timeout (no hang) with a permanent exit code (1..127: Kubernetes must not
# retry a misconfiguration) and a message naming the mismatch or the key
# directory. A server that is simply not there stays transient (138).
. "$WEFT_SRC/tests/ps/lib.sh"
mkdir -p data
make_synth data/train.h5 256 8 1
"$WEFT" keygen --out keys-a >/dev/null || fail "weft keygen a"
"$WEFT" keygen --out keys-b >/dev/null || fail "weft keygen b"
read -r PS_PORT W_PORT < <(free_ports 2)
CLUSTER="\"cluster\": {\"worker\": [\"127.0.0.1:$W_PORT\"], \"ps\": [\"127.0.0.1:$PS_PORT\"]}"
cat >c.json <<'JSON'
{"model": {"name": "mlp"}, "data": {"train": "data/train.h5"},
 "train": {"batch_size": 16, "steps": 5}, "strategy": {"name": "parameter_server"},
 "checkpoint": {"dir": "ckpt"}, "log": {"dir": "logs"}}
JSON
# the worker would wait this long for servers that are merely absent
export WEFT_PS_CONNECT_TIMEOUT=60

ps_start() { # ps_start LOG SECURITY-ARGS...: a server in the background, until it listens
	local log=$1
	shift
	TF_CONFIG="{$CLUSTER, \"task\": {\"type\": \"ps\", \"index\": 0}}" \
		setsid "$WEFT" ps --config c.json "$@" >"$log" 2>&1 &
	PS_PID=$!
	LAUNCH_PIDS+=("$PS_PID")
	wait_for "$log" "ps 0 of 1: " 30
}
ps_stop() {
	kill -9 -- "-$PS_PID" 2>/dev/null || true
	wait "$PS_PID" 2>/dev/null || true
}
# worker NAME WANT SECURITY-ARGS...: the chief exits 1..127 within 30 s, its
# stderr naming WANT
worker() {
	local name=$1 want=$2 rc=0
	shift 2
	local t0=$SECONDS
	TF_CONFIG="{$CLUSTER, \"task\": {\"type\": \"worker\", \"index\": 0}}" \
		timeout 45 "$WEFT" train --config c.json --device cpu --threads 1 \
		--no-progress-line "$@" >"$name.log" 2>&1 || rc=$?
	local took=$((SECONDS - t0))
	echo "$name: exit $rc after ${took}s: $(grep -m1 "error" "$name.log" || tail -1 "$name.log")"
	[ "$rc" != 124 ] || fail "$name: the worker hung (killed after 45 s)"
	[ "$rc" -ge 1 ] && [ "$rc" -le 127 ] || fail "$name: exit $rc, want 1..127 (permanent)"
	[ "$took" -le 30 ] || fail "$name: took ${took}s (the connect timeout is 60 s)"
	grep -q -- "$want" "$name.log" || fail "$name: the error does not name '$want'"
}

ps_start ps-curve.log --key-dir keys-a
worker plain-vs-curve "expects CURVE" --insecure
worker other-keys "keys-b" --key-dir keys-b
ps_stop

ps_start ps-plain.log --insecure
worker curve-vs-plain "does not speak CURVE" --key-dir keys-a
ps_stop

# nobody there: transient, after the (short) connect timeout
rc=0
WEFT_PS_CONNECT_TIMEOUT=3 TF_CONFIG="{$CLUSTER, \"task\": {\"type\": \"worker\", \"index\": 0}}" \
	timeout 45 "$WEFT" train --config c.json --device cpu --threads 1 --no-progress-line \
	--key-dir keys-a >absent.log 2>&1 || rc=$?
[ "$rc" = 138 ] || fail "no server: exit $rc, want 138 (transient)"
echo ok
