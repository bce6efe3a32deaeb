# test_accumulate.sh: --accumulate 2 at batch B equals batch 2B (no batch norm:
# smallcnn and mlp), within float tolerance.
. "$WEFT_SRC/tests/trainer/lib.sh"
make_synth train.h5 512 8 3
for model in smallcnn mlp; do
	cat >c.json <<JSON
{"model": {"name": "$model"}, "data": {"train": "train.h5", "augment": true},
 "train": {"batch_size": 16, "steps": 10, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9}, "log": {"every_steps": 5}}
JSON
	"$WEFT" train --config c.json --device cpu --threads 2 --accumulate 2 \
		--set checkpoint.dir=acc/ckpt --set log.dir=acc/logs 2>/dev/null ||
		fail "$model: accumulate run failed"
	"$WEFT" train --config c.json --device cpu --threads 2 --set train.batch_size=32 \
		--set checkpoint.dir=big/ckpt --set log.dir=big/logs 2>/dev/null ||
		fail "$model: big-batch run failed"
	"$WEFT" inspect --model acc/ckpt/step-10/model.h5 --dump >acc.txt
	"$WEFT" inspect --model big/ckpt/step-10/model.h5 --dump >big.txt
	python3 "$WEFT_SRC/tests/trainer/compare_dump.py" acc.txt big.txt 1e-4 ||
		fail "$model: --accumulate 2 differs from batch_size*2"
	rm -rf acc big
done
echo ok
