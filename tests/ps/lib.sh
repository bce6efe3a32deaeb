# lib.sh: shared set-up of the parameter-server script tests. Source it; it
# gives $WORK (a fresh directory), fail(), make_synth(), and launch_bg /
# wait_for / pid_of to drive `weft launch` in the background. Every process
# started here is killed on exit, even on failure (launch runs in its own
# process group; its children die with it through PR_SET_PDEATHSIG).
set -euo pipefail
: "${WEFT:?set WEFT to the weft binary}"
: "${WEFT_SRC:?set WEFT_SRC to the source tree}"
WORK=$(mktemp -d /tmp/weft-ps-test.XXXXXX)
LAUNCH_PIDS=()
cleanup() {
	for p in "${LAUNCH_PIDS[@]+"${LAUNCH_PIDS[@]}"}"; do
		kill -9 -- "-$p" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	[ -n "${WEFT_TEST_KEEP:-}" ] && echo "kept $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT
cd "$WORK"

fail() {
	echo "FAIL: $*" >&2
	for f in "$WORK"/*.log; do
		[ -f "$f" ] && { echo "--- $f (last 40 lines)" >&2; tail -40 "$f" >&2; }
	done
	exit 1
}

# free_ports N: N distinct free loopback ports on one line, outside the
# ephemeral range (as weft launch picks them: a server restarted on its port
# never finds it held as some connection's source port)
free_ports() {
	python3 -c 'import random, socket, sys
lo, hi = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
pool = list(range(1024, lo)) + list(range(hi + 1, 65536))
random.shuffle(pool)
held = []
for p in pool:
    if len(held) == int(sys.argv[1]):
        break
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        held.append(s)
    except OSError:
        s.close()
print(*[x.getsockname()[1] for x in held])' "$1"
}

# make_synth FILE COUNT SIZE SEED
make_synth() {
	"$WEFT" data synth --out "$1" --count "$2" --size "$3" --seed "$4" >/dev/null
}

# launch_bg LOG ARGS...: `weft launch ARGS` in the background, in its own
# process group; its pid is $LAUNCH_PID.
launch_bg() {
	local log=$1
	shift
	setsid "$WEFT" launch "$@" >"$log" 2>&1 &
	LAUNCH_PID=$!
	LAUNCH_PIDS+=("$LAUNCH_PID")
}

# Every weft process of the test appends its events here (see README, Events).
export WEFT_EVENTS=$WORK/events.jsonl
# events OP EVENT ...: query $WEFT_EVENTS (tests/events.py: count, get, wait)
events() {
	python3 "$WEFT_SRC/tests/events.py" "$WEFT_EVENTS" "$@"
}

# wait_launch SECONDS: the exit status of the background launch; fails with
# the logs when it still runs after SECONDS (a hung job then says where it
# stood instead of running into ctest's timeout with no output).
wait_launch() {
	local i
	for ((i = 0; i < $1 * 10; i++)); do
		kill -0 "$LAUNCH_PID" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$LAUNCH_PID" 2>/dev/null && fail "weft launch still runs after $1 s"
	wait "$LAUNCH_PID"
}

# wait_for LOG REGEX SECONDS: until a line of LOG matches (fails otherwise).
wait_for() {
	local i
	for ((i = 0; i < $3 * 10; i++)); do
		grep -qE "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	fail "no line matching '$2' in $1 within $3 s"
}

# pid_of NAME: pid of the latest process NAME ("worker:1") launch started.
pid_of() {
	events get started task_pid "task=$1"
}

# eval_accuracy METRICS: eval_accuracy of the last line of a metrics.jsonl that has one
eval_accuracy() {
	python3 -c 'import json,sys
acc=[json.loads(l)["eval_accuracy"] for l in open(sys.argv[1]) if "eval_accuracy" in l]
print(acc[-1])' "$1"
}
