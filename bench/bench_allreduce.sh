#!/usr/bin/env bash
# bench_allreduce.sh: allreduce training throughput. resnet20 images/s with
# `mpirun -np 2` (1 thread per rank) against one process with 2 threads and
# --accumulate 2 (the same global batch and work; target >= 90%), for a
# single gradient bucket and for small buckets that overlap backward; and,
# where Debian's python3-torch is installed, PyTorch DistributedDataParallel
# (gloo, 2 processes, 1 thread each) in the same run (target: weft >= 1.3x).
# A run's figure is the median over its logged windows of LOG steps after
# the first; the figures printed are medians over ROUNDS interleaved rounds.
#
#   bench/bench_allreduce.sh [BUILD_DIR]   (env: MODEL BATCH STEPS LOG BUCKETS ROUNDS)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$SRC/build}
WEFT=$BUILD/weft
MODEL=${MODEL:-resnet20}
BATCH=${BATCH:-64}     # per rank / per micro-batch
STEPS=${STEPS:-40}
LOG=${LOG:-5}
BUCKETS=${BUCKETS:-"25 0.25"} # strategy.bucket_mb values (MiB)
ROUNDS=${ROUNDS:-3}
[ -x "$WEFT" ] || { echo "no weft binary at $WEFT (build first, or pass the build dir)"; exit 1; }
command -v mpirun >/dev/null || { echo "mpirun not found: install openmpi-bin"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
WORK=$(mktemp -d /tmp/weft-bench-ar.XXXXXX)
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

HAVE_TORCH=0
/usr/bin/python3 -c 'import torch' 2>/dev/null && HAVE_TORCH=1

one_run() {
	OMP_NUM_THREADS=2 "$WEFT" train --config c.json --device cpu --threads 2 --accumulate 2 \
		--set checkpoint.dir=one/ckpt --set log.dir=one/logs >/dev/null 2>one.err ||
		{ cat one.err >&2; exit 1; }
	median_ips one/logs/metrics.jsonl 1
}
ar_run() { # bucket_mb
	OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe --bind-to none -x OMP_NUM_THREADS \
		"$WEFT" train --config c.json --device cpu --threads 1 \
		--set strategy.name=allreduce --set strategy.bucket_mb="$1" \
		--set checkpoint.dir="ar$1/ckpt" --set log.dir="ar$1/logs" >/dev/null 2>"ar$1.err" ||
		{ cat "ar$1.err" >&2; exit 1; }
	median_ips "ar$1/logs/metrics.jsonl" 2 # rank 0's rate x 2 ranks
}
torch_run() {
	OMP_NUM_THREADS=1 /usr/bin/python3 "$SRC/bench/torch_ddp.py" --model "$MODEL" \
		--procs 2 --threads 1 --batch "$BATCH" --steps $((STEPS - LOG)) --warmup "$LOG" |
		python3 -c 'import json,sys; print("%.1f" % json.loads(sys.stdin.read())["images_per_sec"])'
}
med() { python3 -c 'import statistics,sys; print("%.1f" % statistics.median(map(float, sys.argv[1:])))' "$@"; }

# Rounds interleave the contenders, so load from other work hits them alike.
echo "== $MODEL, batch $BATCH per rank, $STEPS steps, $(nproc) cores, $ROUNDS rounds"
declare -A R
for r in $(seq "$ROUNDS"); do
	R[one]+=" $(one_run)"
	for b in $BUCKETS; do R[ar$b]+=" $(ar_run "$b")"; done
	[ "$HAVE_TORCH" = 1 ] && R[torch]+=" $(torch_run)"
	echo "round $r: one process:${R[one]##* }  $(for b in $BUCKETS; do v=${R[ar$b]}; echo -n "bucket $b:${v##* }  "; done)$([ "$HAVE_TORCH" = 1 ] && echo "torch:${R[torch]##* }")"
done

one=$(med ${R[one]})
printf "%-52s %8s img/s\n" "weft, 1 process, 2 threads, --accumulate 2" "$one"
best=0
for b in $BUCKETS; do
	ips=$(med ${R[ar$b]})
	nb=$(grep -o "[0-9]* gradient bucket" "ar$b.err" | head -1 | cut -d' ' -f1)
	printf "%-52s %8s img/s  %s of one process\n" \
		"weft, mpirun -np 2 x 1 thread, bucket_mb $b ($nb)" "$ips" \
		"$(python3 -c "print(f'{$ips / $one:.2f}x')")"
	best=$(python3 -c "print(max($best, $ips))")
done
echo "weft allreduce (best bucket) / one process: $(python3 -c "print(f'{$best / $one:.2f}')") (target >= 0.90)"
if [ "$HAVE_TORCH" = 1 ]; then
	torch=$(med ${R[torch]})
	printf "%-52s %8s img/s\n" "PyTorch DDP (gloo), 2 processes x 1 thread" "$torch"
	echo "weft allreduce (best bucket) / PyTorch DDP: $(python3 -c "print(f'{$best / $torch:.2f}')")x (target >= 1.3)"
else
	echo "PyTorch DDP: python3-torch not installed (apt-get install python3-torch): skipped"
fi
