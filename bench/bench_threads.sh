#!/usr/bin/env bash
# bench_threads.sh: training speed of weft's default thread setting against
# --threads 1 and --threads 2, on a quiet machine and with one busy process
# pinned to the last CPU (as on a shared Kubernetes node). Each setting
# trains smallcnn on 32x32 synthetic data; the figure is the median of the
# logged images/s windows (first window dropped). "old" is the OpenMP
# behaviour before this change (libgomp's default: spin 300000 rounds before
# sleeping, GOMP_SPINCOUNT=300000); "new" is what weft does by default now
# (threads from affinity, cgroup quota and the CPUs found busy at start;
# waiting threads spin briefly, GOMP_SPINCOUNT=20000, when no CPU was busy at
# start, else sleep at once, OMP_WAIT_POLICY=passive).
#   bench/bench_threads.sh [WEFT_BINARY] [STEPS]
set -euo pipefail
WEFT=${1:-build/weft}
STEPS=${2:-60}
WEFT=$(cd "$(dirname "$WEFT")" && pwd)/$(basename "$WEFT")
WORK=$(mktemp -d /tmp/weft-bench-threads.XXXXXX)
BUSY=
cleanup() {
	[ -n "$BUSY" ] && kill "$BUSY" 2>/dev/null
	rm -rf "$WORK"
}
trap cleanup EXIT
cd "$WORK"
"$WEFT" data synth --out s.h5 --count 2000 --size 32 --seed 1 >/dev/null
last=$(($(nproc) - 1))

# run NAME ENV... -- ARGS...: prints the median images/s
run() {
	local envs=() args=()
	while [ "$1" != "--" ]; do envs+=("$1"); shift; done
	shift
	rm -rf lg ck
	env "${envs[@]}" "$WEFT" train --set data.train=s.h5 --set model.name=smallcnn \
		--set train.batch_size=64 --set train.steps="$STEPS" --set log.every_steps=5 \
		--set log.dir=lg --set checkpoint.dir=ck --device cpu --no-progress-line \
		--config /dev/stdin "${args[@]}" "$@" >/dev/null 2>err.txt <<<'{}' ||
		{ echo "run failed: ${envs[*]} $*: $(tail -1 err.txt)" >&2; echo 0; return; }
	python3 - <<'PY'
import json, statistics
v = [json.loads(l)["images_per_sec"] for l in open("lg/metrics.jsonl")][1:]
print("%.0f" % statistics.median(v))
PY
}

ROUNDS=${ROUNDS:-3}
settings="old1 old2 olddef new1 new2 newdef"
setting() { # NAME: env and flags of a setting
	case $1 in
	old1) echo "GOMP_SPINCOUNT=300000 -- --threads 1" ;;
	old2) echo "GOMP_SPINCOUNT=300000 -- --threads 2" ;;
	olddef) echo "GOMP_SPINCOUNT=300000 -- --set train.threads=0" ;;
	new1) echo "X=1 -- --threads 1" ;;
	new2) echo "X=1 -- --threads 2" ;;
	newdef) echo "X=1 -- --set train.threads=0" ;;
	esac
}
med() { python3 -c 'import statistics,sys; print("%.0f" % statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
for load in idle busy; do
	if [ "$load" = busy ]; then
		taskset -c "$last" sh -c 'while :; do :; done' &
		BUSY=$!
	fi
	declare -A all=() r=()
	for round in $(seq "$ROUNDS"); do # interleaved, so drifting load hits every setting
		for s in $settings; do
			# shellcheck disable=SC2046
			all[$s]="${all[$s]:-} $(run $(setting "$s"))"
		done
	done
	for s in $settings; do
		# shellcheck disable=SC2086
		r[$s]=$(med ${all[$s]})
	done
	best_new=$((r[new1] > r[new2] ? r[new1] : r[new2]))
	best_old=$((r[old1] > r[old2] ? r[old1] : r[old2]))
	echo "$load ($ROUNDS rounds, load average $(cut -d' ' -f1 /proc/loadavg)): median images/s" \
		" old: t1 ${r[old1]} t2 ${r[old2]} default ${r[olddef]}" \
		" |  new: t1 ${r[new1]} t2 ${r[new2]} default ${r[newdef]}"
	python3 -c "import sys; a=[float(x) for x in sys.argv[1:]]; print('%s: new default / best(new t1, new t2) = %.2f; new default / best(old t1, old t2) = %.2f; old t2 / old t1 = %.2f' % ('$load', a[0]/a[1], a[0]/a[2], a[3]/a[4]))" \
		"${r[newdef]}" "$best_new" "$best_old" "${r[old2]}" "${r[old1]}"
	if [ -n "$BUSY" ]; then
		kill "$BUSY"
		wait "$BUSY" 2>/dev/null || true
		BUSY=
	fi
done
