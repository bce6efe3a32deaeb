#!/usr/bin/env bash
# `weft data images` on a folder of real-world photo variants made with PIL
# (tests/worker/photos.py): baseline, progressive, gray and CMYK JPEGs, EXIF
# rotation, 16-bit, palette and RGBA PNGs, a nested folder, one truncated
# file, one non-image with a .jpg name, one 20000x20000 header bomb, and junk
# (.DS_Store, Thumbs.db, notes.txt) that must be ignored. Checks the counts,
# the skip report, the pixels (read with h5py, as a user's tool would), that
# --encoded reads back the same pixels, the validation split, and that
# `weft train` pointed at the folder says what to do. PIL, numpy and h5py
# live in a cached venv; without PyPI the test skips.
set -euo pipefail
: "${WEFT:?set by ctest}" "${WEFT_IMAGES_CHECK:?set by ctest}"
HERE=$(cd "$(dirname "$0")" && pwd)
VENV="${WEFT_VENV_DIR:-$HOME/.cache/weft}/pillow"
mkdir -p "$(dirname "$VENV")"
(
	flock 9
	if ! "$VENV/bin/python" -c "import PIL, numpy, h5py" 2>/dev/null; then
		python3 -m venv "$VENV" || { echo "SKIP: python3 -m venv failed"; exit 77; }
		"$VENV/bin/pip" install -q pillow numpy h5py ||
			{ echo "SKIP: cannot install pillow numpy h5py from PyPI"; exit 77; }
	fi
) 9>"$VENV.lock"
PY="$VENV/bin/python"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$PY" "$HERE/photos.py" make "$T/photos"

"$WEFT" data images "$T/photos" --out "$T/train.h5" --size 32 --threads 2 >"$T/out" 2>"$T/err"
cat "$T/out"
grep -q "17 samples of 32x32x3, 2 classes; 3 of 20 images skipped" "$T/out"
[ "$(grep -c "skipped $T/photos/cats/" "$T/err")" = 3 ] || { cat "$T/err"; exit 1; }
if grep -E "DS_Store|Thumbs|notes|README" "$T/err" "$T/train.h5.skipped.txt"; then
	echo "FAIL: non-images must be ignored silently"; exit 1
fi
"$PY" "$HERE/photos.py" check "$T/train.h5" "$T/photos"

# --encoded: the original bytes, decoded by the reader to the same pixels
"$WEFT" data images "$T/photos" --out "$T/enc.h5" --size 32 --threads 1 --encoded >/dev/null 2>&1
"$WEFT_IMAGES_CHECK" "$T/train.h5" "$T/enc.h5" | tee "$T/chk"
grep -q "6 augmented batches identical" "$T/chk"

# a changed pixel (or label) fails the dataset's checksum
cp "$T/enc.h5" "$T/bad_enc.h5"; cp "$T/train.h5" "$T/bad_px.h5"
"$PY" -c "
import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f: f['images'][0, 5, 5, 0] ^= 1
with h5py.File(sys.argv[2], 'r+') as f: f['encoded'][200] ^= 1
" "$T/bad_px.h5" "$T/bad_enc.h5"
for f in bad_px bad_enc; do
	if "$WEFT_IMAGES_CHECK" "$T/train.h5" "$T/$f.h5" 2>"$T/err"; then
		echo "FAIL: $f.h5 was read despite a changed byte"; exit 1
	fi
	grep -q "fails its checksum" "$T/err" || { cat "$T/err"; exit 1; }
done
# streamed (not loaded into memory): each chunk group is checked on first read
WEFT_DATA_MEMORY_MB=0 "$WEFT_IMAGES_CHECK" "$T/train.h5" "$T/train.h5" >/dev/null
if WEFT_DATA_MEMORY_MB=0 "$WEFT_IMAGES_CHECK" "$T/train.h5" "$T/bad_px.h5" 2>"$T/err"; then
	echo "FAIL: a streamed bad_px.h5 was read despite a changed byte"; exit 1
fi
grep -q "samples \[0, 17) fail their checksum" "$T/err" || { cat "$T/err"; exit 1; }
# a streamed --encoded set: each sample's bytes against `sample_crc32` at every read
WEFT_DATA_MEMORY_MB=0 "$WEFT_IMAGES_CHECK" "$T/train.h5" "$T/enc.h5" >/dev/null
if WEFT_DATA_MEMORY_MB=0 "$WEFT_IMAGES_CHECK" "$T/train.h5" "$T/bad_enc.h5" 2>"$T/err"; then
	echo "FAIL: a streamed bad_enc.h5 was read despite a changed byte"; exit 1
fi
grep -q "bad_enc.h5: sample [0-9]* of dataset \`encoded\` fails its checksum" "$T/err" || { cat "$T/err"; exit 1; }

# validation split: Keras's seeded shuffle, validation last; both parts add up
"$WEFT" data images "$T/photos" --out "$T/tr.h5" --val-split 0.25 --val-out "$T/va.h5" \
	--size 16 --threads 2 >"$T/out" 2>/dev/null
grep -q "; $T/va.h5: 4 samples; 3 of 20 images skipped" "$T/out" || { cat "$T/out"; exit 1; }

# nothing usable: a failure, and no file
mkdir -p "$T/bad/a"
cp "$T/photos/cats/y_fake.jpg" "$T/bad/a/"
if "$WEFT" data images "$T/bad" --out "$T/bad.h5" 2>"$T/err"; then
	echo "FAIL: a folder without a readable image must fail"; exit 1
fi
grep -q "none of the 1 images could be read" "$T/err" && [ ! -e "$T/bad.h5" ]

# weft train pointed at the folder says how to convert it
printf '{"data": {"train": "%s"}, "train": {"steps": 1}}\n' "$T/photos" >"$T/cfg.json"
if (cd "$T" && "$WEFT" train --config "$T/cfg.json" >"$T/out" 2>&1); then
	echo "FAIL: training on a directory must fail"; exit 1
fi
grep -q "weft data images" "$T/out" || { cat "$T/out"; exit 1; }
echo "test_images: ok"
