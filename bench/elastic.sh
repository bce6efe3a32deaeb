#!/usr/bin/env bash
# elastic.sh BUILD: what membership changes cost an elastic sync job
# (weft launch --ps 1 --workers 3 --elastic 2:3, smallcnn on synthetic data,
# 800 steps). At the chief's step 100 the last worker leaves (SIGUSR2: op
# leave), at step 250 it joins again (SIGUSR1), at step 400 it is killed -9
# (the servers notice it by ps.heartbeat_timeout, 5 s; launch restarts it
# and it joins again). Prints, from the chief's per-step events: the median
# step time, the longest step after each change (the stall it caused), the
# time from SIGUSR1 to the joiner's first applied batch, and the per-epoch
# sample counts (every complete epoch must apply each sample once).
set -euo pipefail
B=$(cd "${1:?usage: elastic.sh BUILD}" && pwd)
SRC=$(cd "$(dirname "$0")/.." && pwd)
W=$B/weft
T=$(mktemp -d /tmp/weft-elastic.XXXXXX)
trap 'kill -9 -- -$pid 2>/dev/null || true; rm -rf "$T"' EXIT
cd "$T"
export WEFT_EVENTS=$T/events.jsonl
"$W" data synth --out train.h5 --count 960 --size 16 --seed 3 >/dev/null
cat >c.json <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "train.h5"},
 "train": {"batch_size": 16, "steps": 800, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.02, "momentum": 0.9},
 "strategy": {"name": "parameter_server", "mode": "sync"},
 "checkpoint": {"dir": "run/ckpt", "every_steps": 0}, "log": {"dir": "run/logs", "every_steps": 50}}
JSON
setsid "$W" launch --ps 1 --workers 3 --elastic 2:3 --threads 3 --config c.json >launch.log 2>&1 &
pid=$!
EV="python3 $SRC/tests/events.py $WEFT_EVENTS"
$EV wait unit 120 who=worker:0 step=100 >/dev/null
kill -USR2 $pid
$EV wait unit 120 who=worker:0 step=250 >/dev/null
kill -USR1 $pid
$EV wait unit 120 who=worker:0 step=400 >/dev/null
kill -9 "$($EV get started task_pid task=worker:2)"
wait $pid
cp launch.log "${TMPDIR:-/tmp}/weft-elastic-launch.log"; cp events.jsonl "${TMPDIR:-/tmp}/weft-elastic-events.jsonl"
python3 - "$WEFT_EVENTS" run/logs/metrics.jsonl <<'PY'
import json, statistics, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
chief = sorted((e["step"], e["time"]) for e in ev if e.get("event") == "unit" and e["who"] == "worker:0")
t = [x[1] for x in chief]
dt = [b - a for a, b in zip(t, t[1:])]
med = statistics.median(dt)
def longest(a0, a1):
    return max((b - a for a, b in zip(t, t[1:]) if a0 < b <= a1), default=0)
left = [e["time"] for e in ev if e.get("event") == "worker_left" and e["worker"] == 2]
started = [e["time"] for e in ev if e.get("event") == "started" and e.get("task") == "worker:2"]
killed = [e["time"] for e in ev if e.get("event") == "exited" and e.get("task") == "worker:2" and e.get("signal") == 9]
first2 = [e["time"] for e in ev if e.get("event") == "unit" and e["who"] == "worker:2" and e["applied"]]
# the longest step that ended after each change and before the next (or 10 s)
join = started[1]
out = {"median_step_ms": round(med * 1000, 1),
       "leave_longest_step_ms": round(longest(left[0], min(join, left[0] + 10)) * 1000, 1),
       "join_longest_step_ms": round(longest(join, min(killed[0], join + 10)) * 1000, 1),
       "join_to_first_batch_s": round(min(x for x in first2 if x > join) - join, 2),
       "kill_longest_step_ms": round(longest(killed[0], killed[0] + 10) * 1000, 1)}
epochs = [json.loads(l) for l in open(sys.argv[2]) if '"epoch_end"' in l]
done = [e for e in epochs if e["complete"]]
out["complete_epochs"] = len(done)
out["every_sample_once"] = all(e["samples_applied"] == e["samples_per_epoch"] for e in done)
print(json.dumps(out))
PY
