# test_stop_while_loading.sh: SIGTERM while weft train loads its model
# (model.init_from: the check of the file in a child process, then the load)
# stops at once with exit 130 and writes no checkpoint: nothing was trained.
# Before, the load ran to its end, one step trained and a checkpoint followed.
. "$WEFT_SRC/tests/trainer/lib.sh"
make_synth train.h5 64 32 1
cat >big.json <<'JSON'
{"model": {"name": "resnet50"}, "data": {"train": "train.h5"},
 "train": {"batch_size": 2, "steps": 1}, "log": {"dir": "big-logs"},
 "checkpoint": {"dir": "big", "every_steps": 0}}
JSON
"$WEFT" train --config big.json --device cpu --no-progress-line 2>/dev/null ||
	fail "making the 94 MB model to load failed"
cat >cfg.json <<'JSON'
{"model": {"name": "resnet50", "init_from": "big/step-1/model.h5"},
 "data": {"train": "train.h5"}, "train": {"batch_size": 2, "steps": 5},
 "log": {"dir": "logs"}, "checkpoint": {"dir": "ck", "every_steps": 0}}
JSON
# a load has begun once a checking child exists (the data's or the model's;
# it may be gone again by the time we look twice: remember it). On a loaded
# machine the watcher may miss the child and see the load end: try again.
pid=""
trap 'kill -9 $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; cleanup' EXIT
for attempt in 1 2 3; do
	rm -rf ck logs
	"$WEFT" train --config cfg.json --device cpu --no-progress-line 2>train.err &
	pid=$!
	seen=""
	for _ in $(seq 1 1000); do
		[ -n "$(pgrep -P $pid)" ] && { seen=1; break; }
		grep -q "initialised from" train.err && break # the load ended unseen
		kill -0 $pid 2>/dev/null || break
		sleep 0.02
	done
	[ -n "$seen" ] && break
	echo "attempt $attempt: the load ended before the watcher saw it; again"
	kill -9 $pid 2>/dev/null || true
	wait $pid 2>/dev/null || true
done
[ -n "$seen" ] || { cat train.err; fail "no checking child seen in three starts"; }
t0=$(date +%s%N)
kill -TERM $pid
rc=0
wait $pid || rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
cat train.err
[ $rc = 130 ] || fail "weft train exited $rc after SIGTERM while loading, want 130"
[ -z "$(ls ck 2>/dev/null)" ] || fail "a checkpoint was written: $(ls ck)"
[ $ms -lt 2000 ] || fail "weft train took $ms ms to stop"
echo "stopped $ms ms after SIGTERM"
echo PASS
