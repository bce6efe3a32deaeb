# test_elastic.sh: elastic membership (weft launch --elastic 2:3, sync).
# Two of three worker slots start; SIGUSR1 to launch starts worker 2, which
# joins at the servers' step; SIGUSR2 makes it leave (op leave: the steps
# go on at once, not after ps.heartbeat_timeout, set to 30 s here). Checks:
# the job exits 0; the joiner started at the step the server said and
# trained units that were applied; every complete epoch applied each of its
# samples exactly once (the data go out in units, whoever is there); the
# leaver exited 0 and its slot is free; nothing was declared dead or stalled.
. "$WEFT_SRC/tests/ps/lib.sh"
make_synth train.h5 480 16 3
# The join and the leave must come mid-run: on a loaded machine the watcher
# may wake only after a short job ended, so such a run is tried again,
# twice as long.
steps=400
for attempt in 1 2 3; do
	rm -rf run "$WEFT_EVENTS"
	cat >c.json <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "train.h5"},
 "train": {"batch_size": 16, "steps": $steps, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.02, "momentum": 0.9},
 "strategy": {"name": "parameter_server", "mode": "sync"},
 "ps": {"heartbeat_timeout": 30, "stall_timeout": 5},
 "checkpoint": {"dir": "run/ckpt", "every_steps": 0}, "log": {"dir": "run/logs", "every_steps": 10}}
JSON
	launch_bg launch.log --ps 1 --workers 2 --elastic 2:3 --threads 2 --config c.json
	wait_for launch.log "elastic: 2 to 3 workers \(2 started\)" 30
	events wait unit 60 who=worker:0 step=20 >/dev/null || fail "worker 0 did not reach step 20"
	kill -USR1 "$LAUNCH_PID"
	events wait worker_joined 60 worker=2 >/dev/null || fail "worker 2 did not join"
	events wait unit 60 who=worker:2 applied=true >/dev/null || fail "worker 2 applied nothing"
	if [ "$(events count servers_shut_down)" = 0 ]; then
		kill -USR2 "$LAUNCH_PID"
		events wait worker_left 60 worker=2 >/dev/null && break
		# the job may have ended between the look and the signal
		[ "$(events count servers_shut_down)" = 0 ] && fail "worker 2 did not leave"
	fi
	[ $attempt = 3 ] && fail "the job ended before worker 2 could leave, three times"
	echo "attempt $attempt: the job ($steps steps) ended before worker 2 could leave; again, longer"
	wait_launch 180 || true
	steps=$((steps * 2))
done
rc=0
wait_launch 180 || rc=$?
[ "$rc" = 0 ] || fail "launch exited $rc"
grep -q "\[launch\] SIGUSR1: starting worker:2" launch.log || fail "launch did not start worker 2"
grep -q "\[launch\] worker:2 exited with status 0 (it left; its slot is free)" launch.log ||
	fail "worker 2 did not exit 0 after leaving"
grep -qE "\[worker:2\] .*left the job after step [0-9]+ \(elastic" launch.log || fail "worker 2 did not say it left"
! grep -qE "declared dead|stall: worker" launch.log || fail "a worker was declared dead or stalled"
python3 - run/logs/metrics.jsonl "$WEFT_EVENTS" <<'PY' || fail "membership or per-epoch samples wrong"
import collections, json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
done = [l for l in lines if l.get("complete")]
assert len(done) >= 3, lines[-3:]
for l in done:
    assert l["samples_applied"] == l["samples_per_epoch"] == 480, l
ev = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
joined = [e for e in ev if e.get("event") == "worker_joined" and e["worker"] == 2]
left = [e for e in ev if e.get("event") == "worker_left" and e["worker"] == 2]
assert len(joined) == 1 and joined[0]["live"] == 3 and joined[0]["step"] >= 20, joined
assert len(left) == 1 and left[0]["live"] == 2 and left[0]["step"] > joined[0]["step"], left
# the joiner starts at the servers' step, not at 0
join = [e for e in ev if e.get("event") == "join" and e.get("who") == "worker:2"]
assert join and join[0]["step"] >= joined[0]["step"], join
units = [e for e in ev if e.get("event") == "unit"]
applied = collections.Counter(e["unit"] for e in units if e["applied"])
per_epoch = 30  # 480 samples / 16 per unit, a multiple of the 3 slots
for u in range(len(done) * per_epoch):
    assert applied[u] == 1, (u, applied[u])
assert sum(e["applied"] for e in units if e["who"] == "worker:2") >= 1
PY
echo ok
