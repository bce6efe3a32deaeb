# test_ssp.sh: strategy.mode ssp:1 bounds staleness. Worker 1 is slowed
# down once (the WEFT_PS_DEBUG_STALL hook: it sleeps 2 s before pushing step
# 10); worker 0 may run one step ahead and no more: the server holds its
# push of step 11 until worker 1 pushes step 10, says so, and at the end
# reports that no answered push led the slowest worker by more than 1 step.
. "$WEFT_SRC/tests/ps/lib.sh"
make_synth train.h5 512 16 3
cat >c.json <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "train.h5"},
 "train": {"batch_size": 16, "steps": 30, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.02, "momentum": 0.9},
 "strategy": {"name": "parameter_server", "mode": "ssp:1"},
 "checkpoint": {"dir": "run/ckpt", "every_steps": 0}, "log": {"dir": "run/logs", "every_steps": 10}}
JSON
WEFT_PS_DEBUG_STALL=1:10:2 WEFT_PS_CHUNK_BYTES=65536 \
	"$WEFT" launch --ps 1 --workers 2 --config c.json >launch.log 2>&1 || fail "launch exited $?"
grep -q "\[ps:0\] .*mode ssp" launch.log || fail "the server did not run in ssp mode"
grep -qE "\[worker:1\] .*WEFT_PS_DEBUG_STALL: worker 1 sleeps" launch.log || fail "worker 1 was not slowed"
grep -qE "\[ps:0\] ps 0: ssp: worker 0 waited [0-9.]+ s at step 11 until the slowest worker reached step 10 \(staleness 1\)" \
	launch.log || fail "worker 0's step 11 was not held until worker 1 pushed step 10"
grep -qE "ssp: worker 0 waited [0-9.]+ s at step 1[2-9]" launch.log &&
	fail "worker 0 got further than one step ahead"
grep -qE "\[ps:0\] ps 0: ssp: [1-9][0-9]* pushes waited for the staleness bound 1; the largest lead of an answered push over the slowest worker was 1 step\(s\)" \
	launch.log || fail "the server's ssp summary is missing or shows a lead above 1"
grep -q "\[worker:0\] trained 30 steps" launch.log || fail "worker 0 did not finish"
grep -q "\[worker:1\] trained 30 steps" launch.log || fail "worker 1 did not finish"
grep -q "\[launch\] done: every process exited 0" launch.log || fail "not every process exited 0"
echo ok
