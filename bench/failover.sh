#!/usr/bin/env bash
# failover.sh BUILD [TRIALS]: what a parameter server killed mid-run costs,
# without replicas (the job rolls back to the last checkpoint) and with
# ps.replicas 2 (the backup takes over), on the same job: `weft launch`,
# 2 servers, 2 workers, sync, smallcnn on synthetic data, 600 steps with a
# checkpoint every 100; the victim (ps 0, then ps 1) is killed with SIGKILL
# once worker 1 passed step 250. For each replica count it prints the
# median time of the unkilled and of the killed runs, their ratio, the
# rollbacks, and the pause: the longest wait between two logged steps of
# worker 1 (logged every step, timed here as the lines arrive) against the
# median one. Ratios, not times: the machine may be shared.
set -euo pipefail
B=$(cd "${1:?usage: failover.sh BUILD [TRIALS]}" && pwd)
TRIALS=${2:-3}
SRC=$(cd "$(dirname "$0")/.." && pwd)
W=$B/weft
T=$(mktemp -d /tmp/weft-failover.XXXXXX)
trap 'pkill -9 -g $$ -f "weft launch" 2>/dev/null || true; rm -rf "$T"' EXIT
cd "$T"
"$W" data synth --out train.h5 --count 2000 --size 16 --seed 1 >/dev/null
"$W" data synth --out eval.h5 --count 500 --size 16 --seed 2 >/dev/null
args=(--ps 2 --workers 2 --threads 1 --device cpu --config "$SRC/configs/synth-smallcnn.json"
	--set data.train=train.h5 --set data.eval=eval.h5 --set train.steps=600
	--set train.eval_every_steps=600 --set checkpoint.every_steps=100 --set log.every_steps=1
	--set ps.chunk_bytes=65536)

# run NAME REPLICAS VICTIM(-1: none): prints "seconds rollbacks pause_ratio"
run() {
	local name=$1 r=$2 victim=$3
	export WEFT_EVENTS=$T/$name.events.jsonl
	rm -rf "$name" "$WEFT_EVENTS"
	python3 - "$W" "$name" "$r" "$victim" "$WEFT_EVENTS" "${args[@]}" <<'PY'
import json, os, re, signal, statistics, subprocess, sys, time
w, name, r, victim, events = sys.argv[1:6]
cmd = [w, "launch"] + sys.argv[6:] + ["--set", f"ps.replicas={r}",
       "--set", f"checkpoint.dir={name}/ckpt", "--set", f"log.dir={name}/logs"]
t0 = time.time()
p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                     start_new_session=True)
stamps, killed = [], False
for line in p.stdout:
    m = re.match(r"\[worker:1\] step +(\d+)/", line)
    if m:
        stamps.append(time.time())
        if int(m.group(1)) >= 250 and int(victim) >= 0 and not killed:
            for l in open(events):
                e = json.loads(l)
                if e.get("event") == "started" and e.get("task") == f"ps:{victim}":
                    pid = e["task_pid"]
            os.kill(pid, signal.SIGKILL)
            killed = True
rc = p.wait()
took = time.time() - t0
if rc:
    sys.exit(f"{name}: launch exited {rc}")
gaps = [b - a for a, b in zip(stamps, stamps[1:])]
rollbacks = sum(1 for l in open(events) if json.loads(l).get("event") == "rollback")
print(f"{took:.2f} {rollbacks} {max(gaps) / statistics.median(gaps):.1f} {max(gaps):.2f}")
PY
}

lscpu | grep -E "Model name" | sed 's/  */ /g'
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-9s %-7s %-10s %-10s %-7s %-10s %-12s\n" replicas victim unkilled_s killed_s ratio rollbacks pause
for r in 1 2; do
	for victim in 0 1; do
		for ((t = 0; t < TRIALS; t++)); do
			read -r a _ _ _ < <(run ref$r$victim$t "$r" -1)
			read -r b rb pr pg < <(run kill$r$victim$t "$r" "$victim")
			echo "$a $b $rb $pr $pg"
		done >rows.txt
		python3 - "$r" "$victim" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open("rows.txt")]
a = statistics.median(x[0] for x in rows)
b = statistics.median(x[1] for x in rows)
rb = int(max(x[2] for x in rows))
pr = statistics.median(x[3] for x in rows)
pg = statistics.median(x[4] for x in rows)
print(f"{sys.argv[1]:<9} ps {sys.argv[2]:<4} {a:<10.1f} {b:<10.1f} {b / a:<7.2f} {rb:<10} "
      f"{pg:.1f} s ({pr:.0f}x a step)")
PY
	done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
