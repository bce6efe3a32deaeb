# test_corrupt_files.sh: files with corrupt variable-length strings (2 bytes
# of the classes attribute's global-heap references, which crash or hang
# libhdf5 1.10 when it follows them, or a string length of 100 MB or 4 GiB,
# which makes it allocate that much, or a .keras entry claiming 2 GiB) are
# refused with a message, never a signal, a hang or more memory than the
# check's limit (common/sandbox.h: 512 MiB beyond the process, plus 4 x the
# file's size; string reads 64 MiB plus 4 x the file's size): weft inspect
# and weft train on them, and weft-serve, which keeps serving the newest
# version that loads. Also a Keras file listing 100000 layers (10x the
# limit; written here by make_keras_layers, 13.9 MB): refused before the
# walk, within seconds (the walk was quadratic: 98 s), naming the count and
# the limit. And a checkpoint's model.h5 damaged under an empty (older)
# DONE or a DONE recomputed to match (tests/trainer/damage.sh): weft export
# takes the previous step within the limit (trainer/test_files_robust.sh
# checks the same of --resume).
. "$WEFT_SRC/tests/trainer/lib.sh"
. "$WEFT_SRC/tests/trainer/damage.sh"
: "${WEFT_SERVE:?set by ctest}"
: "${WEFT_MAKE_KERAS_LAYERS:?set by ctest}"
R=$WEFT_SRC/tests/fuzz/regress
PEAK_MAX_KIB=$(((512 + 128) * 1024)) # the check's limit and weft's own size, with room
for f in $R/fuzz_model_file/*.h5 $R/fuzz_model_file/*.keras; do
	timeout 60 python3 "$WEFT_SRC/tests/peak_rss.py" peak.txt "$WEFT" inspect --model "$f" \
		>/dev/null 2>err.txt || true
	read rc kib <peak.txt
	[ $rc -ge 1 ] && [ $rc -le 127 ] && [ $rc != 124 ] || { cat err.txt; fail "inspect $(basename $f): exit $rc"; }
	grep -q "corrupt" err.txt || { cat err.txt; fail "inspect $(basename $f): no message"; }
	[ $kib -le $PEAK_MAX_KIB ] || { cat err.txt; fail "inspect $(basename $f): peak $kib KiB"; }
	echo "ok: inspect $(basename $f): exit $rc, peak $kib KiB"
done
for f in model-classes-vlen-length.h5 model-classes-vlen-length-100m.h5; do
	grep -q "attribute classes: reading its strings needed more than 64 MiB" <(
		"$WEFT" inspect --model $R/fuzz_model_file/$f 2>&1
	) || fail "$f: the refusal does not name the attribute and the memory limit"
done
"$WEFT_MAKE_KERAS_LAYERS" layers-100k.h5 100000 || fail "make_keras_layers"
t0=$EPOCHREALTIME
timeout 60 python3 "$WEFT_SRC/tests/peak_rss.py" peak.txt "$WEFT" inspect --model layers-100k.h5 \
	>/dev/null 2>err.txt || true
took=$(python3 -c "print(round($EPOCHREALTIME - $t0, 2))")
read rc kib <peak.txt
[ $rc -ge 1 ] && [ $rc -le 127 ] && [ $rc != 124 ] || { cat err.txt; fail "inspect layers-100k.h5: exit $rc"; }
grep -q "100000 layers, more than the 10000" err.txt ||
	{ cat err.txt; fail "inspect layers-100k.h5: the refusal does not name the count and the limit"; }
python3 -c "import sys; sys.exit($took > 15)" || fail "inspect layers-100k.h5: refused after $took s"
[ $kib -le $PEAK_MAX_KIB ] || { cat err.txt; fail "inspect layers-100k.h5: peak $kib KiB"; }
echo "ok: inspect layers-100k.h5: exit $rc in $took s, peak $kib KiB"

make_synth ck-train.h5 64 8 1
cat >ck.json <<JSON
{"model": {"name": "mlp"}, "data": {"train": "ck-train.h5"}, "train": {"batch_size": 8, "steps": 6},
 "log": {"dir": "logs"}, "checkpoint": {"dir": "ck.good", "every_steps": 3}}
JSON
"$WEFT" train --config ck.json --device ref 2>/dev/null || fail "training the checkpoints failed"
for how in empty recomputed; do
	rm -rf ck && cp -r ck.good ck
	damage_under_done ck/step-6 $how
	python3 "$WEFT_SRC/tests/peak_rss.py" peak.txt "$WEFT" export --checkpoint ck --out models-$how/m \
		>out.txt 2>err.txt || true
	read rc kib <peak.txt
	[ $rc = 0 ] || { cat err.txt; fail "export with a damaged model.h5 under the DONE ($how): exit $rc"; }
	grep -q "trained 3 steps" out.txt && grep -q "ck/step-6 skipped: .*checksum mismatch" err.txt ||
		{ cat out.txt err.txt; fail "export with a damaged model.h5 under the DONE ($how): step 3 not taken"; }
	[ $kib -le $PEAK_MAX_KIB ] || fail "export with a damaged model.h5 under the DONE ($how): peak $kib KiB"
	echo "ok: export with a damaged model.h5 under the DONE ($how): step 3, peak $kib KiB"
done
for f in $R/fuzz_data/data-*; do
	tail -c +2 "$f" >ds.h5 # the fuzz input's first byte picks the parser
	cat >t.json <<JSON
{"model": {"name": "mlp"}, "data": {"train": "ds.h5"}, "train": {"batch_size": 2, "steps": 1},
 "log": {"dir": "logs"}, "checkpoint": {"dir": "ck", "every_steps": 0}}
JSON
	set +e
	timeout 60 "$WEFT" train --config t.json --device ref >/dev/null 2>err.txt
	rc=$?
	set -e
	[ $rc -ge 1 ] && [ $rc -le 127 ] && [ $rc != 124 ] || { cat err.txt; fail "train on $(basename $f): exit $rc"; }
	grep -q "ds.h5.*corrupt" err.txt || { cat err.txt; fail "train on $(basename $f): no message"; }
done

# weft-serve with a corrupt newest version: reported, and the server stays up
# and answers (which version it then serves is the repository's policy).
"$WEFT" import-keras "$WEFT_SRC/tests/model/fixtures/seq_k3.h5" good.h5 >/dev/null 2>&1
mkdir -p models/1 models/2 models/3 models/4
cp good.h5 models/1/model.h5
cp $R/fuzz_model_file/model-classes-vlen-crash.h5 models/2/model.h5
cp $R/fuzz_model_file/model-classes-vlen-length.h5 models/3/model.h5
cp layers-100k.h5 models/4/model.h5
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 "$WEFT_SRC/tests/peak_rss.py" serve-peak.txt \
	"$WEFT_SERVE" --model_name m --model_base_path models --rest_api_port $port 2>serve.err &
spid=$!
trap 'kill $spid 2>/dev/null || true; wait $spid 2>/dev/null || true; cleanup' EXIT
reported() { grep -q "version 2 failed to load.*corrupt" serve.err &&
	grep -q "version 3 failed to load.*corrupt" serve.err &&
	grep -q "version 4 failed to load.*100000 layers, more than the 10000" serve.err; }
for i in $(seq 1 150); do
	reported && break
	kill -0 $spid 2>/dev/null || { cat serve.err; fail "weft-serve died on a corrupt version"; }
	sleep 0.2
done
reported || { cat serve.err; fail "corrupt versions not reported"; }
sleep 0.5
kill -0 $spid 2>/dev/null || { cat serve.err; fail "weft-serve died on a corrupt version"; }
python3 - $port <<'PY' || { cat serve.err; fail "weft-serve does not answer"; }
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen("http://127.0.0.1:%s/v1/models/m" % sys.argv[1], timeout=5)
except urllib.error.HTTPError:
    pass  # an HTTP answer (e.g. 404 while nothing is loaded) is an answer
PY
# the server and its checking children: at most the check's limit
kill -TERM $spid
wait $spid || true
read rc kib <serve-peak.txt
[ $kib -le $PEAK_MAX_KIB ] || { cat serve.err; fail "weft-serve: peak $kib KiB"; }
echo "ok: weft-serve with versions 2, 3 and 4 refused: exit $rc, peak $kib KiB"
echo PASS
