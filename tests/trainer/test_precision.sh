# test_precision.sh: train.precision bf16 (--precision) on the cpu backend:
# smallcnn and resnet20 trained in bf16 for 300 steps reach the fp32 runs' eval
# accuracy within 2 points (the runs diverge by rounding; at 300 steps, short of
# convergence, 1 point is below the run-to-run spread); the notice and fp32 fallback where the CPU has no bf16 (simulated
# with oneDNN's own ISA cap, DNNL_MAX_CPU_ISA=AVX512_CORE); bad names fail.
. "$WEFT_SRC/tests/trainer/lib.sh"
mkdir data
make_synth data/train.h5 2000 16 1
make_synth data/eval.h5 1000 16 2
cfg="$WEFT_SRC/configs/synth-smallcnn.json"
common=(--device cpu --threads 2 --set train.steps=300 --set data.train=data/train.h5
	--set data.eval=data/eval.h5)

"$WEFT" train --config "$cfg" "${common[@]}" --precision fp32 \
	--set log.dir=fp32/logs --set checkpoint.dir=fp32/ckpt >fp32.txt 2>&1 ||
	{ cat fp32.txt; fail "fp32 training failed"; }
"$WEFT" train --help-config >keys.txt # (a file: grep -q would close a pipe early)
if grep -q train.precision keys.txt; then :; else
	fail "train.precision missing from --help-config"
fi
"$WEFT" train --config "$cfg" "${common[@]}" --precision bf16 \
	--set log.dir=bf16/logs --set checkpoint.dir=bf16/ckpt >bf16.txt 2>&1 ||
	{ cat bf16.txt; fail "bf16 training failed"; }
a32=$(last_metric fp32/logs/metrics.jsonl eval_accuracy)
a16=$(last_metric bf16/logs/metrics.jsonl eval_accuracy)
echo "eval accuracy fp32 $a32 bf16 $a16"
python3 -c "import sys; sys.exit(0 if float(sys.argv[2]) >= float(sys.argv[1]) - 0.02 else 1)" \
	"$a32" "$a16" || fail "bf16 accuracy $a16 more than 2 points below fp32 $a32"
if grep -q "no native bf16" bf16.txt; then
	echo "note: this CPU has no native bf16: the bf16 run fell back to fp32"
fi

# resnet20 (batch norms: in bf16 on the cpu device, with the activations and
# gradients between its convs, batch norms and adds) reaches fp32's accuracy too.
r20=("$WEFT_SRC/configs/synth-resnet20.json" --device cpu --threads 2 --set train.steps=300
	--set data.train=data/train.h5 --set data.eval=data/eval.h5 --set data.augment=false
	--set train.batch_size=32 --set train.eval_every_steps=300 --no-progress-line)
for p in fp32 bf16; do
	"$WEFT" train --config "${r20[@]}" --precision $p --set log.dir=r20$p/logs \
		--set checkpoint.dir=r20$p/ckpt >r20$p.txt 2>&1 ||
		{ cat r20$p.txt; fail "resnet20 $p training failed"; }
done
b32=$(last_metric r20fp32/logs/metrics.jsonl eval_accuracy)
b16=$(last_metric r20bf16/logs/metrics.jsonl eval_accuracy)
echo "resnet20 eval accuracy fp32 $b32 bf16 $b16"
python3 -c "import sys; sys.exit(0 if float(sys.argv[2]) >= float(sys.argv[1]) - 0.02 else 1)" \
	"$b32" "$b16" || fail "resnet20 bf16 accuracy $b16 more than 2 points below fp32 $b32"

# A CPU without bf16: the run falls back to fp32 and says so.
DNNL_MAX_CPU_ISA=AVX512_CORE ONEDNN_MAX_CPU_ISA=AVX512_CORE "$WEFT" train --config "$cfg" \
	"${common[@]}" --set train.steps=5 --precision bf16 \
	--set log.dir=nobf/logs --set checkpoint.dir=nobf/ckpt >nobf.txt 2>&1 ||
	{ cat nobf.txt; fail "fallback run failed"; }
grep -q "train.precision bf16: the cpu device has no native bf16: training in fp32" nobf.txt ||
	fail "no fallback notice: $(cat nobf.txt)"

# tf32 (and fp16) are the cuda device's: on the cpu device the run trains in
# fp32 and says so
"$WEFT" train --config "$cfg" "${common[@]}" --set train.steps=5 --precision tf32 \
	--set log.dir=tf32/logs --set checkpoint.dir=tf32/ckpt >tf32.txt 2>&1 ||
	{ cat tf32.txt; fail "--precision tf32 on the cpu device failed"; }
grep -q "train.precision tf32: the cpu device has no native tf32: training in fp32" tf32.txt ||
	fail "no fp32 notice for tf32 on the cpu device: $(cat tf32.txt)"
if "$WEFT" train --config "$cfg" "${common[@]}" --precision fp8 >bad.txt 2>&1; then
	fail "--precision fp8 was accepted"
fi
grep -q "train.precision" bad.txt || fail "bad precision not named: $(cat bad.txt)"
echo ok
