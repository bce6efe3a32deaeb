# test_finetune.sh: fine-tuning. model.init_from copies every layer
# whose name and shapes match from a weft checkpoint directory or a Keras .h5
# (tests/model/fixtures/mobilenetv2_k3.h5, made by real Keras), lists the
# rest (a new head when the classes differ; the source's preprocessing and
# input name are kept); model.freeze keeps
# the named layers (or the whole "backbone") exactly as they were. The same
# from a nested-base-model Keras .h5 (the Keras transfer-learning recipe);
# Keras 3 .keras archives import, a broken one is a clear error.
. "$WEFT_SRC/tests/trainer/lib.sh"
make_synth p10.h5 2000 32 1
"$WEFT" data synth --out f4.h5 --count 600 --size 32 --seed 3 --classes 4 >/dev/null
"$WEFT" data synth --out f4e.h5 --count 300 --size 32 --seed 4 --classes 4 >/dev/null
cat >cfg.json <<'JSON'
{
  "model": {"name": "smallcnn"},
  "train": {"batch_size": 32, "steps": 40, "seed": 1},
  "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9,
                "schedule": {"name": "cosine", "warmup_steps": 5}},
  "log": {"every_steps": 10}
}
JSON
train() { # DIR ARGS...
	local d=$1
	shift
	"$WEFT" train --config cfg.json --device cpu --threads 1 --no-progress-line \
		--set log.dir="$d/logs" --set checkpoint.dir="$d/ckpt" "$@" >"$d.out" 2>"$d.err" || {
		cat "$d.err"
		fail "training $d failed"
	}
}
ge() { python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= float(sys.argv[2]) else 1)' "$1" "$2"; }
tensor() { # MODEL NAME: the --dump line of tensor NAME
	"$WEFT" inspect --model "$1" --dump | grep "^$2 " || fail "$1 has no tensor $2"
}

# Pretrain on 10 classes; fine-tune a new 4-class head on the frozen backbone.
train pre --set data.train=p10.h5 --set train.steps=150
train ft --set data.train=f4.h5 --set data.eval=f4e.h5 --set model.init_from=pre/ckpt \
	--set 'model.freeze=["backbone"]'
cat ft.err
grep -q "model.init_from: 4 of 4 layers initialised from pre/ckpt/step-150/model.h5" ft.err ||
	fail "init_from does not list what it initialised"
grep -q "model.init_from: f4.h5 holds 4 of the 10 classes of pre/ckpt/step-150/model.h5: the output layer keeps their rows (by class name)" ft.err ||
	fail "no notice that the head keeps the rows of the classes f4.h5 holds"
acc=$(last_metric ft/logs/metrics.jsonl eval_accuracy)
# the same head on the same frozen architecture without the pretrained weights
train scratch --set data.train=f4.h5 --set data.eval=f4e.h5 --set model.freeze=backbone
acc0=$(last_metric scratch/logs/metrics.jsonl eval_accuracy)
echo "eval accuracy after 40 steps of a new head: pretrained backbone $acc, random backbone $acc0"
ge "$acc" 0.9 || fail "fine-tuned accuracy $acc < 0.9"
ge 0.6 "$acc0" || fail "a random frozen backbone reaches $acc0: the test does not show the transfer"
for t in conv1/kernel conv2/bias dense1/kernel; do
	[ "$(tensor pre/ckpt/step-150/model.h5 $t)" = "$(tensor ft/ckpt/step-40/model.h5 $t)" ] ||
		fail "frozen $t changed in fine-tuning"
done

# The same under parameter servers (2 servers, 2 workers): every push names
# the frozen ranges of its chunk and the servers leave them bitwise as they
# were (momentum and Adam alike, with weight decay, which would move them
# even with zero gradients), while the new head trains.
for opt in sgd adam; do
	"$WEFT" launch --ps 2 --workers 2 --threads 1 --device cpu --config cfg.json \
		--set data.train=f4.h5 --set model.init_from=pre/ckpt --set model.freeze=backbone \
		--set optimizer.name=$opt --set optimizer.weight_decay=0.01 --set ps.chunk_bytes=4096 \
		--set train.steps=20 --set checkpoint.every_steps=10 --set log.dir=ps-$opt/logs \
		--set checkpoint.dir=ps-$opt/ckpt >ps-$opt.out 2>&1 || { tail -20 ps-$opt.out; fail "ps fine-tuning ($opt) failed"; }
	for t in conv1/kernel conv2/bias dense1/kernel; do
		[ "$(tensor pre/ckpt/step-150/model.h5 $t)" = "$(tensor ps-$opt/ckpt/step-20/model.h5 $t)" ] ||
			fail "parameter servers ($opt): frozen $t changed"
	done
	[ "$(tensor ps-$opt/ckpt/step-10/model.h5 logits/kernel)" != "$(tensor ps-$opt/ckpt/step-20/model.h5 logits/kernel)" ] ||
		fail "parameter servers ($opt): the head did not train"
done

# Freezing by prefix: conv1 and conv2 fixed, dense1 trained.
train pfx --set data.train=f4.h5 --set model.init_from=pre/ckpt --set 'model.freeze=["conv1","conv2"]' \
	--set train.steps=10
[ "$(tensor pre/ckpt/step-150/model.h5 conv2/kernel)" = "$(tensor pfx/ckpt/step-10/model.h5 conv2/kernel)" ] ||
	fail "frozen conv2/kernel changed"
[ "$(tensor pre/ckpt/step-150/model.h5 dense1/kernel)" != "$(tensor pfx/ckpt/step-10/model.h5 dense1/kernel)" ] ||
	fail "dense1 (not frozen) did not train"
set +e
"$WEFT" train --config cfg.json --set data.train=f4.h5 --set model.freeze=nosuchlayer >/dev/null 2>bad.err
rc=$?
set -e
[ "$rc" -ge 1 ] && [ "$rc" -le 127 ] && grep -q "model.freeze: no layer of smallcnn matches 'nosuchlayer'" bad.err ||
	fail "an unknown freeze prefix is not an error naming it: $(cat bad.err)"

# From a Keras .h5 (keras.applications.MobileNetV2, random weights): every
# layer but the 1000-class head, Keras's preprocessing kept, backbone frozen.
K="$WEFT_SRC/tests/model/fixtures/mobilenetv2_k3.h5"
train mnv2 --set model.name=mobilenetv2 --set data.train=f4.h5 --set train.steps=3 \
	--set model.init_from="$K" --set model.freeze=backbone
grep -q "not initialised (new): predictions$" mnv2.err || fail "Keras init_from: $(cat mnv2.err)"
"$WEFT" inspect --model mnv2/ckpt/step-3/model.h5 >mnv2.txt || fail "inspect failed"
grep -q "preprocessing scale 0.00784314 mean 1 std 1" mnv2.txt ||
	fail "the Keras model's preprocessing was not kept"
# ... and its input name (TF Serving / KServe requests name it)
"$WEFT" summary --model "$K" >k.txt
"$WEFT" summary --model mnv2/ckpt/step-3/model.h5 >ft.txt
kin=$(sed -n 's/^ \([^ ]*\) (input).*/\1/p' k.txt)
fin=$(sed -n 's/^ \([^ ]*\) (input).*/\1/p' ft.txt)
[ -n "$kin" ] && [ "$kin" = "$fin" ] || fail "input name: Keras '$kin', fine-tuned '$fin'"
for t in Conv1/kernel block_16_project_BN/moving_mean; do
	[ "$(tensor "$K" $t)" = "$(tensor mnv2/ckpt/step-3/model.h5 $t)" ] || fail "Keras $t not copied or not frozen"
done

# The Keras transfer-learning model (tests/model/fixtures/finetune_k3.h5, made
# by make_fixtures.py: a base model named as weft's smallcnn, nested as a
# layer with a 10-class head, trained by Keras on weft's synthetic images):
# its backbone frozen, a new 4-class head on other synthetic classes.
KN="$WEFT_SRC/tests/model/fixtures/finetune_k3.h5"
"$WEFT" data synth --out s4.h5 --count 600 --size 8 --seed 3 --classes 4 >/dev/null
"$WEFT" data synth --out s4e.h5 --count 300 --size 8 --seed 4 --classes 4 >/dev/null
train kn --set data.train=s4.h5 --set data.eval=s4e.h5 --set train.steps=60 \
	--set model.init_from="$KN" --set model.freeze=backbone
grep -q "model.init_from: 3 of 4 layers initialised from $KN; not initialised (new): logits" kn.err ||
	fail "nested Keras init_from: $(cat kn.err)"
train kn0 --set data.train=s4.h5 --set data.eval=s4e.h5 --set train.steps=60 --set model.freeze=backbone
accn=$(last_metric kn/logs/metrics.jsonl eval_accuracy)
accn0=$(last_metric kn0/logs/metrics.jsonl eval_accuracy)
echo "nested Keras backbone, 60 steps of a new head: eval accuracy $accn (random backbone $accn0)"
ge "$accn" 0.85 || fail "fine-tuned from the nested Keras model: accuracy $accn < 0.85"
ge 0.6 "$accn0" || fail "a random frozen backbone reaches $accn0: the test does not show the transfer"
for t in conv1/kernel conv2/bias dense1/kernel; do
	[ "$(tensor "$KN" $t)" = "$(tensor kn/ckpt/step-60/model.h5 $t)" ] ||
		fail "nested Keras $t not copied or not frozen"
done
"$WEFT" inspect --model kn/ckpt/step-60/model.h5 | grep -q "preprocessing scale 0.00392157 mean -\?0 std 1" ||
	fail "the nested model's Rescaling(1/255) was not kept as the preprocessing"

# A Keras 3 .keras archive (the same kind of nested model) imports and loads
# directly; a broken one is an error naming the archive and what is wrong.
KA="$WEFT_SRC/tests/model/fixtures/nested_k3.keras"
"$WEFT" import-keras "$KA" imported.h5 >/dev/null 2>ka.err || fail "import-keras .keras: $(cat ka.err)"
"$WEFT" inspect --model imported.h5 | grep -q "3 classes" || fail ".keras import: $("$WEFT" inspect --model imported.h5)"
[ "$(tensor "$KA" Conv1/kernel)" = "$(tensor imported.h5 Conv1/kernel)" ] || fail ".keras: Conv1/kernel differs"
python3 -c 'import zipfile; z = zipfile.ZipFile("m.keras", "w"); z.writestr("config.json", "{}"); z.close()'
set +e
"$WEFT" train --config cfg.json --set data.train=f4.h5 --set model.init_from=m.keras >/dev/null 2>keras.err
rc=$?
set -e
cat keras.err
[ "$rc" -ge 1 ] && [ "$rc" -le 127 ] || fail ".keras archive: exit $rc"
grep -q "m.keras: .keras archive without model.weights.h5" keras.err ||
	fail "broken .keras archive: no message naming the file and what is missing"
echo ok
