#!/usr/bin/env bash
# bench_drain.sh: what SIGTERM costs the requests weft-serve is answering.
# weft-serve serves MobileNetV2 (224x224x3, random weights, dynamic batching)
# to HTTP clients (KServe binary tensors, keep-alive) and gRPC clients
# (tritonclient.grpc) at once, and gets SIGTERM: with the model served
# (steady), and while a new version loads beside it (loading). Each round
# reports the requests in flight at SIGTERM and how many failed (target: 0),
# and the seconds from SIGTERM to the process's exit (--drain_timeout_seconds
# 30). The clients run on the same machine (bench/drain_clients.py, in the
# client venv of scripts/client-venv.sh).
#   bench/bench_drain.sh [BUILD_DIR]
# Environment: ROUNDS (3), MODEL (mobilenetv2), SIZE (224), HTTP_CLIENTS (8),
# GRPC_CLIENTS (8).
set -euo pipefail
BUILD=${1:-${WEFT_BUILD:-build}}
ROUNDS=${ROUNDS:-3}
MODEL=${MODEL:-mobilenetv2}
SIZE=${SIZE:-224}
for b in weft-serve tests/serve_tool; do
	[ -x "$BUILD/$b" ] || {
		echo "bench_drain: $BUILD/$b not built" >&2
		exit 1
	}
done
here="$(cd "$(dirname "$0")" && pwd)"
venv="$("$here/../scripts/client-venv.sh")"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/m/1"
"$BUILD/tests/serve_tool" model "$MODEL" "$TMP/m/1/model.h5" 1 "$SIZE" >/dev/null
for v in $(seq 2 $((ROUNDS + 1))); do
	mkdir -p "$TMP/stage/$v"
	"$BUILD/tests/serve_tool" model "$MODEL" "$TMP/stage/$v/model.h5" "$v" "$SIZE" >/dev/null
done
echo "bench_drain: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$BUILD/weft-serve: $MODEL ${SIZE}x${SIZE}x3, batch 32, ${HTTP_CLIENTS:-8} HTTP + ${GRPC_CLIENTS:-8} gRPC clients, $ROUNDS rounds"
"$venv/bin/python" "$here/drain_clients.py" "$BUILD/weft-serve" "$TMP/m" "$TMP/stage" "$SIZE" \
	"$ROUNDS" "${HTTP_CLIENTS:-8}" "${GRPC_CLIENTS:-8}"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
