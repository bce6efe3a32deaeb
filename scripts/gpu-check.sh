#!/bin/sh
# GPU checks for a machine that has a GPU but none of weft's build
# dependencies (a lent device machine, a bare CUDA image).
#
#   scripts/gpu-check.sh bundle [BUILD]   here: copy the GPU test binaries, weft,
#                                         bench_gpu and the non-system, non-CUDA
#                                         shared libraries they need into .gpu/,
#                                         and digit images (make_digits.py)
#   scripts/gpu-check.sh run [OUTDIR]     there: run the gpu tests, a cuda
#                                         training run, a one-rank NCCL run,
#                                         bf16 against fp32 on the digits and
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
	# the digit images of the bf16 accuracy check (python there would take its time)
	mkdir -p .gpu/digits &&
		python3 tests/trainer/make_digits.py .gpu/digits/train.bin 4000 1 &&
		python3 tests/trainer/make_digits.py .gpu/digits/eval.bin 1000 2 &&
		"$build/weft" data cifar10 --out .gpu/digits/train.h5 .gpu/digits/train.bin >/dev/null &&
		"$build/weft" data cifar10 --out .gpu/digits/eval.h5 .gpu/digits/eval.bin >/dev/null &&
		rm .gpu/digits/*.bin || exit 1
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
	# bf16 against fp32 on digit images (make_digits.py, made by `bundle`):
	# resnet20, 1500 steps of 64, the same eval accuracy within half a point
	step digits 150 "$0" digits "$w"
	# shorter: BENCH_ARGS="--runs resnet50:128 --precisions bf16 --profile 2" (bench_gpu --help)
	step bench_gpu 420 .gpu/bin/bench_gpu ${BENCH_ARGS:---precisions tf32,bf16 --steps 10 --warmup 3}
	echo "gpu-check: $( [ $rc -eq 0 ] && echo all passed || echo FAILURES above)"
	exit $rc
	;;
digits) # (run's step) the same resnet20 on digit images in fp32 and bf16
	w=$2
	for p in fp32 bf16; do
		.gpu/bin/weft train --config configs/synth-resnet20.json --device cuda --precision $p \
			--set data.train=.gpu/digits/train.h5 --set data.eval=.gpu/digits/eval.h5 \
			--set train.steps=1500 --set train.batch_size=64 --set train.eval_every_steps=1500 \
			--set checkpoint.dir=$w/d$p/ckpt --set log.dir=$w/d$p/logs --no-progress-line \
			>$w/d$p.txt 2>&1 || { cat $w/d$p.txt; exit 1; }
		grep "^trained" $w/d$p.txt | sed "s/^/$p: /"
	done
	a32=$(sed -n 's/.*eval_accuracy \([0-9.]*\).*/\1/p' $w/dfp32.txt | tail -1)
	a16=$(sed -n 's/.*eval_accuracy \([0-9.]*\).*/\1/p' $w/dbf16.txt | tail -1)
	echo "digits eval accuracy: fp32 $a32, bf16 $a16 (bf16 within 0.005 below)"
	python3 -c 'import sys; sys.exit(0 if float(sys.argv[2]) >= float(sys.argv[1]) - 0.005 else 1)' \
		"$a32" "$a16"
	;;
*)
	sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
	[ "$mode" = --help ] || [ "$mode" = -h ]
	;;
esac
