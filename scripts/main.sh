#!/usr/bin/env bash
# The README's main job on the embedded default: set up, build, make a
# synthetic data set, train smallcnn on it, evaluate the trained model.
# Everything it writes goes under ${RUN:-run}/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
WEFT=${BUILD:-build}/weft
RUN=${RUN:-run}
mkdir -p "$RUN/data"
echo "== making a synthetic data set (10 classes of shapes, 32x32x3)"
[ -f "$RUN/data/train.h5" ] || $WEFT data synth --out "$RUN/data/train.h5" --count 12000 --size 32 --seed 1
[ -f "$RUN/data/eval.h5" ] || $WEFT data synth --out "$RUN/data/eval.h5" --count 2000 --size 32 --seed 2
echo "== training smallcnn"
$WEFT train --config configs/synth-smallcnn.json \
	--set data.train="$RUN/data/train.h5" --set data.eval="$RUN/data/eval.h5" \
	--set checkpoint.dir="$RUN/ckpt" --set log.dir="$RUN/logs"
echo "== evaluating the last checkpoint"
last=$(ls -d "$RUN"/ckpt/step-* | sort -t- -k2 -n | tail -1)
$WEFT eval --model "$last/model.h5" --data "$RUN/data/eval.h5"
echo "== done: metrics in $RUN/logs/metrics.jsonl (tensorboard --logdir $RUN/logs), model in $last/model.h5"
