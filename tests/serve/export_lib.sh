# export_lib.sh: what the export and quantize script tests share (sourced):
# tests/trainer/lib.sh ($WORK, fail, expect_error, make_synth), its cleanup
# also ending the weft-serve of $SERVE_PID, json, start_serve.
command -v python3 >/dev/null || { echo "skip: python3 not found"; exit 77; }
. "$WEFT_SRC/tests/trainer/lib.sh"
SERVE_PID=
cleanup() {
	if [ -n "$SERVE_PID" ]; then
		kill "$SERVE_PID" 2>/dev/null || true
		wait "$SERVE_PID" 2>/dev/null || true
	fi
	rm -rf "$WORK"
}
json() { # json FILE EXPR: evaluate EXPR on the JSON document in FILE as `d`
	python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}
start_serve() { # start_serve LOG ARGS...: weft-serve ARGS on loopback, REST on a free $PORT, until ready
	local log=$1
	shift
	PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	"$WEFT_SERVE" --rest_api_port "$PORT" --bind_address 127.0.0.1 "$@" >"$log" 2>&1 &
	SERVE_PID=$!
	for _ in $(seq 300); do
		curl -sf "http://127.0.0.1:$PORT/v2/health/ready" >/dev/null && return 0
		kill -0 "$SERVE_PID" 2>/dev/null || { cat "$log"; fail "weft-serve exited"; }
		sleep 0.1
	done
	fail "weft-serve not ready after 30 s: $(cat "$log")"
}
