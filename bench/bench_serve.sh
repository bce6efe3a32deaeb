#!/usr/bin/env bash
# bench_serve.sh: weft-serve throughput and p99 latency for resnet20 at
# concurrency 1, 8 and 50 (KServe binary FP32 tensors over HTTP, dynamic
# batching on), against weft's own in-process batched inference on the same
# model and device. Prints the ratio; the target at concurrency 50 is >= 85%.
#   bench/bench_serve.sh [BUILD_DIR] [SECONDS_PER_POINT]
set -euo pipefail
BUILD=${1:-${WEFT_BUILD:-build}}
SECS=${2:-5}
DEVICE=${DEVICE:-auto}
MAXB=${MAX_BATCH:-32}
# Same compute for both sides: one forward thread with THREADS compute threads.
THREADS=${THREADS:-$(nproc)}
for b in weft-serve bench/weft-bench bench/weft-bench-infer; do
  [ -x "$BUILD/$b" ] || { echo "bench_serve: $BUILD/$b not built" >&2; exit 1; }
done
TMP=$(mktemp -d)
SERVE_PID=
cleanup() { [ -n "$SERVE_PID" ] && kill "$SERVE_PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
mkdir -p "$TMP/m/1"
"$BUILD/bench/weft-bench-infer" --zoo resnet20 --save "$TMP/m/1/model.h5" --seconds 0.1 >/dev/null
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$BUILD/weft-serve" --model_name resnet20 --model_base_path "$TMP/m" --rest_api_port "$PORT" \
  --bind_address 127.0.0.1 --device "$DEVICE" --enable_batching --max_batch_size "$MAXB" \
  --batch_timeout_micros 2000 --num_batch_threads 1 --threads "$THREADS" \
  --file_system_poll_wait_seconds 0 >"$TMP/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$PORT/v2/health/ready" >/dev/null && break
  sleep 0.1
done

inproc=$("$BUILD/bench/weft-bench-infer" --model "$TMP/m/1/model.h5" --batch "$MAXB" \
  --device "$DEVICE" --threads "$THREADS" --seconds "$SECS")
ref=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["images_per_sec"])' "$inproc")
printf "in-process batched inference (batch %d, %d threads): %.1f images/s\n" "$MAXB" "$THREADS" "$ref"
printf "%-12s %12s %10s %10s %8s\n" concurrency images/s p50_ms p99_ms ratio
for c in 1 8 50; do
  out=$("$BUILD/bench/weft-bench" --url "http://127.0.0.1:$PORT" --model resnet20 \
    --protocol kserve --concurrency "$c" --duration "$SECS" --json)
  python3 - "$out" "$c" "$ref" <<'PY'
import json, sys
r = json.loads(sys.argv[1]); ref = float(sys.argv[3])
print("%-12s %12.1f %10.2f %10.2f %7.0f%%" % (sys.argv[2], r["images_per_sec"], r["p50_ms"],
      r["p99_ms"], 100 * r["images_per_sec"] / ref))
if r["non_2xx"] or r["errors"]:
    print("  (%d non-2xx, %d connection errors)" % (r["non_2xx"], r["errors"]))
if sys.argv[2] == "50":
    ok = r["images_per_sec"] >= 0.85 * ref
    print("target at concurrency 50: >= 85%% of in-process: %s" % ("met" if ok else "NOT met"))
PY
done
