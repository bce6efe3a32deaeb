# test_cors.sh: --rest_api_enable_cors_support with --auth_token_file, as a
# browser's page sees it through curl: the OPTIONS preflight is answered
# without the token (204, the origin, methods and headers), the request it
# announces needs the token (401 without it, CORS header on the 401 too; 200
# with it). Without the CORS flag an OPTIONS still needs the token.
. "$WEFT_SRC/tests/trainer/lib.sh"
: "${WEFT_SERVE:?set by ctest}" "${WEFT_SERVE_TOOL:?set by ctest}"
command -v curl >/dev/null || { echo "skip: curl not found"; exit 77; }
spid=
trap '[ -z "$spid" ] || kill -9 $spid 2>/dev/null || true; wait 2>/dev/null || true; cleanup' EXIT
mkdir -p m/1
"$WEFT_SERVE_TOOL" model smallcnn m/1/model.h5 1 32
echo "a-token-of-at-least-16-characters" >token
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start FLAGS...: weft-serve on a free port ($port), ready (readiness is open
# without a token); another port when the one chosen was taken before the bind
start() {
	for _ in 1 2 3 4 5; do
		port=$(free_port)
		"$WEFT_SERVE" --model_name m --model_base_path m --rest_api_port "$port" \
			--bind_address 127.0.0.1 --port 0 --grpc_port 0 --auth_token_file token "$@" \
			2>"serve-$port.err" &
		spid=$!
		for _ in $(seq 1 600); do
			curl -sf "http://127.0.0.1:$port/v2/health/ready" >/dev/null && return 0
			kill -0 $spid 2>/dev/null || break
			sleep 0.05
		done
		kill -0 $spid 2>/dev/null && fail "weft-serve was not ready"
		grep -q "cannot listen" "serve-$port.err" || { cat "serve-$port.err"; fail "weft-serve ended"; }
		wait $spid || true
	done
	fail "no free port"
}

# call OUT METHOD URL CURL-ARGS...: the status; the headers in OUT (lower case)
call() {
	local out=$1 method=$2 url=$3
	shift 3
	curl -s -o /dev/null -D - -X "$method" -H "Origin: http://page.example" "$@" "$url" |
		tr -d '\r' | tr 'A-Z' 'a-z' >"$out"
	head -1 "$out" | cut -d' ' -f2
}

start --rest_api_enable_cors_support
url="http://127.0.0.1:$port/v1/models/m:predict"
body=$(python3 -c 'import json; print(json.dumps({"instances": [[[[0.5] * 3] * 32] * 32]}))')
st=$(call pre.h OPTIONS "$url" -H "Access-Control-Request-Method: POST" \
	-H "Access-Control-Request-Headers: authorization, content-type")
[ "$st" = 204 ] || { cat pre.h; fail "a preflight without the token: $st, want 204"; }
grep -q "^access-control-allow-origin: \*" pre.h || fail "the preflight has no Access-Control-Allow-Origin"
grep -q "^access-control-allow-methods:.*post" pre.h || fail "the preflight does not allow POST"
grep -q "^access-control-allow-headers: authorization, content-type" pre.h ||
	{ cat pre.h; fail "the preflight does not allow the headers asked for"; }
echo "ok: preflight without the token: 204 with the CORS headers"
st=$(call no.h POST "$url" -H "Content-Type: application/json" -d "$body")
[ "$st" = 401 ] || fail "POST without the token: $st, want 401"
grep -q "^access-control-allow-origin: \*" no.h || fail "the 401 has no Access-Control-Allow-Origin"
echo "ok: the request without the token: 401 with the CORS header"
st=$(call yes.h POST "$url" -H "Content-Type: application/json" \
	-H "Authorization: Bearer $(cat token)" -d "$body")
[ "$st" = 200 ] || fail "POST with the token: $st, want 200"
grep -q "^access-control-allow-origin: \*" yes.h || fail "the 200 has no Access-Control-Allow-Origin"
echo "ok: the request with the token: 200 with the CORS header"
kill -TERM $spid
wait $spid
spid=

start
st=$(call off.h OPTIONS "http://127.0.0.1:$port/v1/models/m:predict" \
	-H "Access-Control-Request-Method: POST")
[ "$st" = 401 ] || fail "OPTIONS without the CORS flag and without the token: $st, want 401"
! grep -q "^access-control-allow-origin" off.h || fail "CORS headers without the CORS flag"
echo "ok: without --rest_api_enable_cors_support an OPTIONS needs the token"
echo PASS
