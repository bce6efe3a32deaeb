#!/usr/bin/env bash
# main-serve.sh CKPT_DIR EVAL_DATA RUN_DIR: the serving half of the main job
# (scripts/main.sh calls it after training). Exports the newest complete
# checkpoint of CKPT_DIR as the next version of RUN_DIR/models/$MODEL_NAME,
# starts weft-serve on a free loopback port, waits until it is ready, scores
# every image of EVAL_DATA over HTTP with weft-bench (KServe v2, 50 clients:
# accuracy, throughput, latency), prints `weft eval`'s accuracy of the same
# model file beside it, and stops the server (SIGTERM: drain, exit 0).
# Environment: BUILD (default build), MODEL_NAME (default model).
set -euo pipefail
[ $# -eq 3 ] || {
	echo "usage: scripts/main-serve.sh CKPT_DIR EVAL_DATA RUN_DIR" >&2
	exit 2
}
CKPT=$1
EVAL=$2
RUN=$3
BUILD=${BUILD:-build}
NAME=${MODEL_NAME:-model}
WEFT=$BUILD/weft
SERVE=$BUILD/weft-serve
BENCH=$BUILD/bench/weft-bench
for b in "$WEFT" "$SERVE" "$BENCH"; do
	[ -x "$b" ] || {
		echo "main-serve: $b is not built" >&2
		exit 1
	}
done
BASE=$RUN/models/$NAME
SERVE_PID=
stop_server() {
	if [ -n "$SERVE_PID" ]; then
		kill -TERM "$SERVE_PID" 2>/dev/null || true
		wait "$SERVE_PID" || echo "main-serve: weft-serve exited with status $?" >&2
		SERVE_PID=
	fi
}
trap stop_server EXIT

echo "== exporting the newest checkpoint of $CKPT to $BASE (batch norm folded)"
"$WEFT" export --checkpoint "$CKPT" --out "$BASE" | tee "$RUN/export.txt"
model=$(sed -n 's/.* to \(.*model\.h5\): version .*/\1/p' "$RUN/export.txt")

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo "== starting weft-serve on http://127.0.0.1:$PORT (log: $RUN/serve.log)"
"$SERVE" --model_name "$NAME" --model_base_path "$BASE" --rest_api_port "$PORT" \
	--bind_address 127.0.0.1 --enable_batching --max_batch_size 32 \
	--batch_timeout_micros 2000 >"$RUN/serve.log" 2>&1 &
SERVE_PID=$!
ready=0
for _ in $(seq 600); do
	if curl -sf "http://127.0.0.1:$PORT/v2/health/ready" >/dev/null; then
		ready=1
		break
	fi
	kill -0 "$SERVE_PID" 2>/dev/null || break
	sleep 0.1
done
if [ "$ready" != 1 ]; then
	cat "$RUN/serve.log" >&2
	echo "main-serve: weft-serve did not become ready" >&2
	exit 1
fi
curl -sf "http://127.0.0.1:$PORT/v1/models/$NAME"
echo

echo "== scoring $EVAL over HTTP (KServe v2 binary tensors, 50 concurrent clients)"
"$BENCH" --url "http://127.0.0.1:$PORT" --model "$NAME" --protocol kserve --dataset "$EVAL" \
	--concurrency 50
echo "== the same model file in-process (weft eval), for comparison"
"$WEFT" eval --model "$model" --data "$EVAL"

echo "== stopping weft-serve (SIGTERM: readiness off, drain, exit)"
stop_server
tail -2 "$RUN/serve.log"
echo "== served model: $model"
