# test_equivalence.sh: 2 sync workers with 1 and with 2 parameter servers end
# within 1e-5 (relative) of one process with --accumulate 2: same data, same
# seed, models without batch norm or dropout (smallcnn, mlp).
. "$WEFT_SRC/tests/ps/lib.sh"
make_synth train.h5 512 16 3
export WEFT_PS_CHUNK_BYTES=65536 # several chunks, so 2 servers share them
for model in smallcnn mlp; do
	cat >c.json <<JSON
{"model": {"name": "$model"}, "data": {"train": "train.h5", "augment": true},
 "train": {"batch_size": 16, "steps": 10, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9,
               "schedule": {"name": "cosine", "warmup_steps": 2}},
 "checkpoint": {"every_steps": 0}, "log": {"every_steps": 5}}
JSON
	"$WEFT" train --config c.json --device cpu --threads 1 --accumulate 2 \
		--set checkpoint.dir=one/ckpt --set log.dir=one/logs >one.log 2>&1 ||
		fail "$model: the --accumulate 2 run failed"
	"$WEFT" inspect --model one/ckpt/step-10/model.h5 --dump >one.txt
	for nps in 1 2; do
		"$WEFT" launch --ps $nps --workers 2 --threads 2 --device cpu --config c.json \
			--set checkpoint.dir=ps$nps/ckpt --set log.dir=ps$nps/logs >ps$nps.log 2>&1 ||
			fail "$model: launch --ps $nps --workers 2 failed"
		grep -q "ps 1/2: listening.*: [1-9][0-9]* of" ps$nps.log || [ $nps = 1 ] ||
			fail "$model: ps 1 of 2 holds no chunk"
		"$WEFT" inspect --model ps$nps/ckpt/step-10/model.h5 --dump >ps$nps.txt
		python3 "$WEFT_SRC/tests/trainer/compare_dump.py" ps$nps.txt one.txt 1e-5 ||
			fail "$model: 2 workers + $nps ps differ from one process with --accumulate 2"
	done
	rm -rf one ps1 ps2
done
echo ok
