#!/usr/bin/env bash
# bench_grpc.sh: weft-serve's KServe v2 gRPC API against its HTTP API and
# in-process inference of the same model file, at concurrency 50 on the CPU
# (resnet20 32x32x3 by default, dynamic batching on, one server for both
# protocols):
#   - gRPC: Triton's perf_analyzer -i grpc (from the client venv,
#     scripts/client-venv.sh), batch 1 per request, raw FP32 tensors;
#   - HTTP: weft-bench --protocol kserve (binary FP32 tensors), as
#     bench_serve.sh measures it (perf_analyzer's HTTP mode needs
#     /v2/models/m/config, which this server does not answer yet);
#   - in-process: weft-bench-infer at the server's batch size: the ceiling.
# Targets: gRPC >= 90% of in-process; gRPC p99 no worse than HTTP's. Every
# figure is the median of REPEATS interleaved rounds of SECONDS each; ratios
# are medians of per-round ratios. The load generators share the machine.
#   bench/bench_grpc.sh [BUILD_DIR] [SECONDS_PER_RUN]
# Environment: REPEATS (3), ZOO (resnet20), THREADS (1), MAX_BATCH (32),
# DEVICE (cpu), CONCURRENCY (50).
set -euo pipefail
BUILD=${1:-${WEFT_BUILD:-build}}
SECS=${2:-6}
REPEATS=${REPEATS:-3}
ZOO=${ZOO:-resnet20}
DEVICE=${DEVICE:-cpu}
MAXB=${MAX_BATCH:-32}
THREADS=${THREADS:-1}
CONC=${CONCURRENCY:-50}
HERE=$(cd "$(dirname "$0")" && pwd)
for b in weft weft-serve bench/weft-bench bench/weft-bench-infer; do
	[ -x "$BUILD/$b" ] || {
		echo "bench_grpc: $BUILD/$b not built" >&2
		exit 1
	}
done
VENV=$("$HERE/../scripts/client-venv.sh") || {
	echo "bench_grpc: no client venv (perf_analyzer)" >&2
	exit 1
}
PA="$VENV/bin/perf_analyzer"
export LD_LIBRARY_PATH="$(ls -d "$VENV"/lib/python3*/site-packages/nvidia/cuda_runtime/lib | head -1):${LD_LIBRARY_PATH:-}"
TMP=$(mktemp -d)
SERVE_PID=
cleanup() {
	if [ -n "$SERVE_PID" ]; then
		kill "$SERVE_PID" 2>/dev/null || true
		wait "$SERVE_PID" 2>/dev/null || true
	fi
	rm -rf "$TMP"
}
trap cleanup EXIT
"$BUILD/bench/weft-bench-infer" --zoo "$ZOO" --save "$TMP/raw.h5" --seconds 0.1 >/dev/null
"$BUILD/weft" export --model "$TMP/raw.h5" --out "$TMP/m/1" >"$TMP/export.log" 2>&1 ||
	{
		cat "$TMP/export.log" >&2
		exit 1
	}
echo "bench_grpc: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$ZOO, device $DEVICE, $THREADS compute thread(s), batch $MAXB, concurrency $CONC, median of $REPEATS x ${SECS}s"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
REST=$(free_port)
GRPC=$(free_port)
"$BUILD/weft-serve" --model_name m --model_base_path "$TMP/m" --rest_api_port "$REST" \
	--port 0 --grpc_port "$GRPC" --bind_address 127.0.0.1 --device "$DEVICE" \
	--enable_batching --max_batch_size "$MAXB" --batch_timeout_micros 2000 \
	--num_batch_threads 1 --threads "$THREADS" --file_system_poll_wait_seconds 0 \
	>"$TMP/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 300); do
	curl -sf "http://127.0.0.1:$REST/v2/health/ready" >/dev/null && break
	sleep 0.1
done
window_ms=$((SECS * 1000 / 3))
for r in $(seq "$REPEATS"); do
	"$BUILD/bench/weft-bench-infer" --model "$TMP/m/1/model.h5" --batch "$MAXB" \
		--device "$DEVICE" --threads "$THREADS" --seconds "$SECS" |
		sed "s/^{/{\"round\":$r,/" >>"$TMP/inproc.jsonl"
	"$BUILD/bench/weft-bench" --url "http://127.0.0.1:$REST" --model m --protocol kserve \
		--concurrency "$CONC" --duration "$SECS" --json |
		sed "s/^{/{\"round\":$r,/" >>"$TMP/http.jsonl" || true
	"$PA" -m m -i grpc -u "127.0.0.1:$GRPC" --concurrency-range "$CONC" \
		--measurement-interval "$window_ms" -s 1000 --max-trials 3 \
		-f "$TMP/grpc-$r.csv" >"$TMP/pa-$r.log" 2>&1 || {
		tail -20 "$TMP/pa-$r.log" >&2
		exit 1
	}
done

python3 - "$TMP" "$REPEATS" <<'PY'
import csv, json, os, statistics, sys
tmp, repeats = sys.argv[1], int(sys.argv[2])
med = statistics.median
def lines(name):
    return [json.loads(l) for l in open(os.path.join(tmp, name))]
inproc = {r["round"]: r["images_per_sec"] for r in lines("inproc.jsonl")}
http = {r["round"]: r for r in lines("http.jsonl")}
grpc = {}
for r in range(1, repeats + 1):
    row = next(csv.DictReader(open(os.path.join(tmp, "grpc-%d.csv" % r))))
    grpc[r] = {"images_per_sec": float(row["Inferences/Second"]),
               "p50_ms": float(row["p50 latency"]) / 1000, "p99_ms": float(row["p99 latency"]) / 1000}
print("\n%-36s %10s %9s %9s %10s" % ("", "images/s", "p50_ms", "p99_ms", "vs in-proc"))
print("%-36s %10.1f %9s %9s %10s" % ("weft in-process (weft-bench-infer)", med(inproc.values()), "", "", ""))
for name, d in (("KServe gRPC (perf_analyzer)", grpc), ("KServe HTTP (weft-bench)", http)):
    ratio = med(d[r]["images_per_sec"] / inproc[r] for r in d)
    print("%-36s %10.1f %9.2f %9.2f %9.0f%%" % (name, med(v["images_per_sec"] for v in d.values()),
          med(v["p50_ms"] for v in d.values()), med(v["p99_ms"] for v in d.values()), 100 * ratio))
g = med(grpc[r]["images_per_sec"] / inproc[r] for r in grpc)
p99 = med(grpc[r]["p99_ms"] / http[r]["p99_ms"] for r in grpc if r in http)
bad = sum(v["non_2xx"] + v["errors"] for v in http.values())
print("(ratios: median over rounds of each round's figure / that round's in-process one)")
if bad:
    print("HTTP: %d failed requests" % bad)
print("\ntarget gRPC >= 90%% of in-process: %s (%.0f%%)" % ("met" if g >= 0.9 else "NOT met", 100 * g))
print("target gRPC p99 <= HTTP p99: %s (gRPC/HTTP p99 = %.2f)" % ("met" if p99 <= 1.0 else "NOT met", p99))
PY
