#!/bin/bash
# bench_onednn3.sh: would moving weft's cpu backend from oneDNN 2.6 (Debian
# 12's libdnnl) to oneDNN 3.x make its kernels faster? Builds
# bench/onednn/conv.c against both and runs the same convolutions (resnet50's
# 3x3 at 56x56x64, mobilenetv2's 3x3 depthwise at 56x56x144; fp32 and bf16;
# batch 1 and 32; ReLU post-op) in one run, 2 threads each.
#
# oneDNN 3.x comes from PyPI's `onednn` + `onednn-devel` wheels (the only 3.x
# reachable here): they are built for the SYCL CPU runtime, so they also need
# tbb and Intel's OpenCL CPU runtime (intel-opencl-rt, ~225 MB), found through
# OCL_ICD_FILENAMES. The venv is cached in ${WEFT_VENV_DIR:-~/.cache/weft}/onednn3.
#
# usage: bench/bench_onednn3.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${WEFT_VENV_DIR:-$HOME/.cache/weft}/onednn3
if [ ! -x "$venv/bin/python" ]; then
	python3 -m venv "$venv"
	"$venv/bin/pip" install -q onednn onednn-devel tbb ||
		{ echo "bench_onednn3: cannot install onednn from PyPI" >&2; exit 77; }
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cc -O2 "$here/onednn/conv.c" -o "$out/conv2" -ldnnl
cc -O2 -I"$venv/include" "$here/onednn/conv.c" -o "$out/conv3" -L"$venv/lib" -ldnnl \
	-Wl,-rpath,"$venv/lib"
export OMP_NUM_THREADS=${THREADS:-2}
for shape in dense depthwise; do
	for dt in f32 bf16; do
		for n in 1 32; do
			"$out/conv2" $n $dt $shape
			LD_LIBRARY_PATH="$venv/lib" OCL_ICD_FILENAMES="$venv/lib/libintelocl.so" \
				"$out/conv3" $n $dt $shape
		done
	done
done
