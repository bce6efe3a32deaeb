#!/usr/bin/env bash
# check-layering.sh: the folder rules of docs/architecture.md that grep can see.
#  1. Nothing under common/, kernels/, model/, worker/, ps/ reads or writes
#     the environment: settings come down in typed option structs from
#     trainer/ (or serve/), which resolve them once at the top of the program.
#  2. Each vendor header is included only by the module that owns it:
#     oneDNN by kernels/cpu, CUDA/cuDNN/cuBLAS by kernels/cuda, MPI by the
#     MPI exchange, NCCL by the NCCL exchange, ZeroMQ by ps/, the HTTP
#     library by serve/.
# Exit 0 when the tree follows them, 1 naming every line that does not.
# Run from anywhere; .ci/run calls it before the tests.
set -uo pipefail
cd "$(dirname "$0")/.."

fail=0
SRC='--include=*.c --include=*.h --include=*.cu --include=*.cc --include=*.cpp'

# 1. getenv (and its relatives) below the top layer
hits=$(grep -rnE $SRC '\b(secure_)?getenv\b|\b(set|unset|put)env\b|\benviron\b' \
	common kernels model worker ps 2>/dev/null)
if [ -n "$hits" ]; then
	echo "check-layering: common/, kernels/, model/, worker/ and ps/ must not read or write the" \
		"environment (resolve the setting in trainer/config.c or serve/main.c and pass it down):"
	echo "$hits"
	fail=1
fi

# 2. vendor headers: "header regex|paths allowed to include it (regex)|library"
# Exceptions kept on purpose (each with its reason):
#  - worker/exchange_nccl.c includes <cuda_runtime.h>: the NCCL exchange
#    orders its stream after the backend's and waits on CUDA events; it is
#    the other GPU module of docs/architecture.md (built only with NCCL).
#  - bench/onednn/conv.c includes <dnnl.h>: it compares oneDNN versions
#    directly (bench_onednn3.sh), outside weft.
#  - tests/ps/ and bench/bench_ps.c include <zmq.h>: the attack and
#    protocol tests speak raw ZeroMQ to a real server, and the benchmark
#    measures raw ZeroMQ as the peer weft's parameter server is compared to.
rules=(
	'oneapi/dnnl/|dnnl[_a-z]*\.h|^kernels/cpu/|^bench/onednn/|oneDNN'
	'cuda[_a-z0-9]*\.h|cudnn[_a-z0-9]*\.h|cublas[_a-z0-9]*\.h|curand[_a-z0-9]*\.h|^kernels/cuda/|^worker/exchange_nccl\.c|CUDA'
	'nccl\.h|^worker/exchange_nccl\.c|NCCL'
	'mpi\.h|^worker/exchange_mpi\.c|MPI'
	'zmq\.h|czmq\.h|^ps/|^tests/ps/|^bench/bench_ps\.c|ZeroMQ'
	'microhttpd\.h|^serve/|libmicrohttpd'
	'sodium\.h|^worker/rendezvous\.c|libsodium'
)
includes=$(grep -rnE $SRC '^\s*#\s*include\s*[<"]' . 2>/dev/null |
	grep -vE '^\./(build[^/]*|\.git|third_party|_deps)/' | sed 's|^\./||')
for rule in "${rules[@]}"; do
	name=${rule##*|}
	rest=${rule%|*}
	# the header alternatives come first, then the allowed paths (^...)
	hdr=$(echo "$rest" | tr '|' '\n' | grep -v '^\^' | paste -sd'|')
	allow=$(echo "$rest" | tr '|' '\n' | grep '^\^' | paste -sd'|')
	bad=$(echo "$includes" | grep -E "#\s*include\s*[<\"]($hdr)" | grep -vE "^($allow)" || true)
	if [ -n "$bad" ]; then
		echo "check-layering: $name headers outside their module (allowed: ${allow//^/}):"
		echo "$bad"
		fail=1
	fi
done

[ "$fail" -eq 0 ] && echo "check-layering: ok (no getenv below trainer/serve; vendor headers in their modules)"
exit "$fail"
