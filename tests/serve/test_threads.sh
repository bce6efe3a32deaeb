# test_threads.sh: weft-serve's threads follow the cores and the load. An
# idle server with one model and every API on holds a few dozen threads at
# most on a small machine (handler threads start as requests need them; it
# held 283 on 2 cores when every handler started at once); Triton's
# --grpc-infer-thread-count and --http-thread-count bound the handler threads;
# requests that must be handled at once (a batch that fills only when all of
# them are in) get the handler threads they need.
. "$WEFT_SRC/tests/trainer/lib.sh"
: "${WEFT_SERVE:?set by ctest}" "${WEFT_SERVE_TOOL:?set by ctest}"
mkdir -p models/1
"$WEFT_SERVE_TOOL" model smallcnn models/1/model.h5 1 8 >/dev/null
spid=
stop_server() {
	[ -z "$spid" ] && return 0
	kill -TERM "$spid" 2>/dev/null || true
	wait "$spid" 2>/dev/null || true
	spid=
}
trap 'stop_server; cleanup' EXIT
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# start ARGS...: weft-serve on model m with REST, TF Serving gRPC and KServe
# gRPC on free ports; returns once it answers ready and its gRPC ports are up
start() {
	rest=$(free_port)
	: >serve.err
	"$WEFT_SERVE" --model_name m --model_base_path models --bind_address 127.0.0.1 \
		--rest_api_port "$rest" --port "$(free_port)" --grpc_port "$(free_port)" \
		--file_system_poll_wait_seconds 0 "$@" 2>serve.err &
	spid=$!
	for _ in $(seq 1 600); do
		kill -0 "$spid" 2>/dev/null || { cat serve.err; fail "weft-serve exited at start"; }
		if grep -q "gRPC: TF Serving API on port" serve.err &&
			curl -sf "http://127.0.0.1:$rest/v2/health/ready" >/dev/null; then
			return 0
		fi
		sleep 0.05
	done
	cat serve.err
	fail "weft-serve did not become ready"
}
threads() { ls "/proc/$spid/task" | wc -l; }
named() { cat /proc/"$spid"/task/*/comm | grep -c "^$1\$" || true; }
breakdown() { cat /proc/"$spid"/task/*/comm | sort | uniq -c | tr -s ' \n' ' '; }

cores=$(nproc)
[ "$cores" -le 16 ] || cores=16
bound=$((20 + 2 * cores))
start
n=$(threads)
echo "idle, default flags: $n threads on $(nproc) cores ($(breakdown))"
[ "$n" -le "$bound" ] || fail "an idle server holds $n threads (at most $bound on $cores cores)"
stop_server

start --grpc-infer-thread-count=1 --http-thread-count=1
echo "idle, one handler thread per API: $(threads) threads ($(breakdown))"
[ "$(named grpc-worker)" = 2 ] && [ "$(named http-handler)" = 1 ] ||
	fail "--grpc-infer-thread-count=1 --http-thread-count=1: $(breakdown)"
stop_server

# A batch of 6 fills only when 6 requests are in: each holds a handler thread
# until then, so 6 must start (else it waits out its 10 s batch timeout).
start --enable_batching --max_batch_size 6 --batch_timeout_micros 10000000 \
	--num_batch_threads 1 --http_threads 8
before=$(named http-handler)
zeros=$(python3 -c 'import json; print(json.dumps({"instances": [[[[0.0] * 3] * 8] * 8]}))')
t0=$(date +%s%N)
pids=()
for i in 1 2 3 4 5 6; do
	curl -sf -m 20 -d "$zeros" -o "reply$i.json" "http://127.0.0.1:$rest/v1/models/m:predict" &
	pids+=($!)
done
for p in "${pids[@]}"; do
	wait "$p" || fail "a request of the batch failed"
done
ms=$((($(date +%s%N) - t0) / 1000000))
after=$(named http-handler)
echo "6 requests of one batch: answered in $ms ms; handler threads $before idle, $after after"
[ "$after" -ge 6 ] && [ "$after" -le 8 ] || fail "handler threads after the batch: $after (want 6..8)"
[ "$ms" -lt 8000 ] || fail "the batch waited for its timeout ($ms ms): handler threads did not start"
grep -q '"predictions"' reply6.json || fail "reply: $(cat reply6.json)"
stop_server
echo PASS
