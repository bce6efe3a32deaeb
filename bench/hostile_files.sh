#!/usr/bin/env bash
# hostile_files.sh BUILD: the peak resident memory of each hostile file case
# (the regression inputs of tests/fuzz/regress and a truncated file), for
# the command that meets it: the largest of the process and the checking
# children it waited for (tests/peak_rss.py: getrusage RUSAGE_CHILDREN), so a
# sandboxed parse counts. Also a Keras file listing 100000 layers (written by
# BUILD/tests/make_keras_layers, with its time) and a checkpoint's model.h5
# damaged under an empty DONE or a DONE recomputed to match
# (tests/trainer/damage.sh), for weft export and --resume. Prints a Markdown
# table (the README's "Security of files from outside" lists its result).
set -euo pipefail
B=$(cd "${1:?usage: hostile_files.sh BUILD}" && pwd)
SRC=$(cd "$(dirname "$0")/.." && pwd)
W=$B/weft
SERVE=$B/weft-serve
PEAK="python3 $SRC/tests/peak_rss.py"
R=$SRC/tests/fuzz/regress
T=$(mktemp -d /tmp/weft-hostile.XXXXXX)
trap 'rm -rf "$T"' EXIT
cd "$T"

# a truncated model file, crafted here; the others are the regression inputs
seed=$SRC/tests/fuzz/seeds/fuzz_model_file/weft-seq.h5
head -c $(($(stat -c %s "$seed") / 2)) "$seed" >truncated.h5

# the Keras file listing 10x the layers a weft model may have
LAYERS=$B/tests/make_keras_layers
[ -x "$LAYERS" ] && "$LAYERS" layers-100k.h5 100000
. "$SRC/tests/trainer/damage.sh"

"$W" import-keras "$SRC/tests/model/fixtures/seq_k3.h5" good.h5 >/dev/null 2>&1
"$W" data synth --out eval.h5 --count 16 --size 12 --seed 1 >/dev/null

row() { # CASE WEFT SUBCOMMAND ARGS...: the table names SUBCOMMAND
	local name=$1 t0=$EPOCHREALTIME
	shift
	$PEAK peak.txt "$@" >/dev/null 2>err.txt || true
	read -r rc kib <peak.txt
	printf '| %s | %s | %s | %d | %.1f |\n' "$name" "$2" "$rc" $((kib / 1024)) \
		"$(python3 -c "print($EPOCHREALTIME - $t0)")"
}
serve_row() { # CASE FILE
	rm -rf models && mkdir -p models/1 models/2
	cp good.h5 models/1/model.h5
	cp "$2" models/2/model.h5
	local port
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	$PEAK peak.txt "$SERVE" --model_name m --model_base_path models --rest_api_port "$port" \
		--port 0 --grpc_port 0 2>serve.err &
	local pid=$! t0=$EPOCHREALTIME
	for _ in $(seq 1 300); do
		grep -q "version 2 failed to load" serve.err && break
		kill -0 $pid 2>/dev/null || break
		sleep 0.1
	done
	local took
	took=$(python3 -c "print($EPOCHREALTIME - $t0)")
	kill -TERM $pid 2>/dev/null || true
	wait $pid || true
	read -r rc kib <peak.txt
	printf '| %s | weft-serve (version 2) | %s | %d | %.1f |\n' "$1" \
		"$(grep -q 'version 2 failed to load' serve.err && echo refused || echo '?')" $((kib / 1024)) \
		"$took"
}

echo "| case | command | exit | peak MiB | seconds |"
echo "|---|---|---|---|---|"
row "a good model file (for scale)" "$W" inspect --model good.h5
for f in $R/fuzz_model_file/* truncated.h5; do
	row "$(basename "$f")" "$W" inspect --model "$f"
done
for f in $R/fuzz_model_file/*; do
	row "$(basename "$f")" "$W" eval --model "$f" --data eval.h5 --device cpu
	serve_row "$(basename "$f")" "$f"
done
if [ -f layers-100k.h5 ]; then
	row "layers-100k.h5" "$W" inspect --model layers-100k.h5
	row "layers-100k.h5" "$W" eval --model layers-100k.h5 --data eval.h5 --device cpu
	serve_row "layers-100k.h5" layers-100k.h5
else
	echo "(no $LAYERS: build the tests for the layer-count rows)" >&2
fi

# checkpoints of a short run; step 6's model.h5 damaged under its DONE
"$W" data synth --out ck-train.h5 --count 64 --size 8 --seed 1 >/dev/null
cat >ck.json <<JSON
{"model": {"name": "mlp"}, "data": {"train": "ck-train.h5"}, "train": {"batch_size": 8, "steps": 6},
 "log": {"dir": "logs"}, "checkpoint": {"dir": "ck.good", "every_steps": 3}}
JSON
"$W" train --config ck.json --device ref >/dev/null 2>&1
for how in empty recomputed; do
	rm -rf ck models && cp -r ck.good ck
	damage_under_done ck/step-6 $how
	row "model.h5 damaged, DONE $how" "$W" export --checkpoint ck --out models/m
	row "model.h5 damaged, DONE $how (--resume)" "$W" train --config ck.json --device ref --resume \
		--set checkpoint.dir=ck --set train.steps=9
done
for f in $R/fuzz_data/data-*; do
	tail -c +2 "$f" >ds.h5 # the fuzz input's first byte picks the parser
	cat >t.json <<JSON
{"model": {"name": "mlp"}, "data": {"train": "ds.h5"}, "train": {"batch_size": 2, "steps": 1},
 "log": {"dir": "logs"}, "checkpoint": {"dir": "ck", "every_steps": 0}}
JSON
	row "$(basename "$f") (dataset)" "$W" train --config t.json --device ref
done
