#!/usr/bin/env bash
# The README's photo workflow as written, in a fresh directory: its
# `weft data images photos --out data/train.h5 ...` command is taken from the
# README verbatim and must create data/ itself (as Keras and torchvision users
# expect), and `--max-pixels` refusals name that flag. Images are PNGs made
# with Python's standard library (tests/worker/make_pngs.py).
set -euo pipefail
: "${WEFT:?set by ctest}" "${WEFT_SRC:?set by ctest}"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
fail() {
	echo "FAIL: $*" >&2
	exit 1
}
python3 "$WEFT_SRC/tests/worker/make_pngs.py" photos

# the README's command (its continuation lines joined), with our binary
cmd=$(awk '/^## Photos/ { on = 1 } on && /^weft data images photos/ { grab = 1 }
	grab { more = sub(/\\$/, ""); printf "%s ", $0; if (!more) exit }' "$WEFT_SRC/README.md")
[ -n "$cmd" ] || fail "the README has no 'weft data images photos' command"
echo "README: $cmd"
[ ! -e data ] || fail "data/ exists before the command"
rc=0
eval "\"\$WEFT\" ${cmd#weft }" >out.txt 2>err.txt || rc=$?
[ "$rc" = 0 ] || { cat err.txt; fail "the README's command exited $rc"; }
cat out.txt
grep -q "wrote data/train.h5: .* 2 classes; data/val.h5: .* samples; 0 of 25 images skipped" \
	out.txt || fail "unexpected summary: $(cat out.txt)"
[ -s data/train.h5 ] && [ -s data/val.h5 ] || fail "data/train.h5 or data/val.h5 missing"

# a nested output folder for the training file, another for the validation file
"$WEFT" data images photos --out a/b/train.h5 --val-split 0.2 --val-out c/d/val.h5 \
	--size 8 --threads 1 >/dev/null 2>err.txt || { cat err.txt; fail "nested --out/--val-out"; }
[ -s a/b/train.h5 ] && [ -s c/d/val.h5 ] || fail "nested outputs missing"

# an output folder that cannot be made is named before any image is decoded
: >blocker
rc=0
"$WEFT" data images photos --out blocker/train.h5 --size 8 --threads 1 >out.txt 2>err.txt || rc=$?
[ "$rc" -ge 1 ] && [ "$rc" -le 127 ] || fail "an impossible --out exited $rc"
grep -q "blocker" err.txt && grep -q -- "--out" err.txt || fail "error names neither --out nor the folder: $(cat err.txt)"
if grep -q "images/s\|skipped" err.txt; then fail "images were decoded before the refusal"; fi

# --max-pixels: the refusal names this command's flag, not weft-serve's
"$WEFT" data images photos --out small.h5 --size 8 --threads 1 --max-pixels 1000000 \
	>out.txt 2>err.txt || { cat err.txt; fail "--max-pixels run failed"; }
grep -q "1 of 25 images skipped" out.txt || fail "big.png not skipped: $(cat out.txt)"
grep "big.png" err.txt | grep -q -- "--max-pixels" || fail "skip message does not name --max-pixels: $(grep big.png err.txt)"
if grep -q "max_image_pixels" err.txt small.h5.skipped.txt; then
	fail "the skip message names weft-serve's --max_image_pixels"
fi
echo "ok"
