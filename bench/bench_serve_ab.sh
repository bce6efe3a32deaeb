#!/usr/bin/env bash
# bench_serve_ab.sh: this build's weft-serve against another build of it
# (the peer: PEER_SERVE, e.g. the binary of the commit before a change), on
# the same exported resnet20 with the same flags, rounds interleaved (the
# order of the two sides alternates): KServe v2 over HTTP (weft-bench, binary
# FP32 tensors, concurrency CONC) and over gRPC (Triton's perf_analyzer from
# the client venv, concurrency 50), and each server's threads idle and at
# their peak during the runs. Prints the figures, medians over rounds and the
# ratio this / peer (of each round's pair).
#   bench/bench_serve_ab.sh BUILD_DIR PEER_SERVE [SECONDS_PER_RUN]
# Environment: REPEATS (3), CONC ("8 50"), THREADS (compute threads per
# forward thread, 1), MAX_BATCH (32), BATCHING (1; 0: weft-serve's defaults,
# no batching, forward threads one per core).
set -euo pipefail
BUILD=${1:?usage: bench_serve_ab.sh BUILD_DIR PEER_SERVE [SECONDS]}
PEER=${2:?usage: bench_serve_ab.sh BUILD_DIR PEER_SERVE [SECONDS]}
SECS=${3:-5}
REPEATS=${REPEATS:-3}
CONC=${CONC:-8 50}
THREADS=${THREADS:-1}
MAXB=${MAX_BATCH:-32}
BATCH_FLAGS="--enable_batching --max_batch_size $MAXB --batch_timeout_micros 2000 --num_batch_threads 1 --threads $THREADS"
[ "${BATCHING:-1}" = 1 ] || BATCH_FLAGS=
HERE=$(cd "$(dirname "$0")" && pwd)
for b in weft weft-serve bench/weft-bench bench/weft-bench-infer; do
	[ -x "$BUILD/$b" ] || {
		echo "bench_serve_ab: $BUILD/$b not built" >&2
		exit 1
	}
done
[ -x "$PEER" ] || {
	echo "bench_serve_ab: $PEER is not an executable weft-serve" >&2
	exit 1
}
VENV=$("$HERE/../scripts/client-venv.sh") || exit $?
PA="$VENV/bin/perf_analyzer"
# perf_analyzer links the CUDA runtime the venv carries (used only with GPUs)
export LD_LIBRARY_PATH="$(echo "$VENV"/lib/python3*/site-packages/nvidia/cuda_runtime/lib):${LD_LIBRARY_PATH:-}"
TMP=$(mktemp -d)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$TMP"
}
trap cleanup EXIT
"$BUILD/bench/weft-bench-infer" --zoo resnet20 --save "$TMP/resnet20.h5" --seconds 0.1 >/dev/null
"$BUILD/weft" export --model "$TMP/resnet20.h5" --out "$TMP/m/1" >"$TMP/export.log" 2>&1 ||
	{
		cat "$TMP/export.log" >&2
		exit 1
	}
echo "bench_serve_ab: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "resnet20 32x32x3, flags: ${BATCH_FLAGS:-(defaults: no batching)}; median of $REPEATS x ${SECS}s"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
declare -A HTTP GRPC PID
# start SIDE BINARY: one server, default thread settings, its ports in HTTP/GRPC
start() {
	HTTP[$1]=$(free_port)
	GRPC[$1]=$(free_port)
	"$2" --model_name resnet20 --model_base_path "$TMP/m" --bind_address 127.0.0.1 \
		--rest_api_port "${HTTP[$1]}" --port 0 --grpc_port "${GRPC[$1]}" --device cpu \
		--file_system_poll_wait_seconds 0 $BATCH_FLAGS >"$TMP/serve-$1.log" 2>&1 &
	PID[$1]=$!
	PIDS+=($!)
	for _ in $(seq 600); do
		curl -sf "http://127.0.0.1:${HTTP[$1]}/v2/health/ready" >/dev/null && return 0
		sleep 0.1
	done
	cat "$TMP/serve-$1.log" >&2
	exit 1
}
threads() { ls "/proc/${PID[$1]}/task" | wc -l; }
# peak SIDE: the most threads SIDE's server held while the command that
# follows ran
peak() {
	local side=$1 most=0 n
	shift
	"$@" &
	local job=$!
	while kill -0 "$job" 2>/dev/null; do
		n=$(threads "$side")
		[ "$n" -gt "$most" ] && most=$n
		sleep 0.2
	done
	wait "$job" || true
	echo "$most" >>"$TMP/peak-$side"
}
start this "$BUILD/weft-serve"
start peer "$PEER"
sleep 1
echo "idle threads: this $(threads this), peer $(threads peer)"
for r in $(seq "$REPEATS"); do
	sides="this peer"
	[ $((r % 2)) = 0 ] && sides="peer this"
	for side in $sides; do
		for c in $CONC; do
			peak "$side" sh -c "'$BUILD/bench/weft-bench' --url http://127.0.0.1:${HTTP[$side]} \
				--model resnet20 --protocol kserve --concurrency $c --duration $SECS --json |
				sed 's/^{/{\"round\":$r,\"side\":\"$side\",\"concurrency\":$c,/' >>'$TMP/http.jsonl'"
		done
		peak "$side" "$PA" -m resnet20 -u "127.0.0.1:${GRPC[$side]}" -i grpc \
			--concurrency-range 50:50 --measurement-mode time_windows \
			--measurement-interval "$((SECS * 1000))" --stability-percentage 1000 \
			--max-trials 3 -f "$TMP/pa-$side-$r.csv" >"$TMP/pa-$side-$r.log" 2>&1
	done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$TMP" "$REPEATS" <<'PY'
import csv, json, os, statistics, sys
tmp, repeats = sys.argv[1], int(sys.argv[2])
med = statistics.median
http = [json.loads(l) for l in open(os.path.join(tmp, "http.jsonl"))]
def grpc(side, r):
    p = os.path.join(tmp, "pa-%s-%d.csv" % (side, r))
    rows = list(csv.DictReader(open(p))) if os.path.exists(p) else []
    return float(rows[0]["Inferences/Second"]) if rows else float("nan")
print("\n%-22s %12s %12s %10s" % ("", "this", "peer", "this/peer"))
for c in sorted({h["concurrency"] for h in http}):
    fig = {(h["side"], h["round"]): h["images_per_sec"] for h in http if h["concurrency"] == c}
    bad = sum(h["non_2xx"] + h["errors"] for h in http if h["concurrency"] == c)
    rs = range(1, repeats + 1)
    print("%-22s %12.1f %12.1f %9.3fx%s" % (
        "HTTP c=%d img/s" % c, med(fig["this", r] for r in rs), med(fig["peer", r] for r in rs),
        med(fig["this", r] / fig["peer", r] for r in rs),
        "  (%d failed requests)" % bad if bad else ""))
rs = range(1, repeats + 1)
g = {(s, r): grpc(s, r) for s in ("this", "peer") for r in rs}
print("%-22s %12.1f %12.1f %9.3fx" % ("gRPC c=50 infer/s", med(g["this", r] for r in rs),
      med(g["peer", r] for r in rs), med(g["this", r] / g["peer", r] for r in rs)))
peaks = {s: [int(l) for l in open(os.path.join(tmp, "peak-" + s))] for s in ("this", "peer")}
print("%-22s %12d %12d" % ("peak threads", max(peaks["this"]), max(peaks["peer"])))
print("(ratios: median over rounds of each round's this / peer)")
PY
