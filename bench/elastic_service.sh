#!/usr/bin/env bash
# elastic_service.sh BUILD [STEPS] [OUTAGE_S]: what a restart of the
# membership service costs an elastic allreduce job. `weft membership` runs
# on its own with two hand-started workers (the Kubernetes form, smallcnn on
# synthetic data); at the chief's step STEPS/3 the service is killed with
# SIGKILL and started again on its port OUTAGE_S seconds later (a pod
# restart). The chief logs every step; its lines are timed as they arrive.
# Prints one JSON line: the median step before the kill, during the outage
# and after the service is back (ms), the outage's median against the
# before's, and how long after the restart each worker was connected again.
set -euo pipefail
B=$(cd "${1:?usage: elastic_service.sh BUILD [STEPS] [OUTAGE_S]}" && pwd)
STEPS=${2:-1500}
OUTAGE=${3:-3}
SRC=$(cd "$(dirname "$0")/.." && pwd)
W=$B/weft
T=$(mktemp -d /tmp/weft-elastic-svc.XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 -- -$p 2>/dev/null; done; rm -rf "$T"' EXIT
cd "$T"
export WEFT_EVENTS=$T/events.jsonl WEFT_JOB_TOKEN=elastic-service-bench OMP_NUM_THREADS=1
"$W" data synth --out train.h5 --count 960 --size 16 --seed 3 >/dev/null
read -r sp wp0 wp1 < <(python3 -c 'import socket
s = [socket.socket() for _ in range(3)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
cl="\"cluster\": {\"worker\": [\"127.0.0.1:$wp0\", \"127.0.0.1:$wp1\"]}"
cat >c.json <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "train.h5"},
 "train": {"batch_size": 16, "steps": $STEPS, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.02, "momentum": 0.9},
 "strategy": {"name": "allreduce", "min_workers": 2, "stall_timeout": 10},
 "checkpoint": {"dir": "run/ckpt", "every_steps": 0}, "log": {"dir": "run/logs", "every_steps": 1}}
JSON
stamp='import sys, time
for l in sys.stdin: sys.stdout.write("%.6f %s" % (time.time(), l))'
service() {
	TF_CONFIG="{$cl}" setsid "$W" membership --config c.json --port "$sp" --insecure \
		>>svc.log 2>&1 &
	svc=$!
	pids+=("$svc")
}
service
for i in 0 1; do
	TF_CONFIG="{$cl, \"task\": {\"type\": \"worker\", \"index\": $i}}" \
		WEFT_ELASTIC_SERVICE="127.0.0.1:$sp" setsid bash -c "'$W' train --config c.json \
		--insecure --threads 1 2>&1 | python3 -u -c '$stamp'" >"w$i.log" &
	pids+=("$!")
	wpid[$i]=$!
done
until grep -qE " step +$((STEPS / 3))/" w0.log; do sleep 0.05; done
python3 -c 'import time; print("%.6f" % time.time())' >killed_at
kill -9 "$svc"
wait "$svc" 2>/dev/null || true
sleep "$OUTAGE"
python3 -c 'import time; print("%.6f" % time.time())' >restarted_at
service
wait "${wpid[0]}" "${wpid[1]}"
python3 - w0.log "$WEFT_EVENTS" killed_at restarted_at <<'PY'
import json, re, statistics, sys
steps = []
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) step +(\d+)/", line)
    if m:
        steps.append((int(m.group(2)), float(m.group(1))))
ev = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
killed = float(open(sys.argv[3]).read())
restarted = float(open(sys.argv[4]).read())
back = {e["who"]: e["time"] for e in ev if e.get("event") == "service_back"}
assert len(back) == 2, back
back_all = max(back.values())
def med(lo, hi):
    t = [b[1] - a[1] for a, b in zip(steps, steps[1:]) if lo <= a[1] and b[1] <= hi]
    return 1e3 * statistics.median(t), len(t)
before, nb = med(0, killed)
during, nd = med(killed, back_all)
after, na = med(back_all, 1e18)
print(json.dumps({"steps": steps[-1][0], "median_step_ms_before": round(before, 2),
                  "median_step_ms_outage": round(during, 2), "outage_steps": nd,
                  "median_step_ms_after": round(after, 2),
                  "outage_vs_before": round(during / before, 3),
                  "reconnected_after_restart_ms": {w: round(1e3 * (t - restarted), 1)
                                                   for w, t in sorted(back.items())}}))
PY
