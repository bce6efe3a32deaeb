# test_backup_workers_config.sh: a bad strategy.backup_workers is a config
# error (exit 1..127) that names the key and the value: not less than the
# workers, negative, without sync mode, without the parameter-server strategy.
. "$WEFT_SRC/tests/ps/lib.sh"
make_synth train.h5 64 8 3
cat >c.json <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "train.h5"},
 "train": {"batch_size": 8, "steps": 2, "seed": 2},
 "strategy": {"name": "parameter_server", "mode": "sync"},
 "checkpoint": {"dir": "run/ckpt"}, "log": {"dir": "run/logs"}}
JSON
# expect_error WHAT REGEX CMD...: CMD exits 1..127 and says REGEX
expect_error() {
	local what=$1 re=$2 rc=0
	shift 2
	"$@" >out.log 2>&1 || rc=$?
	[ "$rc" -ge 1 ] && [ "$rc" -le 127 ] || fail "$what: exit $rc, want 1..127: $(cat out.log)"
	grep -qE "$re" out.log || fail "$what: no '$re' in: $(cat out.log)"
}
expect_error "B = workers" "strategy.backup_workers: 3 must be less than the job's 3 training workers" \
	"$WEFT" launch --ps 1 --workers 3 --config c.json --set strategy.backup_workers=3
expect_error "B < 0" "strategy.backup_workers: must be >= 0.*got -1" \
	"$WEFT" launch --ps 1 --workers 3 --config c.json --set strategy.backup_workers=-1
expect_error "async" "strategy.backup_workers: 1 needs strategy.name parameter_server with strategy.mode sync \(got parameter_server, async\)" \
	"$WEFT" launch --ps 1 --workers 3 --config c.json --set strategy.backup_workers=1 \
	--set strategy.mode=async
expect_error "local" "strategy.backup_workers: 1 needs strategy.name parameter_server.*got local" \
	"$WEFT" train --config c.json --set strategy.name=local --set strategy.backup_workers=1
expect_error "slow" "ps.debug_slow \(WEFT_PS_DEBUG_SLOW\): expected rank:factor" \
	"$WEFT" launch --ps 1 --workers 3 --config c.json --set ps.debug_slow=2
echo ok
