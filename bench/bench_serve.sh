#!/usr/bin/env bash
# bench_serve.sh: weft-serve throughput and p99 latency for resnet20 on the
# CPU at concurrency 1, 8 and 50 (KServe binary FP32 tensors over HTTP on
# loopback, dynamic batching on), against
#   - weft's own in-process batched inference of the same exported model file
#     (weft-bench-infer, batch MAX_BATCH): the ceiling; target >= 85% at 50;
#   - PyTorch in-process inference of the same network (bench/torch_infer.py,
#     batch 32, same threads; eager NCHW, channels_last and jit.freeze, the
#     best of the three is the peer): target weft over HTTP >= 1.2x.
# Every figure is the median of REPEATS runs of SECONDS each (the load
# generator runs on the same machine and takes CPU from the server).
#   bench/bench_serve.sh [BUILD_DIR] [SECONDS_PER_RUN]
# Environment: REPEATS (3), THREADS (compute threads on every side, 1),
# MAX_BATCH (32), DEVICE (cpu), TORCH_PYTHON (/usr/bin/python3: Debian's
# python3-torch; the PyTorch rows are skipped where it does not import).
set -euo pipefail
BUILD=${1:-${WEFT_BUILD:-build}}
SECS=${2:-5}
REPEATS=${REPEATS:-3}
DEVICE=${DEVICE:-cpu}
MAXB=${MAX_BATCH:-32}
THREADS=${THREADS:-1}
TORCH_PYTHON=${TORCH_PYTHON:-/usr/bin/python3}
HERE=$(cd "$(dirname "$0")" && pwd)
for b in weft weft-serve bench/weft-bench bench/weft-bench-infer; do
	[ -x "$BUILD/$b" ] || {
		echo "bench_serve: $BUILD/$b not built" >&2
		exit 1
	}
done
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
# The served model is what a user serves: a resnet20 (random weights) through
# `weft export`, batch norm folded; the in-process ceiling runs the same file.
"$BUILD/bench/weft-bench-infer" --zoo resnet20 --save "$TMP/resnet20.h5" --seconds 0.1 >/dev/null
"$BUILD/weft" export --model "$TMP/resnet20.h5" --out "$TMP/m/1" >/dev/null 2>&1
echo "bench_serve: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "resnet20 32x32x3, device $DEVICE, $THREADS compute thread(s) on every side, batch $MAXB, median of $REPEATS x ${SECS}s"

# ---- in-process: weft, then PyTorch --------------------------------------
for r in $(seq "$REPEATS"); do
	"$BUILD/bench/weft-bench-infer" --model "$TMP/m/1/model.h5" --batch "$MAXB" \
		--device "$DEVICE" --threads "$THREADS" --seconds "$SECS" >>"$TMP/inproc.jsonl"
done
if "$TORCH_PYTHON" -c 'import torch' 2>/dev/null; then
	for variant in "" --channels-last --freeze; do
		for r in $(seq "$REPEATS"); do
			"$TORCH_PYTHON" "$HERE/torch_infer.py" --model resnet20 --batch 32 \
				--threads "$THREADS" --seconds "$SECS" $variant >>"$TMP/torch.jsonl"
		done
	done
else
	echo "(PyTorch not importable by $TORCH_PYTHON: its rows are skipped)"
fi

# ---- through HTTP ----------------------------------------------------------
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$BUILD/weft-serve" --model_name resnet20 --model_base_path "$TMP/m" --rest_api_port "$PORT" \
	--bind_address 127.0.0.1 --device "$DEVICE" --enable_batching --max_batch_size "$MAXB" \
	--batch_timeout_micros 2000 --num_batch_threads 1 --threads "$THREADS" \
	--file_system_poll_wait_seconds 0 >"$TMP/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 300); do
	curl -sf "http://127.0.0.1:$PORT/v2/health/ready" >/dev/null && break
	sleep 0.1
done
for c in 1 8 50; do
	for r in $(seq "$REPEATS"); do
		"$BUILD/bench/weft-bench" --url "http://127.0.0.1:$PORT" --model resnet20 \
			--protocol kserve --concurrency "$c" --duration "$SECS" --json |
			sed "s/^{/{\"concurrency\":$c,/" >>"$TMP/serve.jsonl" || true # failures are counted
	done
done

python3 - "$TMP" <<'PY'
import json, os, statistics, sys
tmp = sys.argv[1]
def lines(name):
    p = os.path.join(tmp, name)
    return [json.loads(l) for l in open(p)] if os.path.exists(p) else []
med = statistics.median
inproc = med(r["images_per_sec"] for r in lines("inproc.jsonl"))
print("\n%-44s %10.1f images/s" % ("weft in-process (weft-bench-infer)", inproc))
torch = {}
for r in lines("torch.jsonl"):
    torch.setdefault(r["variant"], []).append(r["images_per_sec"])
for v, xs in torch.items():
    print("%-44s %10.1f images/s" % ("PyTorch %s in-process" % v, med(xs)))
peer = max((med(xs), v) for v, xs in torch.items()) if torch else None
print("\n%-12s %10s %10s %10s %12s %12s" % ("concurrency", "images/s", "p50_ms", "p99_ms",
      "vs weft", "vs PyTorch"))
by_c = {}
for r in lines("serve.jsonl"):
    by_c.setdefault(r["concurrency"], []).append(r)
for c, rs in sorted(by_c.items()):
    ips = med(r["images_per_sec"] for r in rs)
    bad = sum(r["non_2xx"] + r["errors"] for r in rs)
    print("%-12d %10.1f %10.2f %10.2f %11.0f%% %11.2fx%s" % (
        c, ips, med(r["p50_ms"] for r in rs), med(r["p99_ms"] for r in rs), 100 * ips / inproc,
        ips / peer[0] if peer else float("nan"), "  (%d failed requests)" % bad if bad else ""))
    if c == 50:
        at50 = ips
if 50 in by_c:
    print("\ntarget at concurrency 50, >= 85%% of weft in-process: %s (%.0f%%)" % (
        "met" if at50 >= 0.85 * inproc else "NOT met", 100 * at50 / inproc))
    if peer:
        print("target at concurrency 50, >= 1.2x PyTorch in-process (%s): %s (%.2fx)" % (
            peer[1], "met" if at50 >= 1.2 * peer[0] else "NOT met", at50 / peer[0]))
PY
