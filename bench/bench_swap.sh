#!/usr/bin/env bash
# bench_swap.sh: what a hot swap costs the requests being served. weft-serve
# serves MobileNetV2 (224x224x3, random weights, dynamic batching) under
# weft-bench at a fixed concurrency (KServe binary FP32 tensors over HTTP on
# loopback); each round measures the steady throughput over STEADY seconds,
# then drops a new version folder into the model's base path (one rename)
# and measures the throughput from that moment until the new version is
# AVAILABLE (its load and its warm-up at every batch size). Throughput is the
# server's own count of answered requests (/metrics) over each window; the
# ratio is swap / steady of the same round, the figure the median of ROUNDS.
# Target: >= 0.70. The load generator runs on the same machine.
#   bench/bench_swap.sh [BUILD_DIR]
# Environment: ROUNDS (3), STEADY (8 s), CONCURRENCY (16), MAX_BATCH (32),
# MODEL (mobilenetv2), SIZE (224), SERVE_FLAGS (extra weft-serve flags),
# SERVE (the weft-serve binary, default BUILD_DIR/weft-serve: another build
# to compare).
set -euo pipefail
BUILD=${1:-${WEFT_BUILD:-build}}
ROUNDS=${ROUNDS:-3}
STEADY=${STEADY:-8}
CONC=${CONCURRENCY:-16}
MAXB=${MAX_BATCH:-32}
MODEL=${MODEL:-mobilenetv2}
SIZE=${SIZE:-224}
TOOL="$BUILD/tests/serve_tool"
SERVE=${SERVE:-$BUILD/weft-serve}
for b in weft-serve bench/weft-bench tests/serve_tool; do
	[ -x "$BUILD/$b" ] || {
		echo "bench_swap: $BUILD/$b not built" >&2
		exit 1
	}
done
TMP=$(mktemp -d)
SERVE_PID= BENCH_PID=
cleanup() {
	for p in $BENCH_PID $SERVE_PID; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$TMP"
}
trap cleanup EXIT
mkdir -p "$TMP/m/1"
"$TOOL" model "$MODEL" "$TMP/m/1/model.h5" 1 "$SIZE" >/dev/null
for r in $(seq "$ROUNDS"); do # the versions to drop in, made before any timing
	mkdir -p "$TMP/stage/$((r + 1))"
	"$TOOL" model "$MODEL" "$TMP/stage/$((r + 1))/model.h5" "$((r + 1))" "$SIZE" >/dev/null
done
echo "bench_swap: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$SERVE: $MODEL ${SIZE}x${SIZE}x3, batch $MAXB, concurrency $CONC, steady window ${STEADY}s, $ROUNDS rounds"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# shellcheck disable=SC2086 # SERVE_FLAGS is a list of flags
"$SERVE" --model_name m --model_base_path "$TMP/m" --rest_api_port "$PORT" \
	--port 0 --grpc_port 0 --bind_address 127.0.0.1 --enable_batching \
	--max_batch_size "$MAXB" --batch_timeout_micros 2000 \
	--file_system_poll_wait_seconds 0.1 ${SERVE_FLAGS:-} >"$TMP/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 600); do
	curl -sf "http://127.0.0.1:$PORT/v2/health/ready" >/dev/null && break
	sleep 0.1
done
curl -sf "http://127.0.0.1:$PORT/v2/health/ready" >/dev/null || {
	cat "$TMP/serve.log" >&2
	exit 1
}
"$BUILD/bench/weft-bench" --url "http://127.0.0.1:$PORT" --model m --protocol kserve \
	--concurrency "$CONC" --duration 100000 >"$TMP/bench.log" 2>&1 &
BENCH_PID=$!
python3 - "$PORT" "$TMP" "$ROUNDS" "$STEADY" <<'PY'
import json, os, statistics, sys, time, urllib.request
port, tmp, rounds, steady = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
base = "http://127.0.0.1:%d" % port

def answered():
    """Requests the server answered so far (weft_serve_requests_total, every endpoint)."""
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        text = r.read().decode()
    return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines()
               if l.startswith("weft_serve_requests_total{") and 'endpoint="v2_infer"' in l)

def available(version):
    with urllib.request.urlopen(base + "/v1/models/m", timeout=30) as r:
        doc = json.load(r)
    return any(s["version"] == str(version) and s["state"] == "AVAILABLE"
               for s in doc.get("model_version_status", []))

def rate(seconds):
    n0, t0 = answered(), time.time()
    time.sleep(seconds)  # a measuring window, not a wait for an event
    return (answered() - n0) / (time.time() - t0)

rate(3)  # the load generator's connections and the batcher settle
ratios = []
for r in range(1, rounds + 1):
    ver = r + 1
    st = rate(steady)
    n0, t0 = answered(), time.time()
    os.rename(os.path.join(tmp, "stage", str(ver)), os.path.join(tmp, "m", str(ver)))
    while not available(ver):
        time.sleep(0.02)
    t1 = time.time()
    sw = (answered() - n0) / (t1 - t0)
    ratios.append(sw / st)
    print("round %d: steady %.1f req/s; version %d dropped in -> AVAILABLE in %.2f s: %.1f req/s;"
          " ratio %.2f" % (r, st, ver, t1 - t0, sw, sw / st), flush=True)
print("median ratio swap / steady: %.2f (target >= 0.70; rounds %s)"
      % (statistics.median(ratios), " ".join("%.2f" % x for x in ratios)))
PY
kill "$BENCH_PID" 2>/dev/null || true
wait "$BENCH_PID" 2>/dev/null || true
BENCH_PID=
grep -E "is available|failed" "$TMP/serve.log" | sed 's/^/  serve: /' | cut -c1-200
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
