#!/usr/bin/env bash
# backup_workers.sh: what strategy.backup_workers buys against a straggler.
# `weft launch --ps 1 --workers 3` (sync) three ways: no straggler (B = 0);
# worker 2 slowed SLOW-fold (ps.debug_slow) with B = 0, so every step waits
# for it; the same straggler with B = 1, so steps go on with the first two
# pushes and its late batches are trained again by the others. A run's rate
# is the chief's steps/s, the median over its logged windows after the
# first; samples applied/s is that x batch x the gradients a step applies
# (3, or 2 with B = 1). Prints each rate and its ratio to the no-straggler
# job (target: B = 1 with a 3x straggler >= 0.9x in steps/s); medians over
# ROUNDS interleaved rounds.
#
#   bench/backup_workers.sh [BUILD_DIR]   (env: MODEL SIZE BATCH STEPS LOG ROUNDS SLOW THREADS)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
WEFT=$BUILD/weft
MODEL=${MODEL:-resnet20}
SIZE=${SIZE:-32}
BATCH=${BATCH:-32} # per worker
STEPS=${STEPS:-60}
LOG=${LOG:-5}
ROUNDS=${ROUNDS:-3}
SLOW=${SLOW:-3}
THREADS=${THREADS:-$(nproc)}
[ -x "$WEFT" ] || { echo "no weft binary at $WEFT (build first, or pass the build dir)"; exit 1; }
WORK=$(mktemp -d /tmp/weft-bench-backup.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
"$WEFT" data synth --out train.h5 --count 3072 --size "$SIZE" --seed 1 >/dev/null
cat >c.json <<JSON
{"model": {"name": "$MODEL"}, "data": {"train": "train.h5", "augment": false},
 "train": {"batch_size": $BATCH, "steps": $STEPS, "seed": 1},
 "optimizer": {"name": "sgd", "lr": 0.01, "momentum": 0.9},
 "strategy": {"name": "parameter_server", "mode": "sync"},
 "checkpoint": {"every_steps": 0, "keep": 1}, "log": {"every_steps": $LOG}}
JSON

# run NAME B SLOWSPEC: the chief's median steps/s over its windows after the first
run() {
	local name=$1 b=$2 slow=$3
	rm -rf "$name"
	WEFT_PS_DEBUG_SLOW=$slow "$WEFT" launch --ps 1 --workers 3 --threads "$THREADS" \
		--device cpu --config c.json --set strategy.backup_workers="$b" \
		--set checkpoint.dir="$name/ckpt" --set log.dir="$name/logs" >"$name.log" 2>&1 ||
		{ tail -30 "$name.log" >&2; exit 1; }
	python3 - "$name/logs/metrics.jsonl" "$BATCH" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
v = [r["images_per_sec"] for r in rows if "images_per_sec" in r]
v = v[1:] or v
print(f"{statistics.median(v) / float(sys.argv[2]):.3f}")
PY
}
med() { python3 -c 'import statistics,sys; print("%.3f" % statistics.median(map(float, sys.argv[1:])))' "$@"; }

echo "== $MODEL ${SIZE}x$SIZE, batch $BATCH per worker, 3 workers + 1 ps, $STEPS steps," \
	"straggler ${SLOW}x, $(nproc) cores, $ROUNDS rounds"
BASE="" S0="" S1=""
for r in $(seq "$ROUNDS"); do
	a=$(run base 0 "")
	b=$(run slow_b0 0 "2:$SLOW")
	c=$(run slow_b1 1 "2:$SLOW")
	echo "round $r: steps/s  no straggler $a  straggler B=0 $b  straggler B=1 $c"
	BASE+=" $a" S0+=" $b" S1+=" $c"
done
a=$(med $BASE) b=$(med $S0) c=$(med $S1)
python3 - "$a" "$b" "$c" "$BATCH" <<'PY'
import sys
a, b, c, batch = map(float, sys.argv[1:])
print(f"steps/s:            no straggler {a:.3f}  straggler B=0 {b:.3f}  straggler B=1 {c:.3f}")
print(f"samples applied/s:  no straggler {a*batch*3:.1f}  straggler B=0 {b*batch*3:.1f}  straggler B=1 {c*batch*2:.1f}")
print(f"ratio to no straggler, steps/s:   B=0 {b/a:.2f}x  B=1 {c/a:.2f}x (target >= 0.9x)")
print(f"ratio to no straggler, samples/s: B=0 {b/a:.2f}x  B=1 {c*2/(a*3):.2f}x")
PY
