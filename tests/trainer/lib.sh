# lib.sh: shared set-up of the trainer's and exporter's script tests. Source
# it; it gives $WORK (a fresh directory, the current one, removed on exit by
# cleanup(), which a test may redefine), fail(), expect_error() and
# make_synth().
set -euo pipefail
: "${WEFT:?set WEFT to the weft binary}"
: "${WEFT_SRC:?set WEFT_SRC to the source tree}"
WORK=$(mktemp -d /tmp/weft-test.XXXXXX)
cleanup() { rm -rf "$WORK"; }
trap cleanup EXIT
cd "$WORK"

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

# expect_error WANT COMMAND...: COMMAND exits 1..127 and its stderr mentions WANT
expect_error() {
	local want=$1 rc=0
	shift
	"$@" >out.txt 2>err.txt || rc=$?
	[ "$rc" -ge 1 ] && [ "$rc" -le 127 ] || { cat err.txt; fail "$*: exit $rc, want 1..127"; }
	grep -q -- "$want" err.txt || fail "$*: error does not mention '$want': $(cat err.txt)"
	echo "ok: $(tail -1 err.txt)"
}

# events FILE OP EVENT ...: query a weft event file (tests/events.py: count, get, wait)
events() {
	python3 "$WEFT_SRC/tests/events.py" "$@"
}

# make_synth FILE COUNT SIZE SEED
make_synth() {
	"$WEFT" data synth --out "$1" --count "$2" --size "$3" --seed "$4" >/dev/null
}

# last_metric FILE KEY: KEY of the last line of a metrics.jsonl
last_metric() {
	python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])[sys.argv[2]])' "$1" "$2"
}
