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
#                                         elastic allreduce on cuda, bf16
#                                         against fp32 on the digits and
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
	# elastic allreduce over the TCP ring on cuda: equal to --accumulate 2,
	# and a kill -9 of one of three workers that the other two survive
	step elastic_cuda 240 "$0" elastic "$w"
	# bf16 against fp32 on digit images (make_digits.py, made by `bundle`):
	# resnet20, 1500 steps of 64, the same eval accuracy within half a point
	step digits 150 "$0" digits "$w"
	# shorter: BENCH_ARGS="--runs resnet50:128 --precisions bf16 --profile 2" (bench_gpu --help)
	step bench_gpu 420 .gpu/bin/bench_gpu ${BENCH_ARGS:---precisions tf32,bf16 --steps 10 --warmup 3}
	echo "gpu-check: $( [ $rc -eq 0 ] && echo all passed || echo FAILURES above)"
	exit $rc
	;;
elastic) # (run's step) elastic allreduce on cuda (the gradient summed in host memory)
	w=$2/elastic
	rm -rf "$w" && mkdir -p "$w" || exit 1
	set_e="--set data.train=$2/train.h5 --set data.eval=$2/eval.h5 --set train.batch_size=32 --set train.steps=40 --set train.eval_every_steps=0 --set log.every_steps=10"
	# smallcnn: no batch-norm statistics, whose mean over the ring differs
	# from --accumulate's one micro-batch after the other
	.gpu/bin/weft train --config configs/synth-smallcnn.json --device cuda --accumulate 2 $set_e \
		--set checkpoint.dir=$w/acc/ckpt --set log.dir=$w/acc/logs --no-progress-line >$w/acc.txt 2>&1 ||
		{ cat $w/acc.txt; exit 1; }
	.gpu/bin/weft launch --workers 2 --elastic 2:2 --device cuda --config configs/synth-smallcnn.json \
		$set_e --set strategy.name=allreduce --set checkpoint.dir=$w/ring/ckpt --set log.dir=$w/ring/logs \
		>$w/ring.txt 2>&1 || { tail -30 $w/ring.txt; exit 1; }
	.gpu/bin/weft inspect --model $w/acc/ckpt/step-40/model.h5 --dump >$w/acc.dump &&
		.gpu/bin/weft inspect --model $w/ring/ckpt/step-40/model.h5 --dump >$w/ring.dump || exit 1
	python3 tests/trainer/compare_dump.py $w/acc.dump $w/ring.dump 1e-3 ||
		{ echo "elastic: 2 workers on cuda differ from --accumulate 2"; exit 1; }
	# resnet20 (its statistics averaged over the ring), three workers,
	# worker 2 killed -9 once the ring of three has formed
	WEFT_EVENTS=$w/kill.events.jsonl .gpu/bin/weft launch --workers 3 --elastic 2:3 --device cuda \
		--config configs/synth-resnet20.json $set_e --set train.steps=600 --set strategy.name=allreduce \
		--set checkpoint.dir=$w/kill/ckpt --set log.dir=$w/kill/logs >$w/kill.txt 2>&1 &
	lp=$!
	pid=""
	for i in $(seq 600); do
		pid=$(python3 -c 'import json,sys
ev=[json.loads(l) for l in open(sys.argv[1]) if l.strip()]
p=[e["task_pid"] for e in ev if e.get("event")=="started" and e.get("task")=="worker:2"]
ok=any(e.get("event")=="ring_reformed" and e.get("workers")==3 for e in ev)
print(p[-1] if p and ok else "")' $w/kill.events.jsonl 2>/dev/null)
		[ -n "$pid" ] && break
		sleep 0.1
	done
	[ -n "$pid" ] && kill -9 "$pid" && echo "elastic: killed worker 2 (pid $pid)"
	wait $lp || { tail -30 $w/kill.txt; exit 1; }
	grep -c ring_reformed $w/kill.events.jsonl | sed 's/^/elastic: ring_reformed events: /'
	grep -q '"reason":"failure"' $w/kill.events.jsonl || { echo "elastic: no re-formation after the kill"; exit 1; }
	echo "elastic: 2 workers equal --accumulate 2; the job survived the kill"
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
