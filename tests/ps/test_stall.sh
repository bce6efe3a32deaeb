# test_stall.sh: a worker that is alive (heartbeats go on) but does not push
# is named by the server after the stall timeout, with the chunks it owes;
# once it pushes, the job finishes normally.
. "$WEFT_SRC/tests/ps/lib.sh"
make_synth train.h5 512 16 3
cat >c.json <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "train.h5"},
 "train": {"batch_size": 16, "steps": 30, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
 "checkpoint": {"dir": "run/ckpt", "every_steps": 0}, "log": {"dir": "run/logs", "every_steps": 10}}
JSON
WEFT_PS_DEBUG_STALL=1:20:3 WEFT_PS_STALL_TIMEOUT=1 WEFT_PS_CHUNK_BYTES=65536 \
	"$WEFT" launch --ps 1 --workers 2 --config c.json >launch.log 2>&1 || fail "launch exited $?"
grep -qE "\[ps:0\] .*stall: worker 1 is alive .* has not pushed step 20 .*chunks owed \([1-9][0-9]*\): 0" \
	launch.log || fail "the stalled worker was not named with its chunks"
grep -q "stall: worker 0" launch.log && fail "worker 0 was named though it pushed"
grep -q "\[launch\] done: every process exited 0" launch.log || fail "the job did not finish"
echo ok
