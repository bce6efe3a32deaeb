#!/bin/bash
# bench_onednn3.sh: would moving weft's cpu backend from oneDNN 2.6 (Debian
# 12's libdnnl) to oneDNN 3.x make its kernels faster? Builds
# bench/onednn/conv.c against both and runs the same convolutions in one run,
# 2 threads each: resnet50's 3x3 at 56x56x64, its first 7x7/2 on 224x224 RGB
# and a 1x1 256->64 at 56x56, mobilenetv2's 3x3 depthwise at 56x56x144; fp32,
# bf16 and int8 (u8 x s8 -> u8, per-channel scales); batch 1 and 32; ReLU.
#
# oneDNN 3.x comes from PyPI's `onednn-cpu-gomp` + `onednn-devel-cpu-gomp`
# (oneDNN 3.2 built with GNU OpenMP, as Debian's 2.6 is: no SYCL or TBB
# runtime needed). The venv is cached in ${WEFT_VENV_DIR:-~/.cache/weft}/onednn3-gomp.
#
# usage: bench/bench_onednn3.sh [SHAPES] [TYPES] [BATCHES]
#   e.g. bench/bench_onednn3.sh "dense first" "int8" "32"
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${WEFT_VENV_DIR:-$HOME/.cache/weft}/onednn3-gomp
if [ ! -f "$venv/include/dnnl.h" ]; then
	python3 -m venv "$venv"
	"$venv/bin/pip" install -q onednn-cpu-gomp onednn-devel-cpu-gomp ||
		{ echo "bench_onednn3: cannot install onednn-cpu-gomp from PyPI" >&2; exit 77; }
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cc -O2 "$here/onednn/conv.c" -o "$out/conv2" -ldnnl
cc -O2 -I"$venv/include" "$here/onednn/conv.c" -o "$out/conv3" -L"$venv/lib" -ldnnl \
	-Wl,-rpath,"$venv/lib"
export OMP_NUM_THREADS=${THREADS:-2}
for shape in ${1:-dense first pointwise depthwise}; do
	for dt in ${2:-f32 bf16 int8}; do
		for n in ${3:-1 32}; do
			"$out/conv2" "$n" "$dt" "$shape"
			"$out/conv3" "$n" "$dt" "$shape"
		done
	done
done
