# test_bad_input.sh: bad configs and bad data fail with a clear message that
# names the file, key or value, and an exit code in 1..127.
. "$WEFT_SRC/tests/trainer/lib.sh"
make_synth train.h5 128 8 1
make_synth other.h5 64 12 2


good='"data": {"train": "train.h5"}, "train": {"steps": 2, "batch_size": 8}'
printf '{\n  %s,\n  "model": {"name": "mlp",}\n}\n' "$good" >malformed.json
expect_error "malformed.json:3:" "$WEFT" train --config malformed.json

echo "{$good, \"optimizer\": {\"momentun\": 0.9}}" >unknown.json
expect_error "optimizer.momentun: unknown key" "$WEFT" train --config unknown.json

echo "{$good, \"optimizer\": {\"momentum\": \"0.9\"}}" >type.json
expect_error "optimizer.momentum: expected a number, got string" "$WEFT" train --config type.json

echo "{$good}" >ok.json
expect_error "train.stepz: unknown key" "$WEFT" train --config ok.json --set train.stepz=3
expect_error "train.batch_size: must be >= 1" "$WEFT" train --config ok.json \
	--set train.batch_size=0
expect_error "model.name: unknown model 'vgg'" "$WEFT" train --config ok.json \
	--set model.name=vgg
expect_error "missing.h5" "$WEFT" train --config ok.json --set data.train=missing.h5
expect_error "no.json" "$WEFT" train --config no.json

head -c 3000 train.h5 >truncated.h5
expect_error "truncated.h5" "$WEFT" train --config ok.json --set data.train=truncated.h5
printf 'this is not hdf5 at all' >garbage.h5
expect_error "garbage.h5" "$WEFT" train --config ok.json --set data.train=garbage.h5

expect_error "model.classes: is 7 but data.train (train.h5) has 10 classes" \
	"$WEFT" train --config ok.json --set model.classes=7
expect_error "data.eval: other.h5 holds 12x12x3" "$WEFT" train --config ok.json \
	--set data.eval=other.h5
expect_error "parameter_server needs a cluster: set TF_CONFIG" "$WEFT" train --config ok.json \
	--set strategy.name=parameter_server

# Duplicate keys, in a config file and in a --set value.
echo "{$good, \"train\": {\"steps\": 3}}" >dup.json
expect_error "dup.json:1:.*duplicate object key" "$WEFT" train --config dup.json
expect_error "optimizer.schedule" "$WEFT" train --config ok.json \
	--set 'optimizer.schedule={"name": "cosine", "name": "step"}'
# A FIFO or a directory given as a file: refused at once, never a blocked open.
mkfifo fifo.json fifo.h5
mkdir dir.h5
expect_error "fifo.json: not a regular file" timeout 20 "$WEFT" train --config fifo.json
expect_error "fifo.h5: not a regular file" timeout 20 "$WEFT" train --config ok.json \
	--set data.train=fifo.h5
expect_error "dir.h5 is a directory" "$WEFT" train --config ok.json --set data.train=dir.h5
expect_error "fifo.h5: not a regular file" timeout 20 "$WEFT" train --config ok.json \
	--set data.eval=fifo.h5
# --threads -1 is refused, not taken as "not given".
expect_error "train.threads: must be in \[0, 4096\], got -1" "$WEFT" train --config ok.json \
	--threads -1
expect_error "threads" "$WEFT" eval --model missing.h5 --data train.h5 --threads -1

# A model whose input does not fit the data.
"$WEFT" train --config ok.json --device cpu --set checkpoint.dir=ck --set log.dir=lg 2>/dev/null ||
	fail "good config failed"
expect_error "images are 12x12x3 but the model takes 8x8x3" \
	"$WEFT" eval --model ck/step-2/model.h5 --data other.h5
# A checkpoint of another model cannot be resumed by this one.
expect_error "different model" "$WEFT" train --config ok.json --resume --set model.name=mlp \
	--set checkpoint.dir=ck --set log.dir=lg
echo ok
