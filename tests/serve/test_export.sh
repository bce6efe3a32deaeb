#!/usr/bin/env bash
# test_export.sh: `weft export` and export.dir. Trains resnet20 (batch norm
# everywhere) a few steps on synthetic data, exports the checkpoint, and
# checks: the export has no batch norm left, its predictions equal the
# checkpoint's within 1e-5 (cpu and ref), `weft eval` agrees, class labels
# and preprocessing are kept, version numbers (next, explicit, taken, given
# step, incomplete step), and export.dir giving versions 1 then 2 on two runs.
# Where weft-serve is built, the exported versions are served and scored.
set -euo pipefail
: "${WEFT:?set by ctest}" "${WEFT_SRC:?set by ctest}" "${WEFT_EXPORT_CHECK:?set by ctest}"
. "$WEFT_SRC/tests/serve/export_lib.sh"

"$WEFT" data synth --out train.h5 --count 512 --size 16 --seed 1 >/dev/null
"$WEFT" data synth --out eval.h5 --count 200 --size 16 --seed 2 >/dev/null
train() { # train RUN: 30 steps of resnet20, checkpoints at 10, 20, 30, export to models/m
	"$WEFT" train --config "$WEFT_SRC/configs/synth-smallcnn.json" --device cpu --threads 2 \
		--no-progress-line --set model.name=resnet20 --set data.train=train.h5 \
		--set data.eval=eval.h5 --set train.steps=30 --set train.batch_size=16 \
		--set optimizer.lr=0.005 --set checkpoint.dir="$1/ckpt" \
		--set checkpoint.every_steps=10 --set checkpoint.keep=3 --set log.dir="$1/logs" \
		--set export.dir=models/m >"$1.out" 2>"$1.err" || {
		cat "$1.err"
		fail "training $1 failed"
	}
}

# ---- export.dir: the end of each run is the next version -------------------
train run1
[ -f models/m/1/model.h5 ] || fail "export.dir: no models/m/1/model.h5 after the first run"
grep -q "exported version 1" run1.err || fail "the first run does not say it exported version 1"
train run2
[ -f models/m/2/model.h5 ] || fail "export.dir: no models/m/2/model.h5 after the second run"
[ "$(ls -A models/m | tr '\n' ' ')" = "1 2 " ] ||
	fail "models/m holds $(ls -A models/m | tr '\n' ' '), want versions 1 and 2 only"

# ---- weft export: versions ---------------------------------------------------
"$WEFT" export --checkpoint run1/ckpt --out out/m >export1.txt || fail "weft export failed"
grep -q "step-30/model.h5" export1.txt || fail "did not export the newest step: $(cat export1.txt)"
[ -f out/m/1/model.h5 ] || fail "weft export --out out/m did not write version 1"
"$WEFT" export --checkpoint run1/ckpt --step 10 --out out/m/5 >/dev/null ||
	fail "export --step 10 to version 5 failed"
"$WEFT" export --checkpoint run1/ckpt --out out/m >/dev/null || fail "a third export failed"
[ -f out/m/5/model.h5 ] && [ -f out/m/6/model.h5 ] ||
	fail "want versions 1, 5 and then 6 (the next after the highest): $(ls -A out/m)"
[ "$(ls -A out/m | tr '\n' ' ')" = "1 5 6 " ] || fail "left-overs in out/m: $(ls -A out/m)"
expect_error "already exists" "$WEFT" export --checkpoint run1/ckpt --out out/m/5
expect_error "step-7" "$WEFT" export --checkpoint run1/ckpt --step 7 --out out/m
rm run1/ckpt/step-20/DONE
expect_error "incomplete" "$WEFT" export --checkpoint run1/ckpt --step 20 --out out/m
expect_error "no complete checkpoint" "$WEFT" export --checkpoint nowhere --out out/m
expect_error "--out" "$WEFT" export --checkpoint run1/ckpt
expect_error "leading zeros" "$WEFT" export --checkpoint run1/ckpt --out out/m/007

# ---- exported == unexported, batch norm gone, labels kept -------------------
ck=run1/ckpt/step-30/model.h5
for dev in cpu ref; do
	"$WEFT_EXPORT_CHECK" "$ck" out/m/1/model.h5 eval.h5 200 $dev >cmp-$dev.json ||
		fail "export_check on $dev failed"
	echo "$dev: $(cat cmp-$dev.json)"
	[ "$(json cmp-$dev.json 'd["max_prob_diff"] <= 1e-5')" = True ] ||
		fail "$dev: exported and checkpoint predictions differ by more than 1e-5"
	[ "$(json cmp-$dev.json 'd["max_logit_diff"] <= 1e-5 * max(1.0, d["max_logit"])')" = True ] ||
		fail "$dev: logits differ by more than 1e-5 relative"
	[ "$(json cmp-$dev.json 'd["top1_agree"] == d["count"] == 200')" = True ] ||
		fail "$dev: top-1 classes differ"
done
[ "$(json cmp-cpu.json 'd["mean_top_prob"] < 0.99')" = True ] ||
	fail "the trained model's predictions are saturated: the comparison proves little"
[ "$(json cmp-cpu.json 'd["state"][0] > 0 and d["state"][1] == 0')" = True ] ||
	fail "the export still has batch-norm statistics"
[ "$(json cmp-cpu.json 'd["layers"][1] < d["layers"][0]')" = True ] ||
	fail "the export did not drop the folded layers"
[ "$(json cmp-cpu.json 'd["classes"][:2]')" = "['square', 'hollow_square']" ] ||
	fail "class labels not recorded from the data: $(json cmp-cpu.json 'd["classes"]')"
"$WEFT" inspect --model out/m/1/model.h5 >inspect.txt
grep -q "trained_steps 30" inspect.txt || fail "trained_steps not kept"
grep -q "scale 0.00392157 mean 0.5 std 0.25 order RGB" inspect.txt ||
	fail "preprocessing not kept: $(grep preprocessing inspect.txt)"
"$WEFT" eval --model "$ck" --data eval.h5 --device cpu --json | tail -1 >eval-ck.json
"$WEFT" eval --model out/m/1/model.h5 --data eval.h5 --device cpu --json | tail -1 >eval-ex.json
python3 - eval-ck.json eval-ex.json <<'PY' || fail "weft eval: checkpoint and export disagree"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
print("weft eval: checkpoint", a, "export", b)
sys.exit(0 if a["accuracy"] == b["accuracy"] and abs(a["loss"] - b["loss"]) <= 1e-5 else 1)
PY
# --precision: recorded in the file (under its checksum), shown by inspect
"$WEFT" export --model "$ck" --precision bf16 --out out/p >export-p.txt || fail "export --precision failed"
grep -q "served in bf16" export-p.txt || fail "export --precision bf16 does not say so: $(cat export-p.txt)"
"$WEFT" inspect --model out/p/1/model.h5 | grep -q "^serving precision bf16$" ||
	fail "inspect does not show the serving precision"
expect_error "--precision half" "$WEFT" export --model "$ck" --precision half --out out/p
# --model with --data: labels from a dataset file
"$WEFT" export --model "$ck" --data eval.h5 --out out/k >/dev/null || fail "export --model failed"
expect_error "nope.h5" "$WEFT" export --model "$ck" --data nope.h5 --out out/k

# ---- served: weft-serve picks the newest version, weft-bench scores it ------
if [ -z "${WEFT_SERVE:-}" ] || [ ! -x "$WEFT_SERVE" ]; then
	echo "SKIP: weft-serve not built: the serving checks did not run"
	exit 77
fi
start_serve serve.log --model_name m --model_base_path models/m --enable_batching \
	--file_system_poll_wait_seconds 0 --device cpu
curl -sf "http://127.0.0.1:$PORT/v1/models/m" >status.json || fail "no model status"
[ "$(json status.json 'd["model_version_status"][0]["version"]')" = 2 ] ||
	fail "weft-serve does not serve the newest version 2: $(cat status.json)"
curl -sf "http://127.0.0.1:$PORT/v1/models/m/metadata" >meta.json || fail "no metadata"
[ "$(json meta.json 'd["metadata"]["weft"]["classes"][2]')" = circle ] ||
	fail "served class labels: $(json meta.json 'd["metadata"]["weft"]["classes"]')"
"$WEFT" eval --model models/m/2/model.h5 --data eval.h5 --device cpu --json | tail -1 >eval2.json
if [ -n "${WEFT_BENCH:-}" ] && [ -x "$WEFT_BENCH" ]; then
	for proto in kserve tf; do
		"$WEFT_BENCH" --url "http://127.0.0.1:$PORT" --model m --protocol $proto \
			--dataset eval.h5 --concurrency 4 --json >bench-$proto.json ||
			fail "weft-bench --dataset ($proto) failed: $(cat bench-$proto.json)"
		echo "weft-bench $proto: $(cat bench-$proto.json)"
		python3 - bench-$proto.json eval2.json <<'PY' || fail "$proto: served accuracy differs from weft eval"
import json, sys
b, e = (json.load(open(p)) for p in sys.argv[1:])
# the same 200 images; one may flip on a near tie (TF numbers travel as text)
sys.exit(0 if b["ok"] == 200 and abs(b["accuracy"] - e["accuracy"]) <= 0.0051 else 1)
PY
	done
fi
kill "$SERVE_PID"
wait "$SERVE_PID" || fail "weft-serve did not exit 0 on SIGTERM"
SERVE_PID=
grep -q "version 2 is available (.*; fp32; " serve.log || fail "a version without a precision is not served in fp32"
# a version exported with --precision bf16 is served in bf16 (or in fp32 with
# a notice naming the file's precision on a CPU without bf16); weft-serve's
# own --precision wins over the file's, and so does WEFT_PRECISION, which
# means the same as the flag
for mode in file flag env; do
	flag=
	[ "$mode" = flag ] && flag="--precision fp32"
	envp=
	[ "$mode" = env ] && envp=fp32
	# shellcheck disable=SC2086
	WEFT_PRECISION=$envp "$WEFT_SERVE" --model_name p --model_base_path out/p --rest_api_port 0 \
		--port 0 --grpc_port 0 --file_system_poll_wait_seconds 0 --device cpu $flag \
		>serve-p.log 2>&1 &
	SERVE_PID=$!
	for _ in $(seq 300); do
		grep -q "is available" serve-p.log && break
		kill -0 "$SERVE_PID" 2>/dev/null || { cat serve-p.log; fail "weft-serve exited"; }
		sleep 0.1
	done
	kill "$SERVE_PID"
	wait "$SERVE_PID" || true
	SERVE_PID=
	if [ "$mode" = file ]; then
		grep -q "is available (.*; bf16; " serve-p.log ||
			grep -q "the model file's precision bf16: the cpu device has no native bf16" serve-p.log ||
			fail "the file's precision bf16 is not used: $(grep available serve-p.log)"
	else
		grep -q "is available (.*; fp32; " serve-p.log ||
			fail "$mode: precision fp32 does not win over the file's: $(grep available serve-p.log)"
		if grep -q "the model file's precision" serve-p.log; then
			fail "$mode: the file's precision was used: $(grep precision serve-p.log)"
		fi
	fi
done
# a precision weft does not know stops weft-serve at once, naming the setting and the names
if WEFT_PRECISION=fp8 timeout 60 "$WEFT_SERVE" --model_base_path out/p --rest_api_port 0 --port 0 \
	--grpc_port 0 >serve-bad.log 2>&1; then
	fail "WEFT_PRECISION=fp8 was accepted"
fi
grep -q "precision (or WEFT_PRECISION): 'fp8' is not one of fp32, tf32, bf16, fp16, int8, auto" \
	serve-bad.log || fail "no error naming the precision: $(cat serve-bad.log)"
echo "PASS"
