# test_settings_env.sh: settings resolve once, in trainer/: flag (--set) >
# environment variable > config file > default, and the resolved value is
# what the run records (config.json); a malformed variable is a warning that
# keeps the file's value; a precision is recorded in one spelling; `weft
# train --help-config` names every key's variable and lists every variable
# weft reads.
. "$WEFT_SRC/tests/trainer/lib.sh"
unset WEFT_DATA_MEMORY_MB WEFT_STALL_TIMEOUT WEFT_PRECISION
"$WEFT" train --help-config >keys.txt || fail "train --help-config failed"
grep -q '^| key | type | default | environment | meaning |' keys.txt || fail "no environment column"
grep -q '^| `strategy.stall_timeout` | number | `60.0` | `WEFT_STALL_TIMEOUT` |' keys.txt ||
	fail "strategy.stall_timeout does not name WEFT_STALL_TIMEOUT: $(grep stall_timeout keys.txt)"
for v in WEFT_PRECISION WEFT_CUDA_DEVICE WEFT_CUDNN_WORKSPACE_MB WEFT_DATA_MEMORY_MB \
	WEFT_RENDEZVOUS_TIMEOUT WEFT_PS_MALLOC_TUNE WEFT_PS_DEBUG_STALL TF_CONFIG \
	OMPI_COMM_WORLD_LOCAL_RANK WEFT_PS_CHUNK_BYTES WEFT_KEY_DIR; do
	grep -q "^| \`[^|]*$v" keys.txt || fail "the environment table misses $v"
done

make_synth s.h5 64 8 1
cat >c.json <<'JSON'
{"data": {"train": "s.h5", "memory_mb": 5}, "train": {"steps": 1, "batch_size": 16},
 "strategy": {"stall_timeout": 30}}
JSON
# run NAME [weft train args...]: one step; prints the resolved config.json
run() {
	local name=$1
	shift
	"$WEFT" train --config c.json --device ref --no-progress-line --set log.dir="$name" \
		--set checkpoint.dir="$name/ck" "$@" >/dev/null 2>"$name.err" ||
		{ cat "$name.err"; fail "$name: training failed"; }
}
key() { # NAME SECTION KEY: the resolved value
	python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]][sys.argv[3]])' \
		"$1/config.json" "$2" "$3"
}
run file
[ "$(key file data memory_mb)" = 5 ] || fail "the file's data.memory_mb: $(key file data memory_mb)"
[ "$(key file strategy rendezvous_timeout)" = 300.0 ] || fail "default rendezvous_timeout"
WEFT_DATA_MEMORY_MB=7 WEFT_STALL_TIMEOUT=4.5 run env
[ "$(key env data memory_mb)" = 7 ] || fail "environment over file: $(key env data memory_mb)"
[ "$(key env strategy stall_timeout)" = 4.5 ] || fail "WEFT_STALL_TIMEOUT: $(key env strategy stall_timeout)"
WEFT_DATA_MEMORY_MB=7 run flag --set data.memory_mb=9
[ "$(key flag data memory_mb)" = 9 ] || fail "flag over environment: $(key flag data memory_mb)"
WEFT_DATA_MEMORY_MB=lots WEFT_PS_MALLOC_TUNE=0 run bad
[ "$(key bad data memory_mb)" = 5 ] || fail "a malformed variable replaced the file's value"
grep -q "WEFT_DATA_MEMORY_MB=lots ignored (data.memory_mb: expected an integer" bad.err ||
	fail "no warning naming the malformed variable: $(cat bad.err)"
[ "$(key bad cluster malloc_tune)" = False ] || fail "WEFT_PS_MALLOC_TUNE=0 is not false"
# the parameter server's WEFT_PS_* variables are keys too (ps.*), defaults as weft ran them
grep -q '^| `ps.heartbeat_timeout` | number | `5.0` | `WEFT_PS_HEARTBEAT_TIMEOUT` |' keys.txt ||
	fail "ps.heartbeat_timeout: $(grep heartbeat_timeout keys.txt)"
[ "$(key file ps chunk_bytes)" = 1048576 ] || fail "default ps.chunk_bytes: $(key file ps chunk_bytes)"
WEFT_PS_HEARTBEAT_TIMEOUT=3 WEFT_PS_DEBUG_STALL=1:2:3 run psenv
[ "$(key psenv ps heartbeat_timeout)" = 3.0 ] || fail "WEFT_PS_HEARTBEAT_TIMEOUT: $(key psenv ps heartbeat_timeout)"
[ "$(key psenv ps debug_stall)" = 1:2:3 ] || fail "WEFT_PS_DEBUG_STALL: $(key psenv ps debug_stall)"
if WEFT_PS_CHUNK_BYTES=100 "$WEFT" train --config c.json --device ref --set log.dir=small \
	--set checkpoint.dir=small/ck >/dev/null 2>small.err; then
	fail "WEFT_PS_CHUNK_BYTES=100 was accepted"
fi
grep -q "WEFT_PS_CHUNK_BYTES.*got 100" small.err || fail "no error naming the variable: $(cat small.err)"
# a precision has one spelling once resolved (bfloat16 is recorded as bf16);
# int8 is an inference precision: training refuses it and says what to do
WEFT_PRECISION=bfloat16 run alias
[ "$(key alias train precision)" = bf16 ] || fail "WEFT_PRECISION=bfloat16: $(key alias train precision)"
if "$WEFT" train --config c.json --device ref --precision int8 --set log.dir=i8 \
	--set checkpoint.dir=i8/ck >/dev/null 2>i8.err; then
	fail "--precision int8 was accepted for training"
fi
grep -q "train.precision: int8 is an inference precision.*weft export --quantize int8" i8.err ||
	fail "no error saying int8 is for inference: $(cat i8.err)"
echo ok
