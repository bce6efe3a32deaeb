#!/usr/bin/env bash
# The README's main job on the embedded default: set up, build, make a
# synthetic data set, train smallcnn on it on a local cluster (one parameter
# server, two workers, started by `weft launch`), evaluate the trained model,
# then export it, serve it with weft-serve and score the eval set over HTTP.
# Everything it writes goes under ${RUN:-run}/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
WEFT=${BUILD:-build}/weft
RUN=${RUN:-run}
mkdir -p "$RUN/data"
echo "== making a synthetic data set (10 classes of shapes and patterns, 16x16x3)"
[ -f "$RUN/data/synth-train.h5" ] || $WEFT data synth --out "$RUN/data/synth-train.h5" --count 4000 --size 16 --seed 1
[ -f "$RUN/data/synth-eval.h5" ] || $WEFT data synth --out "$RUN/data/synth-eval.h5" --count 500 --size 16 --seed 2
rm -rf "$RUN/ckpt" "$RUN/logs"
echo "== training smallcnn (configs/synth-smallcnn.json) on a local cluster: 1 parameter server, 2 workers"
$WEFT launch --ps 1 --workers 2 --config configs/synth-smallcnn.json \
	--set data.train="$RUN/data/synth-train.h5" --set data.eval="$RUN/data/synth-eval.h5" \
	--set checkpoint.dir="$RUN/ckpt" --set log.dir="$RUN/logs"
last=$(ls -d "$RUN"/ckpt/step-* | sort -t- -k2 -n | tail -1)
echo "== evaluating $last/model.h5"
$WEFT eval --model "$last/model.h5" --data "$RUN/data/synth-eval.h5"
echo "== exporting, serving with weft-serve, scoring the eval set over HTTP"
bash scripts/main-serve.sh "$RUN/ckpt" "$RUN/data/synth-eval.h5" "$RUN"
echo "== done: metrics in $RUN/logs/metrics.jsonl (tensorboard --logdir $RUN/logs), model in $last/model.h5, served model in $RUN/models/"
