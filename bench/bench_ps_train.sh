#!/usr/bin/env bash
# bench_ps_train.sh: parameter-server training overhead. resnet20 images/s
# with `weft launch --ps 1 --workers 2` (sync, 1 thread per worker) against
# one process with 2 threads and --accumulate 2 (the same global batch and
# work, the same total threads; target >= 85%). A run's figure is the median
# over its logged windows after the first (the chief's rate x 2 workers for
# the cluster); the figures printed are medians over ROUNDS interleaved rounds.
#
#   bench/bench_ps_train.sh [BUILD_DIR]   (env: MODEL BATCH STEPS LOG ROUNDS)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
WEFT=$BUILD/weft
MODEL=${MODEL:-resnet20}
BATCH=${BATCH:-64} # per worker / per micro-batch
STEPS=${STEPS:-40}
LOG=${LOG:-5}
ROUNDS=${ROUNDS:-3}
[ -x "$WEFT" ] || { echo "no weft binary at $WEFT (build first, or pass the build dir)"; exit 1; }
WORK=$(mktemp -d /tmp/weft-bench-ps.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
"$WEFT" data synth --out train.h5 --count 2048 --size 32 --seed 1 >/dev/null
cat >c.json <<JSON
{"model": {"name": "$MODEL"}, "data": {"train": "train.h5", "augment": false},
 "train": {"batch_size": $BATCH, "steps": $STEPS, "seed": 1},
 "optimizer": {"name": "sgd", "lr": 0.01, "momentum": 0.9},
 "checkpoint": {"every_steps": 0, "keep": 1}, "log": {"every_steps": $LOG}}
JSON

# median_ips METRICS FACTOR: median images_per_sec of the windows after the first, x FACTOR.
median_ips() {
	python3 - "$1" "$2" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
v = [r["images_per_sec"] for r in rows[1:]] or [rows[-1]["images_per_sec"]]
print(f"{statistics.median(v) * float(sys.argv[2]):.1f}")
PY
}
one_run() {
	OMP_NUM_THREADS=2 "$WEFT" train --config c.json --device cpu --threads 2 --accumulate 2 \
		--set checkpoint.dir=one/ckpt --set log.dir=one/logs >/dev/null 2>one.err ||
		{ cat one.err >&2; exit 1; }
	median_ips one/logs/metrics.jsonl 1
}
ps_run() {
	"$WEFT" launch --ps 1 --workers 2 --threads 2 --device cpu --config c.json \
		--set checkpoint.dir=ps/ckpt --set log.dir=ps/logs >ps.log 2>&1 ||
		{ tail -30 ps.log >&2; exit 1; }
	median_ips ps/logs/metrics.jsonl 2 # the chief's rate x 2 workers (sync: equal)
}
med() { python3 -c 'import statistics,sys; print("%.1f" % statistics.median(map(float, sys.argv[1:])))' "$@"; }

echo "== $MODEL, batch $BATCH per worker, $STEPS steps, $(nproc) cores, $ROUNDS rounds"
ONE="" PS=""
for r in $(seq "$ROUNDS"); do
	o=$(one_run)
	p=$(ps_run)
	ONE+=" $o"
	PS+=" $p"
	echo "round $r: one process (--accumulate 2, 2 threads): $o img/s   2 workers + 1 ps: $p img/s"
done
one=$(med $ONE)
ps=$(med $PS)
ratio=$(python3 -c "print('%.3f' % ($ps / $one))")
echo "one process, --accumulate 2:      $one images/s"
echo "parameter servers (1 ps, 2 sync): $ps images/s"
echo "ratio ps / one process:           $ratio (target >= 0.85)"
