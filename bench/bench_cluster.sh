#!/usr/bin/env bash
# bench_cluster.sh: weft's exchanges on an emulated cluster (`weft bench
# cluster`), a scaling curve per mode: 1..32 workers (parameter servers: one
# per four workers), ResNet50's layer sizes scaled to the link, modelled
# compute; PyTorch DDP (gloo) in the same emulation as the peer. Writes
# OUT.jsonl (one line per configuration), prints a table (step time,
# images/s, efficiency against the bandwidth bound, weft / DDP) and, where
# matplotlib is at hand, plots OUT.png. Needs root, iproute2 and mpirun.
#
#   bench/bench_cluster.sh [BUILD_DIR]
#   env: MODEL SCALE LINK COMPUTE STEPS WORKERS MODES OUT
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
echo "== $MODEL x $SCALE, links $LINK, compute $COMPUTE ms, $STEPS steps, modes: $MODES"
: >"$OUT.jsonl"
for w in $WORKERS; do
	s=$(((w + 3) / 4))
	"$WEFT" bench cluster --model "$MODEL" --scale "$SCALE" --link "$LINK" \
		--compute-ms "$COMPUTE" --steps "$STEPS" --workers "$w" --servers "$s" \
		--mode "$(echo $MODES | tr ' ' ,)" ${PY:+--python "$PY"} 2>>"$OUT.log" | tee -a "$OUT.jsonl" ||
		echo "$w workers: a configuration failed (see $OUT.log); going on" >&2
done
PLOT=python3
[ -n "$PY" ] && "$PY" -c 'import matplotlib' 2>/dev/null && PLOT=$PY
"$PLOT" - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
rows = [json.loads(l) for l in open(out + ".jsonl") if l.strip()]
ddp = {r["workers"]: r for r in rows if r["mode"] == "ddp"}
print("| mode | workers | servers | step ms (p90) | images/s | bound ms | efficiency | vs DDP |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    peer = ddp.get(r["workers"])
    vs = f'{peer["step_ms"] / r["step_ms"]:.2f}x' if peer and r["mode"] != "ddp" else ""
    print(f'| {r["mode"]} | {r["workers"]} | {r["servers"] or ""} | {r["step_ms"]:.0f} '
          f'({r["step_ms_p90"]:.0f}) | {r["images_per_sec"]:.0f} | {r["bound_ms"]:.0f} | '
          f'{r["efficiency"]:.2f} | {vs} |')
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("(matplotlib not installed: no plot)")
    sys.exit(0)
fig, ax = plt.subplots(1, 2, figsize=(10, 4))
for mode in dict.fromkeys(r["mode"] for r in rows):
    rs = [r for r in rows if r["mode"] == mode]
    ax[0].plot([r["workers"] for r in rs], [r["images_per_sec"] for r in rs], "o-", label=mode)
    ax[1].plot([r["workers"] for r in rs], [r["efficiency"] for r in rs], "o-", label=mode)
for a, t in zip(ax, ("images/s", "efficiency (bound / measured)")):
    a.set_xscale("log", base=2)
    a.set_xlabel("workers")
    a.set_title(t)
    a.grid(True, alpha=0.3)
    a.legend()
r0 = rows[0]
fig.suptitle(f'{r0["model"]} x {r0["scale"]}, {r0["link_bps"] / 1e6:.0f} Mbit/s links, '
             f'compute {r0["compute_ms"][0]:g}/{r0["compute_ms"][1]:g} ms')
fig.tight_layout()
fig.savefig(out + ".png", dpi=90)
print("plot:", out + ".png")
PY
