# test_files_robust.sh: what a full disk and corrupt checkpoints do.
# - A full checkpoint disk: exit 1..127 (never a signal) with a message naming
#   the path; the previous complete checkpoint survives and verifies.
# - A full log disk: a warning, training and checkpoints go on (exit 0).
# - --resume skips a newest checkpoint with overwritten bytes or a truncated
#   model.h5, says which and why, and resumes from the previous one.
# - The same for a damaged model.h5 that DONE does not catch (an empty DONE
#   of an older weft, a DONE recomputed over the damaged file): the file's
#   own checksum does, and --resume and weft export take the previous step.
# Needs root for a small tmpfs; skips (77) where mount is not permitted.
. "$WEFT_SRC/tests/trainer/lib.sh"
. "$WEFT_SRC/tests/trainer/damage.sh"
make_synth train.h5 256 8 1
cat >c.json <<JSON
{"model": {"name": "resnet20"},
 "data": {"train": "train.h5"},
 "train": {"batch_size": 8, "steps": 9, "seed": 5},
 "checkpoint": {"every_steps": 3, "keep": 5},
 "log": {"every_steps": 3}}
JSON
run() { "$WEFT" train --config c.json --device ref --threads 2 "$@"; }

# ---- corrupt checkpoints: --resume falls back, naming what it skipped ----
run --set checkpoint.dir=ck --set log.dir=logs 2>/dev/null || fail "reference run failed"
for s in 3 6 9; do [ -f ck/step-$s/DONE ] || fail "no checkpoint $s"; done
grep -q '"crc32c"' ck/step-9/DONE || fail "DONE lists no checksums"
# overwrite 2 bytes in the middle of the newest model.h5 (same size)
damage_model ck/step-9
# truncate the one before
truncate -s 1000 ck/step-6/model.h5
run --resume --set checkpoint.dir=ck --set log.dir=logs --set train.steps=12 2>resume.err ||
	{ cat resume.err; fail "--resume failed instead of falling back"; }
grep -q "resuming from ck/step-3 " resume.err || { cat resume.err; fail "did not resume from step 3"; }
grep -q "ck/step-9 skipped: .*checksum mismatch" resume.err || { cat resume.err; fail "step 9 skip not reported"; }
grep -q "ck/step-6 skipped: .*truncated" resume.err || { cat resume.err; fail "step 6 skip not reported"; }

# the resume above rewrote steps 6, 9 and 12
for s in 9 12; do [ -f ck/step-$s/DONE ] || fail "no checkpoint $s after the resume"; done
cp -r ck ck.good
for how in empty recomputed; do
	rm -rf ck && cp -r ck.good ck
	damage_under_done ck/step-12 $how
	rm -rf models
	"$WEFT" export --checkpoint ck --out models/m >export.out 2>export.err ||
		{ cat export.err; fail "DONE $how: export failed instead of falling back"; }
	grep -q "trained 9 steps" export.out || { cat export.out; fail "DONE $how: did not export step 9"; }
	grep -q "ck/step-12 skipped: .*checksum mismatch" export.err ||
		{ cat export.err; fail "DONE $how: export did not report the skipped step 12"; }
	run --resume --set checkpoint.dir=ck --set log.dir=logs --set train.steps=12 2>resume.err ||
		{ cat resume.err; fail "DONE $how: --resume failed instead of falling back"; }
	grep -q "resuming from ck/step-9 " resume.err || { cat resume.err; fail "DONE $how: did not resume from step 9"; }
	grep -q "ck/step-12 skipped: .*checksum mismatch" resume.err ||
		{ cat resume.err; fail "DONE $how: step 12 skip not reported"; }
done

# ---- full disks ----
mkdir mnt
if ! mount -t tmpfs -o size=4000k tmpfs mnt 2>/dev/null; then
	echo "SKIP: cannot mount a tmpfs here (not root?): full-disk cases not run"
	exit 77
fi
trap 'umount "$WORK/mnt" 2>/dev/null || true; cleanup' EXIT
# step 3 (~2.3 MB) fits, step 6 runs out of space while writing model.h5
set +e
run --set checkpoint.dir=mnt/ck --set log.dir=logs 2>full.err
rc=$?
set -e
[ $rc -ge 1 ] && [ $rc -le 127 ] || { cat full.err; fail "full checkpoint disk: exit $rc, want 1..127"; }
grep -q "mnt/ck/step-6/.*No space left on device" full.err || { cat full.err; fail "message does not name the path"; }
cp -r mnt/ck ck2
run --resume --set checkpoint.dir=ck2 --set log.dir=logs 2>r2.err || { cat r2.err; fail "resume after a full disk failed"; }
grep -q "resuming from ck2/step-3 " r2.err || { cat r2.err; fail "previous complete checkpoint lost"; }
umount mnt

# a full log disk: warned once, checkpoints still written, exit 0
mount -t tmpfs -o size=8k tmpfs mnt
run --set checkpoint.dir=ck3 --set log.dir=mnt/logs 2>log.err || { cat log.err; fail "a full log disk stopped training"; }
[ -f ck3/step-9/DONE ] || fail "a full log disk stopped checkpointing"
[ "$(grep -c 'without these logs' log.err)" = 1 ] || { cat log.err; fail "the full log disk was not reported once"; }
umount mnt
echo PASS
