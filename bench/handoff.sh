#!/usr/bin/env bash
# handoff.sh BUILD [OLD_BUILD] [ROUNDS]: what a failed-over parameter
# server costs for the rest of the job when the links are the bound.
# `weft launch --link 100mbit` (each process in its own network namespace,
# every link shaped), 2 servers with ps.replicas 2, 4 sync workers, smallcnn
# with ps.chunk_bytes 64 KiB; ps 0 is killed with SIGKILL once worker 0
# passed step KILL_AT (120 of 360); launch starts it again and it rejoins.
# Worker 0 logs every step; the script stamps the lines as they arrive and
# prints, per build and round, the median step before the kill (steps
# 40..KILL_AT) and over the last 120 steps, and their ratio: 1.0 when the
# servers share the load again after the restart, up to 2 when the
# surviving server keeps serving both groups (builds before the handoff).
# Ratios, not times: the machine may be shared. Needs root and iproute2.
set -euo pipefail
NEW=$(cd "${1:?usage: handoff.sh BUILD [OLD_BUILD] [ROUNDS]}" && pwd)
OLD=${2:+$(cd "$2" && pwd)}
ROUNDS=${3:-${ROUNDS:-3}}
KILL_AT=${KILL_AT:-120}
STEPS=${STEPS:-360}
SRC=$(cd "$(dirname "$0")/.." && pwd)
T=$(mktemp -d /tmp/weft-handoff.XXXXXX)
trap 'pkill -9 -g $$ -f "weft launch" 2>/dev/null || true; rm -rf "$T"' EXIT
cd "$T"
"$NEW/weft" data synth --out train.h5 --count 2048 --size 32 --seed 1 >/dev/null
echo "lscpu: $(lscpu | sed -n 's/^Model name: *//p'); load: $(cut -d' ' -f1-3 /proc/loadavg)"

# run BUILD NAME: prints "before_ms after_ms ratio handoffs"
run() {
	local w=$1/weft name=$2
	export WEFT_EVENTS=$T/$name.events.jsonl
	rm -rf "$name" "$WEFT_EVENTS"
	python3 - "$w" "$name" "$WEFT_EVENTS" "$KILL_AT" "$STEPS" "$SRC" <<'PY'
import json, os, re, signal, statistics, subprocess, sys, time
w, name, events, kill_at, steps, src = sys.argv[1:7]
kill_at, steps = int(kill_at), int(steps)
cmd = [w, "launch", "--ps", "2", "--workers", "4", "--threads", "1", "--device", "cpu",
       "--insecure", "--link", "100mbit", "--config", f"{src}/configs/synth-smallcnn.json",
       "--set", "data.train=train.h5", "--set", "data.eval=", "--set", f"train.steps={steps}",
       "--set", "train.eval_every_steps=0", "--set", "checkpoint.every_steps=0",
       "--set", "log.every_steps=1", "--set", "ps.replicas=2", "--set", "ps.chunk_bytes=65536",
       "--set", f"checkpoint.dir={name}/ckpt", "--set", f"log.dir={name}/logs"]
p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                     start_new_session=True)
stamp, killed, tail = {}, False, []
for line in p.stdout:
    tail = (tail + [line])[-20:]
    m = re.match(r"\[worker:0\] step +(\d+)/", line)
    if not m:
        continue
    stamp[int(m.group(1))] = time.time()
    if int(m.group(1)) >= kill_at and not killed:
        pid = [json.loads(l)["task_pid"] for l in open(events)
               if '"started"' in l and '"ps:0"' in l][-1]
        os.kill(pid, signal.SIGKILL)
        killed = True
if p.wait():
    sys.exit(f"{name}: launch failed:\n" + "".join(tail))
def median_step(lo, hi):
    d = [stamp[k + 1] - stamp[k] for k in range(lo, hi) if k in stamp and k + 1 in stamp]
    return statistics.median(d) * 1000
before, after = median_step(40, kill_at - 1), median_step(steps - 121, steps - 1)
ev = [json.loads(l) for l in open(events) if l.strip()]
back = sum(1 for e in ev if e.get("event") == "ps_primary" and "handed" in e.get("why", ""))
print(f"{before:.1f} {after:.1f} {after / before:.2f} {back}")
PY
}

for ((r = 1; r <= ROUNDS; r++)); do
	for b in new old; do
		[ $b = old ] && [ -z "$OLD" ] && continue
		dir=$NEW
		[ $b = old ] && dir=$OLD
		read -r before after ratio back < <(run "$dir" "$b$r")
		echo "round $r $b: step before the kill ${before} ms, last 120 steps ${after} ms:" \
			"${ratio}x; groups handed back: ${back}"
	done
done
