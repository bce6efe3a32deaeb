# test_log_dir.sh: a log.dir that cannot be created or written at the start
# does not stop training (as a full log disk later does not): the run warns
# once naming the folder and what to do, trains, checkpoints and exits 0; a
# resumed run the same. A checkpoint.dir that cannot be made still fails
# (exit 3, naming it): without checkpoints a run's work would be lost.
. "$WEFT_SRC/tests/trainer/lib.sh"
make_synth train.h5 128 8 1
cat >c.json <<'JSON'
{"model": {"name": "mlp"}, "data": {"train": "train.h5"},
 "train": {"batch_size": 16, "steps": 10},
 "checkpoint": {"dir": "ckpt", "every_steps": 5},
 "log": {"every_steps": 5}}
JSON
: >blocker # a file where the log folder's parent should be: mkdir fails, even as root
run() {
	"$WEFT" train --config c.json --device cpu --threads 1 --no-progress-line "$@"
}
rc=0
run --set log.dir=blocker/logs >out.txt 2>err.txt || rc=$?
[ "$rc" = 0 ] || { cat err.txt; fail "unwritable log.dir: exit $rc, want 0 (training goes on)"; }
grep -q "blocker/logs" err.txt || fail "the warning does not name the folder: $(cat err.txt)"
grep -q "log.dir" err.txt || fail "the warning does not name log.dir: $(cat err.txt)"
[ "$(grep -c "blocker/logs" err.txt)" = 1 ] || fail "warned more than once: $(cat err.txt)"
[ -f ckpt/step-10/DONE ] || fail "no final checkpoint"

# resumed (the metrics would be appended): the same
sed -i 's/"steps": 10/"steps": 15/' c.json
rc=0
run --set log.dir=blocker/logs --resume >out.txt 2>err.txt || rc=$?
[ "$rc" = 0 ] || { cat err.txt; fail "resumed with an unwritable log.dir: exit $rc"; }
[ -f ckpt/step-15/DONE ] || fail "no checkpoint after the resume"

# checkpoint.dir: still an error
rc=0
run --set log.dir=logs --set checkpoint.dir=blocker/ckpt --fresh >out.txt 2>err.txt || rc=$?
[ "$rc" = 3 ] || { cat err.txt; fail "unwritable checkpoint.dir: exit $rc, want 3"; }
grep -q "checkpoint.dir" err.txt && grep -q "blocker/ckpt" err.txt || fail "error names neither checkpoint.dir nor the folder: $(cat err.txt)"
echo ok
