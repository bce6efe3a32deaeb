#!/bin/sh
# GPU checks for a machine that has a GPU but none of weft's build
# dependencies (a lent device machine, a bare CUDA image).
#
#   scripts/gpu-check.sh bundle [BUILD]   here: copy the GPU test binaries, weft,
#                                         bench_gpu and the non-system, non-CUDA
#                                         shared libraries they need into .gpu/
#   scripts/gpu-check.sh run [OUTDIR]     there: run the gpu tests, a cuda
#                                         training run, a one-rank NCCL run and
#                                         bench_gpu from .gpu/, logs in OUTDIR;
#                                         STEPS="cuda_ops bench_gpu" runs only
#                                         those steps, BENCH_ARGS replaces
#                                         bench_gpu's arguments
#
# The CUDA libraries (cudart, cuBLAS, cuDNN, NCCL) are the GPU machine's own:
# `run` looks for them under /usr/local/cuda and in Python's nvidia-* wheels.
set -u
mode=${1:-}
root=$(cd "$(dirname "$0")/.." && pwd)
case "$mode" in
bundle)
	build=${2:-build}
	cd "$root" || exit 1
	rm -rf .gpu && mkdir -p .gpu/bin .gpu/lib || exit 1
	bins="tests/gpu_test_cuda_device tests/gpu_test_cuda_ops tests/gpu_test_cuda_train tests/model_test_exec bench/bench_gpu weft"
	for b in $bins; do
		[ -x "$build/$b" ] || { echo "gpu-check: $build/$b is missing (build with the CUDA backend first)" >&2; exit 1; }
		cp "$build/$b" .gpu/bin/ || exit 1
	done
	# Everything ldd resolves outside glibc, the compiler runtime and CUDA.
	libs=$(for b in $bins; do ldd "$build/$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
		grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt)\.so|/cuda')
	cp -L $libs .gpu/lib/ || exit 1
	tar cJf .gpu/lib.tar.xz -C .gpu/lib . && rm -rf .gpu/lib || exit 1
	du -sh .gpu
	grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
	;;
run)
	out=${2:-${OUT:-/tmp/gpu-check}}
	mkdir -p "$out" /tmp/gpu-check/lib || exit 1
	cd "$root" || exit 1
	tar xJf .gpu/lib.tar.xz -C /tmp/gpu-check/lib || exit 1
	cudalibs=""
	for d in /usr/local/cuda/lib64 /usr/local/cuda/lib $(find / -path /proc -prune -o -type d -path '*site-packages/nvidia/*/lib' -print 2>/dev/null); do
		[ -d "$d" ] && cudalibs="$cudalibs:$d"
	done
	export LD_LIBRARY_PATH="/tmp/gpu-check/lib$cudalibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	# bench_gpu finds its PyTorch peer script under the path it was built in.
	built=$(strings .gpu/bin/bench_gpu | grep -m1 -E '^/.*/bench$' | sed 's,/bench$,,')
	[ -n "$built" ] && [ ! -e "$built" ] && mkdir -p "$(dirname "$built")" && ln -s "$root" "$built"
	nvidia-smi -L; nvcc --version | tail -1
	for b in .gpu/bin/*; do ldd "$b" | grep 'not found' | sed "s,^,$b: ,"; done
	rc=0
	step() { # name timeout command... (only the steps named in STEPS, when set)
		name=$1 t=$2
		shift 2
		case " ${STEPS:-$name} " in *" $name "*) ;; *) return 0 ;; esac
		start=$(date +%s)
		timeout "$t" "$@" >"$out/$name.log" 2>&1
		r=$?
		echo "== $name: exit $r in $(($(date +%s) - start)) s"
		tail -n 15 "$out/$name.log"
		[ $r -eq 0 ] || [ $r -eq 77 ] || rc=1
	}
	step cuda_device 60 .gpu/bin/gpu_test_cuda_device
	step cuda_ops 150 .gpu/bin/gpu_test_cuda_ops
	step cuda_train 150 .gpu/bin/gpu_test_cuda_train
	step exec 120 .gpu/bin/model_test_exec
	w=/tmp/gpu-check/run
	rm -rf $w && mkdir -p $w
	step data 60 .gpu/bin/weft data synth --out $w/train.h5 --count 4096 --size 32 --seed 1
	step data_eval 60 .gpu/bin/weft data synth --out $w/eval.h5 --count 1024 --size 32 --seed 2
	set_common="--set data.train=$w/train.h5 --set data.eval=$w/eval.h5 --set train.steps=300 --set train.eval_every_steps=300 --set checkpoint.dir=$w/ckpt --set log.dir=$w/logs --no-progress-line"
	step train_cuda 120 .gpu/bin/weft train --config configs/synth-resnet20.json --device cuda $set_common
	rm -rf $w/ckpt $w/logs
	step train_nccl 120 env TF_CONFIG='{"cluster":{"worker":["127.0.0.1:29411"]},"task":{"type":"worker","index":0}}' \
		.gpu/bin/weft train --config configs/synth-resnet20.json --device cuda --insecure \
		--set strategy.name=allreduce $set_common
	# shorter: BENCH_ARGS="--runs resnet50:128 --precisions bf16 --profile 2" (bench_gpu --help)
	step bench_gpu 420 .gpu/bin/bench_gpu ${BENCH_ARGS:---precisions tf32,bf16 --steps 10 --warmup 3}
	echo "gpu-check: $( [ $rc -eq 0 ] && echo all passed || echo FAILURES above)"
	exit $rc
	;;
*)
	sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
	[ "$mode" = --help ] || [ "$mode" = -h ]
	;;
esac
