# lib.sh: shared set-up of the allreduce script tests. Source it; it gives
# $WORK (a fresh directory, removed on exit with every process the test
# started, ranks included), fail(), make_synth(), last_metric(), weft_mpirun() and rank_pid().
# Skips (exit 77) when mpirun is missing or weft was built without MPI.
set -euo pipefail
: "${WEFT:?set WEFT to the weft binary}"
: "${WEFT_SRC:?set WEFT_SRC to the source tree}"
if ! command -v mpirun >/dev/null 2>&1; then
	echo "SKIP: mpirun not found (install openmpi-bin: scripts/setup-deps.sh)"
	exit 77
fi
# mpirun refuses root without these; --oversubscribe and --bind-to none let
# two ranks share a 2-core machine with other work.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Sanitizer builds: Open MPI's own start-up allocations (in components it
# dlopens, so no suppression can name them) are never freed; leak checks of
# weft's code run in the tests without MPI. Memory errors still fail.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
WORK=$(mktemp -d /tmp/weft-allreduce.XXXXXX)
BG_PIDS=()
cleanup() {
	for p in "${BG_PIDS[@]}"; do
		kill -KILL "$p" 2>/dev/null || true
	done
	# ranks outlive a killed mpirun: end this test's own (see rank_pid)
	for r in 0 1 2 3; do
		p=$(rank_pid "$r") && kill -KILL "$p" 2>/dev/null || true
	done
	rm -rf "$WORK"
}
trap cleanup EXIT
cd "$WORK"

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

# make_synth FILE COUNT SIZE SEED
make_synth() {
	"$WEFT" data synth --out "$1" --count "$2" --size "$3" --seed "$4" >/dev/null
}

# last_metric FILE KEY: KEY of the last line of a metrics.jsonl
last_metric() {
	python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])[sys.argv[2]])' "$1" "$2"
}

# weft_mpirun N ARGS...: mpirun -np N weft ARGS (stall timeout from the env).
weft_mpirun() {
	local n=$1
	shift
	mpirun -np "$n" --oversubscribe --bind-to none -x WEFT_STALL_TIMEOUT -x OMP_NUM_THREADS \
		"$WEFT" "$@"
}

# rank_pid RANK: pid of the weft process of that MPI rank under this test.
rank_pid() {
	local p
	for p in $(pgrep -x weft); do
		local env
		env=$( { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null) || continue
		if grep -qx "OMPI_COMM_WORLD_RANK=$1" <<<"$env" &&
			grep -qx "WEFT_TEST_DIR=$WORK" <<<"$env"; then
			echo "$p"
			return 0
		fi
	done
	return 1
}
export WEFT_TEST_DIR=$WORK

# Built without MPI: the strategy must say so, and there is nothing to test.
echo '{"data": {"train": "missing.h5"}}' >probe.json
if "$WEFT" train --config probe.json --set strategy.name=allreduce 2>&1 | grep -q "built without it"; then
	echo "SKIP: this weft was built without MPI"
	exit 77
fi
