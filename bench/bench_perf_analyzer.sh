#!/usr/bin/env bash
# bench_perf_analyzer.sh: Triton's perf_analyzer against weft-serve over HTTP
# (KServe v2, binary FP32 tensors) and over gRPC (KServe v2
# GRPCInferenceService, raw FP32 contents), dynamic batching, one server for
# both, at concurrency 50, for
# resnet50 and mobilenetv2 at 224x224x3 (random weights, 10 classes), next to
# weft's in-process batched throughput of the same model file
# (weft-bench-infer, batch MAX_BATCH, same compute threads) measured in the
# same run, interleaved. Targets at concurrency 50: HTTP >= 85% and gRPC >= 90%
# of in-process, gRPC p99 no worse than HTTP's (ratios are medians of
# per-round ratios).
# perf_analyzer comes from the client venv (scripts/client-venv.sh).
#   bench/bench_perf_analyzer.sh [BUILD_DIR] [MODELS]
# Environment: REPEATS (1), THREADS (compute threads, default: all cores),
# BATCH_THREADS (weft-serve's --num_batch_threads, default 2 as weft-serve's
# own default with batching; the server's compute threads THREADS are split
# among them: --threads THREADS/BATCH_THREADS; 1 x 2 was 4-19% slower on 2
# vCPUs for mobilenetv2, bench/RESULTS.md),
# MAX_BATCH (16), CONCURRENCY (50), SECS (in-process seconds, 10),
# WINDOW_MS (perf_analyzer's measurement window, 15000: windows must be long
# against the seconds a request waits at concurrency 50, or the count of
# requests completed inside a window falls short of the server's rate),
# SERVE_ENV (a command prefix for weft-serve: "env OMP_WAIT_POLICY=passive"),
# PRECISION (fp32; int8: each model exported with --quantize int8, calibrated
# on 16 synthetic images, served and measured in-process in int8),
# PA_FLAGS (extra perf_analyzer flags, e.g. "--async": its asynchronous
# client, a few threads instead of one per concurrent request, takes less of
# the CPU the server shares with it; default its synchronous client),
# SHM (0; 1: tensors through Triton's system shared memory: perf_analyzer
# --shared-memory system, weft-serve --shared_memory=local; the client then
# sends region names, not 600 KB bodies),
# PEERS (1: each round also runs bench/peers.py, the peer engines in-process
# at batch MAX_BATCH with THREADS threads, while the server idles, and prints
# served HTTP throughput / the best peer's, the serving target >= 1.2;
# 0: skip them).
# The client shares the machine's cores with the server: each perf_analyzer
# run's CPU time (user + system, from getrusage) over its wall time and the
# cores gives its share S, printed with "vs in/(1-S)", the served throughput against
# the in-process throughput scaled to the CPU left to the server (the
# server's own efficiency; 100%: no cost per request beyond the forward).
set -euo pipefail
BUILD=${1:-${WEFT_BUILD:-build}}
MODELS=${2:-"resnet50 mobilenetv2"}
REPEATS=${REPEATS:-1}
THREADS=${THREADS:-$(nproc)}
BATCH_THREADS=${BATCH_THREADS:-2}
PER_BATCH=$((THREADS / BATCH_THREADS > 0 ? THREADS / BATCH_THREADS : 1))
MAXB=${MAX_BATCH:-16}
CONC=${CONCURRENCY:-50}
SECS=${SECS:-10}
WINDOW=${WINDOW_MS:-15000}
HERE=$(cd "$(dirname "$0")" && pwd)
PRECISION=${PRECISION:-fp32}
PEERS=${PEERS:-1}
SHM=${SHM:-0}
SERVE_SHM=
PA_SHM=
[ "$SHM" = 1 ] && SERVE_SHM="--shared_memory=local" && PA_SHM="--shared-memory system"
for b in weft weft-serve bench/weft-bench-infer tests/serve_tool; do
	[ -x "$BUILD/$b" ] || { echo "bench_perf_analyzer: $BUILD/$b not built" >&2; exit 1; }
done
VENV=$("$HERE/../scripts/client-venv.sh") || exit $?
PA="$VENV/bin/perf_analyzer"
export LD_LIBRARY_PATH="$(echo "$VENV"/lib/python3*/site-packages/nvidia/cuda_runtime/lib):${LD_LIBRARY_PATH:-}"
TMP=$(mktemp -d)
if [ "$PEERS" != 0 ]; then
	PEER_PY=$(sh "$HERE/peers_venv.sh") ||
		{ echo "bench_perf_analyzer: no peer engines (see above): PEERS=0" >&2; PEERS=0; }
fi
SERVE_PID=
cleanup() {
	if [ -n "$SERVE_PID" ]; then
		kill "$SERVE_PID" 2>/dev/null || true
		wait "$SERVE_PID" 2>/dev/null || true
	fi
	rm -rf "$TMP"
}
trap cleanup EXIT
echo "bench_perf_analyzer: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "224x224x3, cpu, $PRECISION, $THREADS compute threads (weft-serve: $BATCH_THREADS batch thread(s) x $PER_BATCH), batch $MAXB, concurrency $CONC, $REPEATS round(s), perf_analyzer ${PA_FLAGS:-(synchronous)}${PA_SHM:+, $PA_SHM}"
# runs a command; writes its CPU seconds (children's user + system) and wall seconds to $1
CPU_PY='import resource, subprocess, sys, time
t = time.time()
rc = subprocess.call(sys.argv[2:])
u = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write("%f %f\n" % (u.ru_utime + u.ru_stime, time.time() - t))
sys.exit(rc)'
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
GRPC=$(free_port)
[ "$PRECISION" = int8 ] &&
	"$BUILD/weft" data synth --out "$TMP/calib.h5" --count 16 --size 224 >/dev/null
for m in $MODELS; do
	mkdir -p "$TMP/repo/$m"
	if [ "$PRECISION" = int8 ]; then # random weights: the accuracy check means nothing
		"$BUILD/tests/serve_tool" model "$m" "$TMP/$m.h5" 1 224 >/dev/null
		"$BUILD/weft" export --model "$TMP/$m.h5" --out "$TMP/repo/$m/1" --quantize int8 \
			--calibrate "$TMP/calib.h5" --calibration-samples 16 --force >/dev/null 2>&1
	else
		mkdir -p "$TMP/repo/$m/1"
		"$BUILD/tests/serve_tool" model "$m" "$TMP/repo/$m/1/model.h5" 1 224 >/dev/null
	fi
done
${SERVE_ENV:-} "$BUILD/weft-serve" --model_repository "$TMP/repo" --rest_api_port "$PORT" --port 0 --grpc_port "$GRPC" --bind_address 127.0.0.1 \
	--device cpu --enable_batching --max_batch_size "$MAXB" --batch_timeout_micros 5000 \
	--num_batch_threads "$BATCH_THREADS" --threads "$PER_BATCH" --file_system_poll_wait_seconds 0 \
	--request_timeout_seconds 600 $SERVE_SHM \
	>"$TMP/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 1200); do
	curl -sf "http://127.0.0.1:$PORT/v2/health/ready" >/dev/null && break
	sleep 0.1
done
for r in $(seq "$REPEATS"); do
	for m in $MODELS; do
		"$BUILD/bench/weft-bench-infer" --model "$TMP/repo/$m/1/model.h5" --batch "$MAXB" \
			--device cpu --threads "$THREADS" --seconds "$SECS" |
			sed "s/^{/{\"round\":$r,\"model\":\"$m\",/" >>"$TMP/inproc.jsonl"
		[ "$PEERS" = 0 ] ||
			"$PEER_PY" "$HERE/peers.py" --models "$m" --infer-batch "$MAXB" --threads "$THREADS" \
				--reps 5 2>/dev/null | sed -n "s/^{/{\"round\":$r,/p" >>"$TMP/peers.jsonl"
		for proto in http grpc; do
			url=127.0.0.1:$PORT
			[ "$proto" = grpc ] && url=127.0.0.1:$GRPC
			# shellcheck disable=SC2086
			python3 -c "$CPU_PY" "$TMP/pa-$m-$proto-$r.cpu" "$PA" -m "$m" -u "$url" -i "$proto" ${PA_FLAGS:-} $PA_SHM --concurrency-range "$CONC:$CONC" \
				--measurement-mode time_windows --measurement-interval "$WINDOW" \
				--stability-percentage 1000 --max-trials 3 --percentile 99 \
				-f "$TMP/pa-$m-$proto-$r.csv" >"$TMP/pa-$m-$proto-$r.log" 2>&1 ||
				{ cat "$TMP/pa-$m-$proto-$r.log" >&2; exit 1; }
		done
	done
done
python3 - "$TMP" "$MODELS" "$REPEATS" <<'PY'
import csv, json, os, statistics, sys
tmp, models, repeats = sys.argv[1], sys.argv[2].split(), int(sys.argv[3])
med = statistics.median
inproc = {(r["model"], r["round"]): r["images_per_sec"]
          for r in map(json.loads, open(os.path.join(tmp, "inproc.jsonl")))}
def pa(m, proto, r):
    with open(os.path.join(tmp, "pa-%s-%s-%d.csv" % (m, proto, r))) as f:
        row = next(csv.DictReader(f))
    return (float(row["Inferences/Second"]), float(row["p50 latency"]) / 1e3,
            float(row["p99 latency"]) / 1e3)
def client_share(m, proto, r):  # perf_analyzer's share of the machine's cores
    cpu, wall = map(float, open(os.path.join(tmp, "pa-%s-%s-%d.cpu" % (m, proto, r))).read().split())
    return cpu / (wall * len(os.sched_getaffinity(0)))  # the cores nproc counts
print("\n%-12s %-5s %12s %10s %9s %9s %7s %9s %11s" % (
    "model", "proto", "in-process/s", "infer/s", "p50_ms", "p99_ms", "vs in", "client S",
    "vs in/(1-S)"))
rounds = range(1, repeats + 1)
for m in models:
    for proto, target in (("http", 0.85), ("grpc", 0.90)):
        rows = [(r,) + pa(m, proto, r) for r in rounds]
        ratio = med(x[1] / inproc[(m, x[0])] for x in rows)
        share = med(client_share(m, proto, r) for r in rounds)
        own = med(x[1] / (inproc[(m, x[0])] * (1 - client_share(m, proto, x[0]))) for x in rows)
        print("%-12s %-5s %12.1f %10.1f %9.1f %9.1f %6.0f%% %8.0f%% %10.0f%%  target >= %.0f%%: %s" % (
            m, proto, med(inproc[(m, r)] for r in rounds), med(x[1] for x in rows),
            med(x[2] for x in rows), med(x[3] for x in rows), 100 * ratio, 100 * share,
            100 * own, 100 * target, "met" if ratio >= target else "NOT met"))
    p99 = med(pa(m, "grpc", r)[2] / pa(m, "http", r)[2] for r in rounds)
    print("%-12s gRPC p99 / HTTP p99 %.2f  target <= 1: %s" % (m, p99, "met" if p99 <= 1 else "NOT met"))
    best = {}
    peers = os.path.join(tmp, "peers.jsonl")
    for p in (map(json.loads, open(peers)) if os.path.exists(peers) else []):
        if p["model"] == m and p["images_per_sec"] > best.get(p["round"], (0, ""))[0]:
            best[p["round"]] = (p["images_per_sec"], p["engine"])
    if best:
        ratio = med(pa(m, "http", r)[0] / best[r][0] for r in rounds if r in best)
        print("%-12s best peer in-process %s %s img/s; served HTTP / best peer %.2f  "
              "target >= 1.2: %s" % (m, ", ".join(best[r][1] for r in sorted(best)),
                                     ", ".join("%.1f" % best[r][0] for r in sorted(best)),
                                     ratio, "met" if ratio >= 1.2 else "NOT met"))
PY
