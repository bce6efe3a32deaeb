#!/usr/bin/env bash
# shared_node.sh: weft on a node it shares (a Kubernetes pod beside others).
# weft and weft-serve choose OpenMP's wait once, at start (common/cpus.h: a
# short spin when no CPU was busy, passive waits when one was); this measures
# what that choice costs when the load changes after it, against the same
# programs with OMP_WAIT_POLICY=passive, in interleaved rounds:
#   serve  weft-serve (resnet20, threads from the cores) started on the quiet
#          machine, then two busy processes started beside it: requests/s
#          of weft-bench at concurrency 8;
#   train2 two `weft train` (smallcnn) started together: the pair's wall time;
#   zoo2   two bench_zoo (mobilenetv2 inference, batch 1 and 32) started
#          together: the images/s of both summed;
#   train  `weft train` started on the quiet machine, then two busy
#          processes: its median images/s;
#   idle   `weft train` alone on the quiet machine: its median images/s
#          (what the spin buys when nobody shares).
# Target for each: the product's default >= 0.9x passive, as the median over
# rounds of each round's ratio (the two runs of a round are adjacent in
# time). A round counts only when the machine was quiet at its start (no CPU
# over 60% busy in /proc/stat over 0.5 s); the choice each program made is
# printed.
#   bench/shared_node.sh [BUILD_DIR]
#   env: ROUNDS (3), SECS (8: seconds of load per serve round), STEPS (300),
#   SCENARIOS ("serve train2 zoo2 train idle"), DEFAULT_ENV (NAME=VALUE the
#   "default" runs get instead of the product's choice, e.g.
#   GOMP_SPINCOUNT=1000 to try another spin), REQUIRE_QUIET (1; 0 runs every
#   round, for trying the script out)
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-8}
STEPS=${STEPS:-300}
for b in weft weft-serve bench/weft-bench bench/weft-bench-infer bench/bench_zoo; do
	[ -x "$BUILD/$b" ] || { echo "shared_node: $BUILD/$b not built" >&2; exit 1; }
done
unset OMP_WAIT_POLICY GOMP_SPINCOUNT
TMP=$(mktemp -d /tmp/weft-shared-node.XXXXXX)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT
cd "$TMP"
echo "shared_node: $(date -u +%Y-%m-%dT%H:%MZ), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"

busy_cpus() { # CPUs over 60% busy during 0.5 s
	python3 - <<'PY'
import time
def t():
    r = {}
    for l in open("/proc/stat"):
        f = l.split()
        if f[0].startswith("cpu") and f[0] != "cpu":
            v = list(map(int, f[1:9])); r[f[0]] = (sum(v) - v[3] - v[4], sum(v))
    return r
a = t(); time.sleep(0.5); b = t()
print(sum(1 for c in a if (b[c][0] - a[c][0]) > 0.6 * max(1, b[c][1] - a[c][1])))
PY
}
quiet() { # wait up to 60 s for a quiet machine; 1 when it never came
	[ "${REQUIRE_QUIET:-1}" = 1 ] || return 0
	for _ in $(seq 60); do
		[ "$(busy_cpus)" = 0 ] && return 0
		sleep 0.5
	done
	return 1
}
busy_start() { # two CPU-bound processes, as neighbours
	for _ in 1 2; do
		sh -c 'while :; do :; done' &
		BUSY+=($!)
		PIDS+=($!)
	done
}
busy_stop() {
	kill "${BUSY[@]}" 2>/dev/null || true
	wait "${BUSY[@]}" 2>/dev/null || true
	BUSY=()
}
choice() { # PID: the wait the program runs with (after its re-execution)
	for _ in $(seq 100); do
		grep -qaE 'WEFT_CPUS_BUSY_AT_START=|OMP_WAIT_POLICY=' "/proc/$1/environ" 2>/dev/null && break
		sleep 0.05
	done
	tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null |
		sed -n 's/^\(OMP_WAIT_POLICY\|GOMP_SPINCOUNT\|WEFT_CPUS_BUSY_AT_START\)=/\1=/p' | tr '\n' ' '
}
policy_env() { # default | passive
	[ "$1" = passive ] && echo OMP_WAIT_POLICY=passive || echo "${DEFAULT_ENV:-X_DEFAULT=1}"
}
BUSY=()

"$BUILD/bench/weft-bench-infer" --zoo resnet20 --save r20.h5 --seconds 0.1 >/dev/null
"$BUILD/weft" export --model r20.h5 --out m/1 >/dev/null 2>&1
echo '{}' >cfg.json
"$BUILD/weft" data synth --out s.h5 --count 2000 --size 32 --seed 1 >/dev/null

serve_round() { # POLICY: requests/s
	local port
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	env "$(policy_env "$1")" "$BUILD/weft-serve" --model_name r20 --model_base_path "$TMP/m" \
		--rest_api_port "$port" --port 0 --grpc_port 0 --bind_address 127.0.0.1 \
		--enable_batching --max_batch_size 32 --batch_timeout_micros 2000 \
		--file_system_poll_wait_seconds 0 >serve.log 2>&1 &
	local sp=$!
	PIDS+=($sp)
	for _ in $(seq 300); do
		curl -sf "http://127.0.0.1:$port/v2/health/ready" >/dev/null && break
		sleep 0.1
	done
	echo "serve $1: $(choice $sp)" >>choices.txt
	busy_start
	"$BUILD/bench/weft-bench" --url "http://127.0.0.1:$port" --model r20 --protocol kserve \
		--concurrency 8 --duration "$SECS" --json |
		python3 -c 'import json,sys; print("%.1f" % json.load(sys.stdin)["images_per_sec"])'
	busy_stop
	kill "$sp"
	wait "$sp" 2>/dev/null || true
}
train_cmd() { # DIR: a smallcnn training
	echo "$BUILD/weft" train --set data.train=s.h5 --set model.name=smallcnn \
		--set train.batch_size=64 --set train.steps="$STEPS" --set log.every_steps=20 \
		--set log.dir="$1/lg" --set checkpoint.dir="$1/ck" --device cpu --no-progress-line \
		--config "$TMP/cfg.json"
}
train2_round() { # POLICY: seconds for both
	rm -rf a b
	local t0 t1
	t0=$(date +%s.%N)
	env "$(policy_env "$1")" $(train_cmd a) >a.log 2>&1 &
	local pa=$!
	env "$(policy_env "$1")" $(train_cmd b) >b.log 2>&1 &
	local pb=$!
	PIDS+=($pa $pb)
	echo "train2 $1: $(choice $pa)| $(choice $pb)" >>choices.txt
	wait $pa $pb
	t1=$(date +%s.%N)
	python3 -c "print('%.2f' % ($t1 - $t0))"
}
zoo2_round() { # POLICY: images/s of both, summed over their rows
	local z=("$BUILD/bench/bench_zoo" --models mobilenetv2 --no-peer --no-train --no-bf16
		--no-int8 --no-plan --infer-batch 1,32 --reps 3)
	env "$(policy_env "$1")" "${z[@]}" >z1.txt 2>&1 &
	local p1=$!
	env "$(policy_env "$1")" "${z[@]}" >z2.txt 2>&1 &
	local p2=$!
	PIDS+=($p1 $p2)
	wait $p1 $p2
	awk '$1 == "mobilenetv2" && $2 == "infer" { s += $4 } END { printf "%.1f\n", s }' z1.txt z2.txt
}
train_round() { # POLICY: median images/s with two busy processes started after it
	rm -rf a
	env "$(policy_env "$1")" $(train_cmd a) >a.log 2>&1 &
	local pa=$!
	PIDS+=($pa)
	until [ -s a/lg/metrics.jsonl ]; do sleep 0.05; done # its first window: it has started
	echo "train $1: $(choice $pa)" >>choices.txt
	busy_start
	wait $pa
	busy_stop
	python3 -c 'import json, statistics; v = [json.loads(l)["images_per_sec"] for l in open("a/lg/metrics.jsonl")][1:]; print("%.0f" % statistics.median(v))'
}

idle_round() { # POLICY: median images/s of `weft train` alone
	rm -rf a
	env "$(policy_env "$1")" $(train_cmd a) >a.log 2>&1
	python3 -c 'import json, statistics; v = [json.loads(l)["images_per_sec"] for l in open("a/lg/metrics.jsonl")][1:]; print("%.0f" % statistics.median(v))'
}

SCENARIOS=${SCENARIOS:-serve train2 zoo2 train idle}
declare -A R
for r in $(seq "$ROUNDS"); do
	for s in $SCENARIOS; do
		for p in default passive; do
			if ! quiet; then
				echo "round $r $s $p: the machine never became quiet (load average $(cut -d' ' -f1 /proc/loadavg)); skipped" >&2
				continue
			fi
			v=$(${s}_round $p)
			R[$s.$p.$r]=$v
			R[$s.$p]="${R[$s.$p]:-} $v"
			echo "round $r $s $p: $v" >&2
		done
	done
done
echo "== what each program chose (WEFT_CPUS_BUSY_AT_START: CPUs found busy at its start)"
sort choices.txt | uniq -c
echo "== medians over rounds; ratio = default / passive (pair time: passive / default), the median of the rounds' ratios; target >= 0.9"
for s in $SCENARIOS; do
	pairs=""
	for r in $(seq "$ROUNDS"); do
		[ -n "${R[$s.default.$r]:-}" ] && [ -n "${R[$s.passive.$r]:-}" ] &&
			pairs="$pairs ${R[$s.default.$r]}:${R[$s.passive.$r]}"
	done
	python3 - "$s" "$pairs" <<'PY'
import statistics, sys
s, pairs = sys.argv[1], [tuple(map(float, x.split(":"))) for x in sys.argv[2].split()]
unit = {"serve": "requests/s", "train2": "s for the pair", "zoo2": "img/s summed",
        "train": "img/s", "idle": "img/s"}[s]
if not pairs:
    print("%-7s no complete round" % s); sys.exit()
md, mp = statistics.median(d for d, _ in pairs), statistics.median(p for _, p in pairs)
ratios = [p / d if s == "train2" else d / p for d, p in pairs]
ratio = statistics.median(ratios)
print("%-7s default %8.1f  passive %8.1f  %-15s ratio %.2f (rounds %s)%s" % (
      s, md, mp, unit, ratio, " ".join("%.2f" % x for x in ratios),
      "" if ratio >= 0.9 else "  (short of 0.9)"))
PY
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
