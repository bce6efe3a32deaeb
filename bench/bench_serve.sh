#!/usr/bin/env bash
# bench_serve.sh: weft-serve throughput and p99 latency for resnet20 on the
# CPU at concurrency 1, 8 and 50 (KServe binary FP32 tensors over HTTP on
# loopback, dynamic batching on), against
#   - weft's own in-process batched inference of the same exported model file
#     (weft-bench-infer, batch MAX_BATCH): the ceiling; target >= 85% at 50;
#   - PyTorch in-process inference of the same network (bench/torch_infer.py,
#     batch 32, same threads; eager NCHW, channels_last and jit.freeze, the
#     best of the three is the peer): target weft over HTTP >= 1.2x.
# Every figure is the median of REPEATS rounds (each round runs every side
# for SECONDS); ratios are medians of per-round ratios. The load generator
# runs on the same machine and takes CPU from the server.
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
"$BUILD/weft" export --model "$TMP/resnet20.h5" --out "$TMP/m/1" >"$TMP/export.log" 2>&1 ||
	{
		cat "$TMP/export.log" >&2
		exit 1
	}
echo "bench_serve: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "resnet20 32x32x3, device $DEVICE, $THREADS compute thread(s) on every side, batch $MAXB, median of $REPEATS x ${SECS}s"

# ---- the server, then REPEATS rounds of: in-process weft, PyTorch, HTTP ----
# Interleaved so that each round's ratios compare runs made under the same
# background load (this matters on a shared machine).
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
have_torch=0
if "$TORCH_PYTHON" -c 'import torch' 2>/dev/null; then
	have_torch=1
else
	echo "(PyTorch not importable by $TORCH_PYTHON: its rows are skipped)"
fi
for r in $(seq "$REPEATS"); do
	"$BUILD/bench/weft-bench-infer" --model "$TMP/m/1/model.h5" --batch "$MAXB" \
		--device "$DEVICE" --threads "$THREADS" --seconds "$SECS" |
		sed "s/^{/{\"round\":$r,/" >>"$TMP/inproc.jsonl"
	if [ "$have_torch" = 1 ]; then
		for variant in "" --channels-last --freeze; do
			"$TORCH_PYTHON" "$HERE/torch_infer.py" --model resnet20 --batch 32 \
				--threads "$THREADS" --seconds "$SECS" $variant |
				sed "s/^{/{\"round\": $r, /" >>"$TMP/torch.jsonl"
		done
	fi
	for c in 1 8 50; do
		"$BUILD/bench/weft-bench" --url "http://127.0.0.1:$PORT" --model resnet20 \
			--protocol kserve --concurrency "$c" --duration "$SECS" --json |
			sed "s/^{/{\"round\":$r,\"concurrency\":$c,/" >>"$TMP/serve.jsonl" ||
			true # failed requests are counted in the JSON
	done
done

python3 - "$TMP" <<'PY'
import json, os, statistics, sys
tmp = sys.argv[1]
def lines(name):
    p = os.path.join(tmp, name)
    return [json.loads(l) for l in open(p)] if os.path.exists(p) else []
med = statistics.median
inproc = {r["round"]: r["images_per_sec"] for r in lines("inproc.jsonl")}
torch = {}  # round -> {variant: images/s}
for r in lines("torch.jsonl"):
    torch.setdefault(r["round"], {})[r["variant"]] = r["images_per_sec"]
print("\n%-44s %10.1f images/s" % ("weft in-process (weft-bench-infer)", med(inproc.values())))
for v in sorted({v for d in torch.values() for v in d}):
    print("%-44s %10.1f images/s" % ("PyTorch %s in-process" % v,
          med(d[v] for d in torch.values() if v in d)))
peer = {r: max(d.values()) for r, d in torch.items()}  # the best PyTorch variant per round
print("\n%-12s %10s %10s %10s %12s %12s" % ("concurrency", "images/s", "p50_ms", "p99_ms",
      "vs weft", "vs PyTorch"))
by_c = {}
for r in lines("serve.jsonl"):
    by_c.setdefault(r["concurrency"], []).append(r)
ratios = {}
for c, rs in sorted(by_c.items()):
    ips = med(r["images_per_sec"] for r in rs)
    vs_weft = med(r["images_per_sec"] / inproc[r["round"]] for r in rs)
    vs_torch = med(r["images_per_sec"] / peer[r["round"]] for r in rs) if peer else float("nan")
    ratios[c] = (vs_weft, vs_torch)
    bad = sum(r["non_2xx"] + r["errors"] for r in rs)
    print("%-12d %10.1f %10.2f %10.2f %11.0f%% %11.2fx%s" % (
        c, ips, med(r["p50_ms"] for r in rs), med(r["p99_ms"] for r in rs), 100 * vs_weft,
        vs_torch, "  (%d failed requests)" % bad if bad else ""))
print("(ratios: median over rounds of each round's HTTP figure / that round's in-process one;"
      " PyTorch: the best of its variants in that round)")
if 50 in ratios:
    w, t = ratios[50]
    print("\ntarget at concurrency 50, >= 85%% of weft in-process: %s (%.0f%%)" % (
        "met" if w >= 0.85 else "NOT met", 100 * w))
    if peer:
        print("target at concurrency 50, >= 1.2x PyTorch in-process: %s (%.2fx)" % (
            "met" if t >= 1.2 else "NOT met", t))
PY
