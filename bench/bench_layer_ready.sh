#!/usr/bin/env bash
# bench_layer_ready.sh: `weft train` step time with and without
# strategy.layer_ready (the next forward starts layer by layer as its
# parameters land), real compute (resnet20 by default, 1 thread per
# worker). MODE=ps (the default): an emulated cluster, `weft launch --ps 2
# --workers 2 --link RATE` (each process in its own network namespace, its
# link shaped; needs root and iproute2), sync, ps.priority_kb PRIO.
# MODE=allreduce: `mpirun -np 2` on loopback, strategy.bucket_mb BUCKET.
# A run's figure is the chief's
# median step time over the steps after WARMUP (log.every_steps 1: batch /
# the logged images/s); the configurations run interleaved, ROUNDS rounds,
# and the figures printed are the medians over rounds, with each round's
# ratio (layer_ready / without), and the load average around each run.
#
#   bench/bench_layer_ready.sh [BUILD_DIR]
#   (env: MODE MODEL BATCH STEPS WARMUP ROUNDS LINK PRIO CHUNK BUCKET)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
WEFT=$BUILD/weft
MODEL=${MODEL:-resnet20}
BATCH=${BATCH:-32}
STEPS=${STEPS:-30}
WARMUP=${WARMUP:-5}
ROUNDS=${ROUNDS:-3}
LINK=${LINK:-100mbit}
PRIO=${PRIO:-128}
CHUNK=${CHUNK:-65536}
MODE=${MODE:-ps}
BUCKET=${BUCKET:-0.25}
[ -x "$WEFT" ] || { echo "no weft binary at $WEFT (build first, or pass the build dir)"; exit 1; }
WORK=$(mktemp -d /tmp/weft-bench-layer-ready.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
"$WEFT" data synth --out train.h5 --count 1024 --size 32 --seed 1 >/dev/null
cat >c.json <<JSON
{"model": {"name": "$MODEL"}, "data": {"train": "train.h5", "augment": false},
 "train": {"batch_size": $BATCH, "steps": $STEPS, "seed": 1},
 "optimizer": {"name": "sgd", "lr": 0.01, "momentum": 0.9},
 "ps": {"priority_kb": $PRIO, "chunk_bytes": $CHUNK},
 "checkpoint": {"every_steps": 0, "keep": 1}, "log": {"every_steps": 1}}
JSON

# median_ms METRICS: the median step time (ms) of the steps after WARMUP
median_ms() {
	python3 - "$1" "$BATCH" "$WARMUP" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
b, w = float(sys.argv[2]), int(sys.argv[3])
v = [1e3 * b / r["images_per_sec"] for r in rows if r["step"] > w and r["images_per_sec"] > 0]
print(f"{statistics.median(v):.1f}")
PY
}
load() { cut -d' ' -f1 /proc/loadavg; }
run() { # run LAYER_READY: prints "median_ms load_before-load_after"
	local l0
	l0=$(load)
	rm -rf "$1"
	if [ "$MODE" = allreduce ]; then
		OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
			mpirun -np 2 --oversubscribe --bind-to none -x OMP_NUM_THREADS \
			"$WEFT" train --config c.json --device cpu --threads 1 \
			--set strategy.name=allreduce --set strategy.bucket_mb="$BUCKET" \
			--set strategy.layer_ready="$1" --set checkpoint.dir="$1/ckpt" \
			--set log.dir="$1/logs" >"$1.log" 2>&1 || { tail -30 "$1.log" >&2; exit 1; }
	else
		"$WEFT" launch --ps 2 --workers 2 --threads 1 --device cpu --config c.json \
			--insecure --link "$LINK" --set strategy.layer_ready="$1" \
			--set checkpoint.dir="$1/ckpt" --set log.dir="$1/logs" >"$1.log" 2>&1 ||
			{ tail -30 "$1.log" >&2; exit 1; }
	fi
	echo "$(median_ms "$1/logs/metrics.jsonl") $l0-$(load)"
}
med() { python3 -c 'import statistics,sys; print("%.1f" % statistics.median(map(float, sys.argv[1:])))' "$@"; }

if [ "$MODE" = allreduce ]; then
	echo "== $MODEL batch $BATCH, mpirun -np 2 on loopback, buckets of $BUCKET MiB," \
		"$STEPS steps (median after $WARMUP), $ROUNDS rounds"
else
	echo "== $MODEL batch $BATCH, 2 workers x 2 ps, links $LINK, ps.priority_kb $PRIO," \
		"chunks of $CHUNK bytes, $STEPS steps (median after $WARMUP), $ROUNDS rounds"
fi
echo "== $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
OFF="" ON="" R=""
for r in $(seq "$ROUNDS"); do
	read -r off loff <<<"$(run false)"
	read -r on lon <<<"$(run true)"
	ratio=$(python3 -c "print('%.3f' % ($on / $off))")
	OFF+=" $off" ON+=" $on" R+=" $ratio"
	echo "round $r: without $off ms (load $loff)   layer_ready $on ms (load $lon)   ratio $ratio"
done
off=$(med $OFF)
on=$(med $ON)
echo "without layer_ready: $off ms/step (median of rounds)"
echo "layer_ready:         $on ms/step"
echo "ratio:               $(python3 -c "print('%.3f' % ($on / $off))") (rounds:$R)"
