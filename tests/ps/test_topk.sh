# test_topk.sh: ps.compression topk:0.01 on digit images (make_digits.py),
# `weft launch --ps 2 --workers 2`: the job finishes, the loss falls, the
# model learns (eval accuracy well above chance; bench/RESULTS.md has the
# longer run against uncompressed), and what each server received is sparse:
# a topk push carries 1% of the entries at 8 bytes each, so a server takes
# in a small fraction of the bytes it sends back as dense replies (about
# one to one uncompressed: test_compression.sh). A fraction outside (0, 1]
# is refused before anything starts, naming the key and the value. Hostile
# topk pushes (truncated, indices out of order, repeated, past the chunk)
# sent to a real server (ps_attack topk) are each refused with an error
# naming topk, and the server goes on answering.
. "$WEFT_SRC/tests/ps/lib.sh"
: "${WEFT_PS_ATTACK:?set WEFT_PS_ATTACK to the ps_attack tool}"
python3 "$WEFT_SRC/tests/trainer/make_digits.py" train.bin 800 1
python3 "$WEFT_SRC/tests/trainer/make_digits.py" eval.bin 300 2
"$WEFT" data cifar10 --out train.h5 train.bin >/dev/null
"$WEFT" data cifar10 --out eval.h5 eval.bin >/dev/null
cat >c.json <<'JSON'
{"model": {"name": "smallcnn"}, "data": {"train": "train.h5", "eval": "eval.h5"},
 "train": {"batch_size": 32, "steps": 150, "seed": 1, "eval_every_steps": 150},
 "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
 "strategy": {"name": "parameter_server"}, "log": {"every_steps": 25}}
JSON

# a bad fraction: refused at once, naming the key and the value
rc=0
"$WEFT" launch --ps 2 --workers 2 --device cpu --config c.json --insecure \
	--set ps.compression=topk:1.5 >bad.log 2>&1 || rc=$?
[ "$rc" -ge 1 ] && [ "$rc" -le 127 ] || fail "topk:1.5: exit $rc, want 1..127"
grep -q "ps.compression.*topk:1.5" bad.log || { cat bad.log; fail "the refusal does not name ps.compression and topk:1.5"; }

# hostile pushes against a lone server configured for topk
read -r PS_PORT W_PORT < <(free_ports 2)
CLUSTER="\"cluster\": {\"worker\": [\"127.0.0.1:$W_PORT\"], \"ps\": [\"127.0.0.1:$PS_PORT\"]}"
TF_CONFIG="{$CLUSTER, \"task\": {\"type\": \"ps\", \"index\": 0}}" \
	setsid "$WEFT" ps --config c.json --insecure --set ps.compression=topk:0.01 >ps.log 2>&1 &
PS_PID=$!
LAUNCH_PIDS+=("$PS_PID")
wait_for ps.log "ps 0 of 1: .* job [0-9a-f]{16}" 30
job=$(grep -oE "ps 0 of 1: .* job [0-9a-f]{16}" ps.log | grep -oE '[0-9a-f]{16}$')
"$WEFT_PS_ATTACK" topk "tcp://127.0.0.1:$PS_PORT" "$job" >attack.out 2>&1 ||
	{ cat attack.out; fail "a hostile topk push was accepted, or refused without naming topk, or the server stopped answering"; }
cat attack.out
kill -0 "$PS_PID" 2>/dev/null || fail "the server died"
grep -q "rejected message (bytes" ps.log || fail "the server did not log the rejections"
kill "$PS_PID"

export WEFT_PS_STATS_EVERY=0.5 # the servers' byte counts, read below
"$WEFT" launch --ps 2 --workers 2 --threads 2 --device cpu --config c.json --insecure \
	--set ps.compression=topk:0.01 --set checkpoint.dir=ckpt --set log.dir=logs \
	>topk.log 2>&1 || fail "ps.compression topk:0.01: launch exited $?"
acc=$(eval_accuracy logs/metrics.jsonl)
echo "eval accuracy with topk:0.01: $acc"
python3 - "$acc" logs/metrics.jsonl <<'PY' || fail "topk:0.01 did not train"
import json, sys
loss = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"loss"' in l]
print("loss by log step:", loss)
assert loss[-1] < 0.5 * loss[0], "the loss did not fall"
assert float(sys.argv[1]) >= 0.5, "eval accuracy below 0.5 (chance is 0.1)"
PY
# each server's last stats line: "ps S/2: ... in 7.3 MB, out 313.0 MB"
for s in 0 1; do
	r=$(grep -o "ps $s/2: up .* in [0-9.]* MB, out [0-9.]* MB" topk.log | tail -1 |
		grep -o 'in [0-9.]* MB, out [0-9.]* MB' | awk '{ if ($5 > 0) printf "%.4f\n", $2 / $5 }')
	echo "ps $s: bytes in / out $r"
	[ -n "$r" ] || fail "no stats line with byte counts from ps $s"
	python3 -c "import sys; sys.exit(0 if $r < 0.06 else 1)" ||
		fail "ps $s received $r of the bytes it sent: the pushes are not sparse"
done
echo ok
