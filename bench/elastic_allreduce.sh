#!/usr/bin/env bash
# elastic_allreduce.sh BUILD [STEPS]: what membership changes cost an elastic
# allreduce job (weft launch --workers 3 --elastic 2:3, strategy allreduce
# over the TCP ring, smallcnn on synthetic data). At the chief's step
# STEPS/4 the last worker leaves (SIGUSR2), at STEPS/2 it joins again
# (SIGUSR1), at 3 STEPS/4 it is killed -9 (the others restore their
# committed step and re-form; launch restarts it and it joins again). The
# chief logs every step; its lines are timed as they arrive. Prints one JSON
# line: the median step, and for each change the gap between the two step
# lines around it, in ms and in median steps (what the change cost beyond
# its own step: the gap around the change's ring_reformed event),
# plus the steps the failure made the chief redo.
set -euo pipefail
B=$(cd "${1:?usage: elastic_allreduce.sh BUILD [STEPS]}" && pwd)
STEPS=${2:-800}
SRC=$(cd "$(dirname "$0")/.." && pwd)
W=$B/weft
T=$(mktemp -d /tmp/weft-elastic-ar.XXXXXX)
pid=
trap '[ -n "$pid" ] && kill -9 -- -$pid 2>/dev/null; rm -rf "$T"' EXIT
cd "$T"
export WEFT_EVENTS=$T/events.jsonl
"$W" data synth --out train.h5 --count 960 --size 16 --seed 3 >/dev/null
cat >c.json <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "train.h5"},
 "train": {"batch_size": 16, "steps": $STEPS, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.02, "momentum": 0.9},
 "strategy": {"name": "allreduce", "stall_timeout": 10},
 "checkpoint": {"dir": "run/ckpt", "every_steps": 0}, "log": {"dir": "run/logs", "every_steps": 1}}
JSON
setsid bash -c "'$W' launch --workers 3 --elastic 2:3 --threads 3 --config c.json 2>&1 |
	python3 -u -c 'import sys, time
for l in sys.stdin: sys.stdout.write(\"%.6f %s\" % (time.time(), l))'" >launch.log &
pid=$!
at() { # at STEP: until the chief logged it
	until grep -qE "\[worker:0\] step +$1/" launch.log; do sleep 0.05; done
}
EV="python3 $SRC/tests/events.py $WEFT_EVENTS"
at $((STEPS / 4))
launch=$($EV get started pid task=worker:0) # launch's own pid
kill -USR2 "$launch"
at $((STEPS / 2))
kill -USR1 "$launch"
at $((3 * STEPS / 4))
victim=$($EV get started task_pid task=worker:2)
python3 -c 'import time; print("%.6f" % time.time())' >killed_at
kill -9 "$victim"
wait "$pid" || true
pid=
python3 - launch.log "$WEFT_EVENTS" killed_at <<'PY'
import json, re, statistics, sys
steps = []
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) \[worker:0\] step +(\d+)/", line)
    if m:
        steps.append((int(m.group(2)), float(m.group(1))))
ev = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
t = [x[1] for x in steps]
dt = [b - a for a, b in zip(t, t[1:])]
med = statistics.median(dt)
def gap_around(t0):
    """the gap between the two step lines around time t0 (the change's stall)"""
    return next((b - a for a, b in zip(t, t[1:]) if a <= t0 < b), 0)
r0 = [e for e in ev if e.get("event") == "ring_reformed" and e["who"] == "worker:0"]
out = {"median_step_ms": round(med * 1000, 2)}
for why in ("leave", "join", "failure"):
    for k, e in enumerate(x for x in r0 if x["reason"] == why):
        name = why if k == 0 else "%s%d" % (why, k + 1)
        g = gap_around(e["time"])
        out[name + "_gap_ms"] = round(g * 1000, 1)
        out[name + "_cost_steps"] = round(g / med - 1, 1)
killed = [float(open(sys.argv[3]).read())]
fail = [e for e in r0 if e["reason"] == "failure"]
if killed and fail:
    out["kill_to_reformed_ms"] = round((fail[0]["time"] - killed[0]) * 1000, 1)
# the step in flight, redone from the committed one (none: the chief's state
# was the newest, rank 0 finished the step before the others noticed)
rb = [e for e in ev if e.get("event") == "rollback" and e["who"] == "worker:0"]
out["failure_redone_steps"] = rb[0]["from"] - rb[0]["to"] + 1 if rb else 0
out["final_step"] = steps[-1][0]
print(json.dumps(out))
PY
