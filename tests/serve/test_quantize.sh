#!/usr/bin/env bash
# test_quantize.sh: `weft export --quantize int8`. Trains resnet20 and a
# MobileNetV2 (alpha 0.35) on 32x32 digit images, exports each calibrated on
# the training file and checked on a held-out file, and checks: the export
# quantises the convolutions and prints fp32 and int8 top-1, the two within a
# point; the file says int8 (weft inspect); `weft eval` runs it in int8 by
# default, within a point of `--precision fp32`; a calibration that ruins
# accuracy is refused (nothing written) unless --force; bad flags are named;
# weft-serve serves the version in int8 and answers with the same top-1 as
# weft eval (skipped where weft-serve is not built).
set -euo pipefail
: "${WEFT:?set by ctest}" "${WEFT_SRC:?set by ctest}"
. "$WEFT_SRC/tests/serve/export_lib.sh"
# int8 convolutions need u8 x s8 dot products that do not saturate (VNNI);
# without them weft refuses --quantize int8 (and runs int8 files in fp32)
if ! grep -qwE 'avx512_vnni|avx_vnni' /proc/cpuinfo; then
	echo "skip: this CPU has no VNNI, so weft has no int8 convolutions here"
	exit 77
fi
within_point() { # within_point A B WHAT: |A - B| <= 0.01 (fractions)
	python3 -c 'import sys; sys.exit(0 if abs(float(sys.argv[1]) - float(sys.argv[2])) <= 0.01 else 1)' \
		"$1" "$2" || fail "$3: $1 and $2 differ by more than a point"
}

python3 "$WEFT_SRC/tests/trainer/make_digits.py" train.bin 4000 1
python3 "$WEFT_SRC/tests/trainer/make_digits.py" eval.bin 1000 2
"$WEFT" data cifar10 --out train.h5 train.bin >/dev/null
"$WEFT" data cifar10 --out eval.h5 eval.bin >/dev/null

train() { # train NAME STEPS extra-settings...
	local name=$1 steps=$2
	shift 2
	"$WEFT" train --config "$WEFT_SRC/configs/synth-resnet20.json" --device cpu --threads 1 \
		--no-progress-line --set model.bn_momentum=0.9 --set data.train=train.h5 \
		--set data.eval=eval.h5 --set train.steps="$steps" --set train.batch_size=32 \
		--set train.eval_every_steps="$steps" --set checkpoint.dir="$name/ckpt" \
		--set log.dir="$name/logs" "$@" >"$name.out" 2>"$name.err" ||
		{ cat "$name.err"; fail "training $name failed"; }
}
train r20 200 --set model.name=resnet20 --set optimizer.lr=0.05
train mnv2 600 --set model.name=mobilenetv2 --set model.alpha=0.35 --set optimizer.lr=0.02 \
	--set optimizer.weight_decay=4e-5

for name in r20 mnv2; do
	"$WEFT" export --checkpoint $name/ckpt --out models/$name --quantize int8 --calibrate train.h5 \
		--calibration-samples 256 --eval-data eval.h5 --threads 1 >export-$name.txt 2>&1 ||
		{ cat export-$name.txt; fail "$name: export --quantize int8 failed"; }
	cat export-$name.txt
	line=$(grep "^int8: " export-$name.txt) || fail "$name: no int8 line"
	read -r n8 a32 a8 < <(python3 -c '
import re, sys
m = re.search(r"int8: (\d+) convolutions .* fp32 ([\d.]+)%, int8 ([\d.]+)%", sys.argv[1])
print(m.group(1), float(m.group(2)) / 100, float(m.group(3)) / 100)' "$line")
	[ "$n8" -gt 10 ] || fail "$name: only $n8 convolutions quantised"
	python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= 0.7 else 1)' "$a32" ||
		fail "$name: fp32 top-1 $a32: the model did not learn, the check means nothing"
	within_point "$a32" "$a8" "$name: export's fp32 and int8 top-1"
	"$WEFT" inspect --model models/$name/1/model.h5 >inspect-$name.txt
	grep -q "serving precision int8" inspect-$name.txt || fail "$name: the file does not say int8"
	"$WEFT" eval --model models/$name/1/model.h5 --data eval.h5 --device cpu --threads 1 \
		>eval8-$name.txt 2>&1 || { cat eval8-$name.txt; fail "$name: eval failed"; }
	"$WEFT" eval --model models/$name/1/model.h5 --data eval.h5 --device cpu --threads 1 \
		--precision fp32 >eval32-$name.txt 2>&1
	grep -q "int8)" eval8-$name.txt || fail "$name: weft eval did not run int8: $(cat eval8-$name.txt)"
	grep -q "fp32)" eval32-$name.txt || fail "$name: --precision fp32 ignored"
	e8=$(awk '/^loss/ {print $4}' eval8-$name.txt)
	e32=$(awk '/^loss/ {print $4}' eval32-$name.txt)
	[ "$e8" = "$a8" ] || python3 -c 'import sys; sys.exit(0 if abs(float(sys.argv[1])-float(sys.argv[2])) < 1e-6 else 1)' "$e8" "$a8" ||
		fail "$name: weft eval's int8 top-1 $e8 is not the export's $a8"
	within_point "$e32" "$e8" "$name: weft eval fp32 vs int8"
done

# A calibration that clips every tensor at its median is refused, nothing written.
expect_error "top-1 fell" "$WEFT" export --checkpoint mnv2/ckpt --out models/bad --quantize int8 \
	--calibrate train.h5 --calibration-samples 16 --percentile 60 --eval-data eval.h5
[ ! -e models/bad ] || fail "a refused quantisation left models/bad"
"$WEFT" export --checkpoint mnv2/ckpt --out models/bad --quantize int8 --calibrate train.h5 \
	--calibration-samples 16 --percentile 60 --eval-data eval.h5 --eval-samples 50 --force \
	>force.txt 2>&1 || fail "--force did not export: $(cat force.txt)"
grep -q "exported anyway" force.txt || fail "--force does not warn: $(cat force.txt)"
# --eval-samples checks the first N samples only; weft eval --samples N agrees.
grep -q "top-1 on 50 samples" force.txt || fail "--eval-samples 50 ignored: $(cat force.txt)"
f8=$(sed -n 's/.*int8 \([0-9.]*\)%.*/\1/p' force.txt | head -1)
"$WEFT" eval --model models/bad/1/model.h5 --data eval.h5 --device cpu --threads 1 --samples 50 \
	>eval50.txt 2>&1 || fail "eval --samples 50: $(cat eval50.txt)"
grep -q "(50 samples" eval50.txt || fail "eval --samples 50 ignored: $(cat eval50.txt)"
python3 -c 'import sys; sys.exit(0 if abs(float(sys.argv[1]) * 100 - float(sys.argv[2])) < 0.01 else 1)' \
	"$(awk '/^loss/ {print $4}' eval50.txt)" "$f8" ||
	fail "eval --samples 50 ($(cat eval50.txt)) is not the export's top-1 on 50 samples ($f8%)"
expect_error "--samples" "$WEFT" eval --model models/bad/1/model.h5 --data eval.h5 --samples -1

# Bad flags are named.
expect_error "--calibrate" "$WEFT" export --checkpoint r20/ckpt --out models/x --quantize int8
expect_error "only int8" "$WEFT" export --checkpoint r20/ckpt --out models/x --quantize int4 --calibrate train.h5
expect_error "--eval-samples -2" "$WEFT" export --checkpoint r20/ckpt --out models/x --quantize int8 \
	--calibrate train.h5 --eval-samples -2
expect_error "calibration-method" "$WEFT" export --checkpoint r20/ckpt --out models/x --quantize int8 \
	--calibrate train.h5 --calibration-method mean
expect_error "no calibration ranges" "$WEFT" export --checkpoint r20/ckpt --out models/x --precision int8
expect_error "nope.h5" "$WEFT" export --checkpoint r20/ckpt --out models/x --quantize int8 --calibrate nope.h5
# an uncalibrated model evaluated with --precision int8 runs fp32 and says so
"$WEFT" eval --model r20/ckpt/step-200/model.h5 --data eval.h5 --device cpu --threads 1 \
	--precision int8 >eval-plain.txt 2>&1
grep -q "no int8 calibration" eval-plain.txt || fail "no notice for int8 without calibration"

# ---- served: weft-serve runs the version in int8 ---------------------------
if [ -z "${WEFT_SERVE:-}" ] || [ ! -x "$WEFT_SERVE" ]; then
	echo "SKIP: weft-serve not built: the serving checks did not run"
	exit 77
fi
start_serve serve.log --model_name mnv2 --model_base_path models/mnv2 --port 0 --grpc_port 0 \
	--enable_batching --file_system_poll_wait_seconds 0 --device cpu --threads 1
grep -q "version 1 is available (.*; int8; " serve.log || fail "not served in int8: $(grep available serve.log)"
if [ -n "${WEFT_BENCH:-}" ] && [ -x "$WEFT_BENCH" ]; then
	"$WEFT_BENCH" --url "http://127.0.0.1:$PORT" --model mnv2 --protocol kserve \
		--dataset eval.h5 --concurrency 4 --json >bench.json ||
		fail "weft-bench --dataset failed: $(cat bench.json)"
	served=$(python3 -c 'import json,sys; b=json.load(open(sys.argv[1])); print(b["accuracy"] if b["ok"] == b["requests"] else -1)' bench.json) ||
		fail "bench.json: $(cat bench.json)"
	within_point "$served" "$a8" "served int8 top-1 vs the export's"
fi
kill "$SERVE_PID"
wait "$SERVE_PID" || fail "weft-serve did not exit 0 on SIGTERM"
SERVE_PID=
echo "PASS"
