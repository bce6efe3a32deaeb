#!/usr/bin/env bash
# Photo conversion and reader throughput.
#  1. `weft data images` vs PIL in a multiprocessing pool of the same size
#     (bench/pil_convert.py: exif_transpose, RGB, bilinear resize, h5py) on a
#     folder of generated 800x600 JPEGs; medians of REPS runs and the ratio.
#  2. The reader on the --encoded form of the same folder (decode + random
#     resized crop + flip + colour jitter on THREADS threads) vs mobilenetv2
#     training at 224x224 on the same threads (bench_zoo).
# usage: bench/bench_images.sh [BUILD_DIR] (env: N=400 THREADS=2 REPS=3)
set -euo pipefail
B=${1:-build}
N=${N:-400}
THREADS=${THREADS:-2}
REPS=${REPS:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
VENV="${WEFT_VENV_DIR:-$HOME/.cache/weft}/pillow"
if ! "$VENV/bin/python" -c "import PIL, numpy, h5py" 2>/dev/null; then
	python3 -m venv "$VENV" && "$VENV/bin/pip" install -q pillow numpy h5py
fi
PY="$VENV/bin/python"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$PY" - "$T/photos" "$N" <<'PYEOF'
import os, sys
import numpy as np
from PIL import Image
root, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
yy, xx = np.mgrid[0:600, 0:800]
for i in range(n):
    d = os.path.join(root, "class%d" % (i % 4))
    os.makedirs(d, exist_ok=True)
    base = (np.sin(xx / (20 + i % 37)) * 60 + np.cos(yy / (15 + i % 23)) * 60 + 128)
    img = np.stack([base, np.roll(base, i, 1), base[::-1]], -1) + rng.normal(0, 12, (600, 800, 3))
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(os.path.join(d, "%05d.jpg" % i), quality=90)
PYEOF
echo "photos: $N JPEGs of 800x600, $(du -sh "$T/photos" | cut -f1)"
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for r in $(seq "$REPS"); do
	s=$(date +%s.%N)
	"$B/weft" data images "$T/photos" --out "$T/w.h5" --size 224 --threads "$THREADS" >/dev/null 2>&1
	echo "$(date +%s.%N) - $s" | bc
done | median >"$T/weft_s"
for r in $(seq "$REPS"); do
	"$PY" "$HERE/pil_convert.py" "$T/photos" "$T/p.h5" --size 224 --procs "$THREADS" | cut -d' ' -f2
done | median >"$T/pil_s"
w=$(cat "$T/weft_s") p=$(cat "$T/pil_s")
awk -v n="$N" -v w="$w" -v p="$p" -v t="$THREADS" 'BEGIN {
	printf "convert %d JPEGs to 224x224, %d threads/processes: weft %.1f images/s (%.2fs), PIL pool %.1f images/s (%.2fs): weft %.2fx\n", n, t, n / w, w, n / p, p, p / w }'

"$B/weft" data images "$T/photos" --out "$T/enc.h5" --size 224 --threads "$THREADS" --encoded >/dev/null 2>&1
echo "encoded dataset: $(du -h "$T/enc.h5" | cut -f1) vs decoded $(du -h "$T/w.h5" | cut -f1)"
"$B/bench/bench_reader" "$T/enc.h5" --threads "$THREADS" --batch 32 --steps 10 --reps "$REPS" | tee "$T/reader"
"$B/bench/bench_zoo" --models mobilenetv2 --threads "$THREADS" --reps "$REPS" --no-peer \
	--infer-batch 1 --train-batch 16 2>/dev/null | tee "$T/zoo"
