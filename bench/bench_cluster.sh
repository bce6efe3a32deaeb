#!/usr/bin/env bash
# bench_cluster.sh: weft's exchanges on an emulated cluster (`weft bench
# cluster`), a scaling curve per mode: 1..32 workers (parameter servers: one
# per four workers), ResNet50's layer sizes scaled to the link, modelled
# compute; PyTorch DDP (gloo) in the same emulation as the peer. Writes
# OUT.jsonl (one line per configuration and round), prints a table (step
# time, images/s, efficiency against the bandwidth bound, the workers' CPU
# ms per step, weft / DDP) and, where matplotlib is at hand, plots OUT.png.
# ROUNDS > 1 runs every worker count that many times, the modes interleaved
# in each round; the table then gives medians over the rounds and, for
# weft / DDP, the median of each round's ratio. Needs root, iproute2 and
# mpirun.
#
#   bench/bench_cluster.sh [BUILD_DIR]
#   env: MODEL SCALE LINK COMPUTE STEPS WORKERS MODES ROUNDS OUT, and ARGS:
#   more options for every run (ARGS="--mtu 9000 --queue-kb 32768": a
#   lossless fabric with jumbo frames)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
WEFT=$BUILD/weft
MODEL=${MODEL:-resnet50}
SCALE=${SCALE:-0.05}      # 1.28M floats: 5.1 MB per gradient
LINK=${LINK:-100mbit}     # allreduce of 5.1 MB at 8 workers: 0.72 s
COMPUTE=${COMPUTE:-300/600} # ms forward/backward: comm and compute of one order
STEPS=${STEPS:-10}
WORKERS=${WORKERS:-"1 2 4 8 16 32"}
MODES=${MODES:-"sync allreduce ddp"}
ROUNDS=${ROUNDS:-1}
ARGS=${ARGS:-}
OUT=${OUT:-$SRC/bench/cluster}
[ -x "$WEFT" ] || { echo "no weft binary at $WEFT (build first, or pass the build dir)"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
PY=""
if [[ " $MODES " == *" ddp "* ]]; then
	PY=$(sh "$SRC/bench/peers_venv.sh") || {
		echo "no PyTorch (PyPI unreachable): the ddp peer is left out" >&2
		MODES=${MODES//ddp/}
	}
fi
echo "== $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== $MODEL x $SCALE, links $LINK $ARGS, compute $COMPUTE ms, $STEPS steps, modes: $MODES"
: >"$OUT.jsonl"
for w in $WORKERS; do
	s=$(((w + 3) / 4))
	for round in $(seq "$ROUNDS"); do
		"$WEFT" bench cluster --model "$MODEL" --scale "$SCALE" --link "$LINK" \
			--compute-ms "$COMPUTE" --steps "$STEPS" --workers "$w" --servers "$s" $ARGS \
			--mode "$(echo $MODES | tr ' ' ,)" ${PY:+--python "$PY"} 2>>"$OUT.log" |
			sed "s/}\$/, \"round\": $round}/" | tee -a "$OUT.jsonl" ||
			echo "$w workers, round $round: a configuration failed (see $OUT.log); going on" >&2
	done
done
PLOT=python3
[ -n "$PY" ] && "$PY" -c 'import matplotlib' 2>/dev/null && PLOT=$PY
"$PLOT" - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
rows = [json.loads(l) for l in open(out + ".jsonl") if l.strip()]
med = lambda v: statistics.median(v) if v else float("nan")
groups = {}
for r in rows:
    groups.setdefault((r["mode"], r["workers"]), []).append(r)
ddp = {(r["workers"], r.get("round", 1)): r for r in rows if r["mode"] == "ddp"}
print("| mode | workers | servers | step ms (p90) | images/s | bound ms | efficiency | "
      "CPU ms/step | load | vs DDP |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (mode, w), rs in groups.items():
    step = med([r["step_ms"] for r in rs])
    ratios = [ddp[(w, r.get("round", 1))]["step_ms"] / r["step_ms"] for r in rs
              if (w, r.get("round", 1)) in ddp]
    vs = f"{med(ratios):.2f}x" if ratios and mode != "ddp" else ""
    if len(ratios) > 1 and mode != "ddp":
        vs += f' ({", ".join(f"{x:.2f}" for x in ratios)})'
    loads = [r["load_avg"] for r in rs if "load_avg" in r]
    load = f"{min(loads):.1f}-{max(loads):.1f}" if loads else ""
    r0 = rs[0]
    print(f'| {mode} | {w} | {r0["servers"] or ""} | {step:.0f} '
          f'({med([r["step_ms_p90"] for r in rs]):.0f}) | '
          f'{r0["images_per_sec"] * r0["step_ms"] / step:.0f} | {r0["bound_ms"]:.0f} | '
          f'{r0["bound_ms"] / step:.2f} | {med([r.get("cpu_ms_per_step", 0) for r in rs]):.0f} | '
          f'{load} | {vs} |')
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("(matplotlib not installed: no plot)")
    sys.exit(0)
fig, ax = plt.subplots(1, 2, figsize=(10, 4))
for mode in dict.fromkeys(r["mode"] for r in rows):
    rs = [r for r in rows if r["mode"] == mode and r.get("round", 1) == 1]
    ax[0].plot([r["workers"] for r in rs], [r["images_per_sec"] for r in rs], "o-", label=mode)
    ax[1].plot([r["workers"] for r in rs], [r["efficiency"] for r in rs], "o-", label=mode)
for a, t in zip(ax, ("images/s", "efficiency (bound / measured)")):
    a.set_xscale("log", base=2)
    a.set_xlabel("workers")
    a.set_title(t)
    a.grid(True, alpha=0.3)
    a.legend()
r0 = rows[0]
fabric = ""
if r0.get("mtu", 1500) != 1500 or r0.get("queue_kb"):
    fabric = f', MTU {r0.get("mtu", 1500)}, queues {r0.get("queue_kb") or "default"} KiB'
fig.suptitle(f'{r0["model"]} x {r0["scale"]}, {r0["link_bps"] / 1e6:.0f} Mbit/s links{fabric}, '
             f'compute {r0["compute_ms"][0]:g}/{r0["compute_ms"][1]:g} ms')
fig.tight_layout()
fig.savefig(out + ".png", dpi=90)
print("plot:", out + ".png")
PY
