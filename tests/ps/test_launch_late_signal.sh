# test_launch_late_signal.sh: SIGUSR1 and SIGUSR2 sent to weft launch
# --elastic at any moment, its first and last moments included, never
# change its outcome: every slot is taken (2:2), so each is refused with a
# line (or ignored before the job starts and after it ends), and the job
# exits 0. Before, a signal before launch's handlers or after its children
# had ended took the default action: exit 138 after "done: every process
# exited 0".
. "$WEFT_SRC/tests/ps/lib.sh"
make_synth train.h5 256 16 3
cat >c.json <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "train.h5"},
 "train": {"batch_size": 16, "steps": 40, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.02},
 "strategy": {"name": "parameter_server", "mode": "sync"},
 "checkpoint": {"dir": "run/ckpt", "every_steps": 0}, "log": {"dir": "run/logs", "every_steps": 10}}
JSON
for round in 1 2 3; do
	rm -rf run launch.log
	launch_bg launch.log --ps 1 --workers 2 --elastic 2:2 --threads 2 --config c.json
	# a signal every 0.2 ms from the moment launch takes them (ignored or
	# caught: /proc's SigIgn and SigCgt; before its main runs, any process
	# dies of them) until it has exited (it is our child: its pid stays ours
	# until the wait below)
	python3 - "$LAUNCH_PID" <<'PY'
import os, signal, sys, time
pid = int(sys.argv[1])
t0 = time.time()
want = (1 << (signal.SIGUSR1 - 1)) | (1 << (signal.SIGUSR2 - 1))
while time.time() - t0 < 60:
    with open("/proc/%d/status" % pid) as f:
        st = dict(l.split(":\t", 1) for l in f.read().splitlines() if ":\t" in l)
    if (int(st["SigIgn"], 16) | int(st["SigCgt"], 16)) & want == want:
        break
    time.sleep(0.0002)
while time.time() - t0 < 120:
    try:
        os.kill(pid, signal.SIGUSR1 if int(time.time() * 1e4) % 2 else signal.SIGUSR2)
        with open("/proc/%d/stat" % pid) as f:
            if f.read().split(") ")[1][0] == "Z":
                break
    except (ProcessLookupError, FileNotFoundError):
        break
    time.sleep(0.0002)
PY
	rc=0
	wait_launch 120 || rc=$?
	grep -q "done: every process exited 0" launch.log || {
		grep -v "SIGUSR[12]: " launch.log | tail -30
		fail "round $round: the job did not end well (exit $rc)"
	}
	[ $rc = 0 ] || fail "round $round: launch exited $rc after its job ended well"
	refused=$(grep -c "SIGUSR[12]: no free worker slot\|SIGUSR[12]: not stopping" launch.log || true)
	echo "round $round: exit 0, $refused signals refused"
done
echo ok
