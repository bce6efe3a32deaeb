# test_load_cancel.sh: SIGTERM while weft-serve loads a model (its check in
# a child process, then the load itself and its batch plans) ends the server
# at once: the load stops, it does not run to its end first. Twice: the first
# load at start, and a new version loading in the background (at the lowest
# CPU priority) beside the version that serves, with requests running.
. "$WEFT_SRC/tests/trainer/lib.sh"
: "${WEFT_SERVE:?set by ctest}" "${WEFT_SERVE_TOOL:?set by ctest}"
spid=
trap '[ -z "$spid" ] || kill -9 $spid 2>/dev/null || true; wait 2>/dev/null || true; cleanup' EXIT

# wait_log FILE TEXT: until weft-serve ($spid) logs TEXT
wait_log() {
	for _ in $(seq 1 1200); do
		grep -q "$2" "$1" && return 0
		kill -0 $spid 2>/dev/null || { cat "$1"; fail "weft-serve ended before logging '$2'"; }
		sleep 0.05
	done
	cat "$1"
	fail "weft-serve did not log '$2'"
}

# term_during LOG VERSION: SIGTERM once version VERSION starts loading; the
# load is stopped and the process exits 0 within 2 s
term_during() {
	wait_log "$1" "loading model m version $2"
	local t0 rc=0 ms
	t0=$(date +%s%N)
	kill -TERM $spid
	wait $spid || rc=$?
	ms=$((($(date +%s%N) - t0) / 1000000))
	spid=
	cat "$1"
	[ $rc = 0 ] || fail "weft-serve exited $rc after SIGTERM, want 0"
	grep -q "stopped (the process is stopping)" "$1" || fail "the load of version $2 was not stopped"
	! grep -q "version $2 is available" "$1" || fail "the load of version $2 ran to its end after SIGTERM"
	[ $ms -lt 2000 ] || fail "weft-serve took $ms ms to exit after SIGTERM"
	echo "version $2: exit $ms ms after SIGTERM"
}

mkdir -p models/1 stage/2
"$WEFT_SERVE_TOOL" model resnet50 models/1/model.h5 1 32 # 94 MB: seconds to check and load
"$WEFT_SERVE" --model_name m --model_base_path models --rest_api_port 0 --port 0 \
	--grpc_port 0 2>serve.err &
spid=$!
term_during serve.err 1

# the background load: smallcnn serves (requests running), resnet50 arrives
mkdir -p small/1
"$WEFT_SERVE_TOOL" model smallcnn small/1/model.h5 1 32
mv models/1/model.h5 stage/2/model.h5
for _ in 1 2 3 4 5; do # another port when the one chosen was taken before the bind
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	"$WEFT_SERVE" --model_name m --model_base_path small --rest_api_port "$port" \
		--bind_address 127.0.0.1 --port 0 --grpc_port 0 --file_system_poll_wait_seconds 0.1 \
		2>swap.err &
	spid=$!
	while kill -0 $spid 2>/dev/null && ! grep -q "model m version 1 is available" swap.err; do
		sleep 0.05
	done
	kill -0 $spid 2>/dev/null && break
	grep -q "cannot listen" swap.err || { cat swap.err; fail "weft-serve ended at start"; }
	wait $spid || true
done
wait_log swap.err "model m version 1 is available"
body=$(python3 -c 'import json; print(json.dumps({"instances": [[[[0.5] * 3] * 32] * 32]}))')
(while curl -s -o /dev/null -d "$body" "http://127.0.0.1:$port/v1/models/m:predict"; do :; done) &
mv stage/2 small/2
term_during swap.err 2
grep -q "loading model m version 2" swap.err
echo PASS
