#!/usr/bin/env bash
# serve_cpu_split.sh: where the CPU goes while Triton's perf_analyzer drives
# weft-serve at concurrency 50: CPU seconds of each weft-serve thread (by
# name: serve-batch, grpc-loop, MHD-worker, ...) and of perf_analyzer over 10
# s, with perf_analyzer's throughput and latency breakdown. A diagnostic for
# bench_perf_analyzer.sh's ratios (on 2 vCPUs the client and the protocol
# threads take CPU from the compute threads that in-process runs keep).
#   bench/serve_cpu_split.sh [BUILD_DIR] [MODEL]     (MODEL: a zoo name, 224x224)
# Environment: PROTOS ("http grpc"), SERVE_FLAGS (extra weft-serve flags, e.g.
# "--num_batch_threads 1 --threads 2").
set -euo pipefail
BUILD=${1:-build}
MODEL=${2:-mobilenetv2}
HERE=$(cd "$(dirname "$0")" && pwd)
VENV=$("$HERE/../scripts/client-venv.sh") || exit $?
export LD_LIBRARY_PATH="$(echo "$VENV"/lib/python3*/site-packages/nvidia/cuda_runtime/lib):${LD_LIBRARY_PATH:-}"
TMP=$(mktemp -d)
SP=
trap '[ -n "$SP" ] && kill $SP 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
GRPC=$(free_port)
mkdir -p "$TMP/repo/$MODEL/1"
"$BUILD/tests/serve_tool" model "$MODEL" "$TMP/repo/$MODEL/1/model.h5" 1 224 >/dev/null
# shellcheck disable=SC2086
"$BUILD/weft-serve" --model_repository "$TMP/repo" --rest_api_port "$PORT" --port 0 --grpc_port "$GRPC" \
	--bind_address 127.0.0.1 --device cpu --enable_batching --max_batch_size 16 --batch_timeout_micros 5000 \
	--file_system_poll_wait_seconds 0 --request_timeout_seconds 600 ${SERVE_FLAGS:-} >"$TMP/serve.log" 2>&1 &
SP=$!
for _ in $(seq 1200); do
	curl -sf "http://127.0.0.1:$PORT/v2/health/ready" >/dev/null && break
	sleep 0.1
done
grep "is available" "$TMP/serve.log" || true
snap() { # name cpu-ticks per line: each server thread, perf_analyzer, the machine
	for t in /proc/$SP/task/*; do echo "$(tr ' ' _ <"$t/comm") $(awk '{print $14+$15}' "$t/stat")"; done
	echo "perf_analyzer $(awk '{print $14+$15}' "/proc/$1/stat")"
	echo "machine $(awk 'NR==1{print $2+$3+$4+$7+$8}' /proc/stat) $(awk 'NR==1{s=0; for(i=2;i<=NF;i++) s+=$i; print s}' /proc/stat)"
}
for proto in ${PROTOS:-http grpc}; do
	url=127.0.0.1:$PORT
	[ "$proto" = grpc ] && url=127.0.0.1:$GRPC
	"$VENV/bin/perf_analyzer" -m "$MODEL" -u "$url" -i "$proto" --concurrency-range 50:50 \
		--measurement-mode time_windows --measurement-interval 8000 --stability-percentage 1000 \
		--max-trials 3 --percentile 99 >"$TMP/pa-$proto.log" 2>&1 &
	pa=$!
	sleep 8
	snap $pa >"$TMP/s0"
	sleep 10
	snap $pa >"$TMP/s1"
	wait $pa
	echo "== $proto: CPU seconds in 10 s"
	python3 - "$TMP/s0" "$TMP/s1" <<'PY'
import collections, sys
def rd(f):
    d, m = collections.Counter(), None
    for line in open(f):
        k, *v = line.split()
        if k == "machine":
            m = [int(x) for x in v]
        else:
            d[k] += int(v[0])
    return d, m
(a, ma), (b, mb) = rd(sys.argv[1]), rd(sys.argv[2])
for k in sorted(b, key=lambda k: a[k] - b[k]):
    if b[k] > a[k]:
        print("  %-16s %6.2f" % (k, (b[k] - a[k]) / 100))
print("  machine busy     %6.2f of %.2f" % ((mb[0] - ma[0]) / 100, (mb[1] - ma[1]) / 100))
PY
	grep -E "Throughput|p99 latency|Avg request" "$TMP/pa-$proto.log" | tail -3
done
