# test_compression.sh: ps.compression bf16 on digit images (make_digits.py),
# `weft launch --ps 1 --workers 2`: the job trains (the loss falls, the eval
# accuracy within 3 points of the same job uncompressed; bench/RESULTS.md has
# the longer run's half-point figure), and the pushes really travel as bf16:
# the server receives about half the bytes it sends, where uncompressed it
# receives as many. The refusal of a worker whose ps.compression differs
# from the server's is in test_optim_mismatch.sh.
. "$WEFT_SRC/tests/ps/lib.sh"
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
export WEFT_PS_STATS_EVERY=0.5 # the server's byte counts, read below
for comp in none bf16; do
	"$WEFT" launch --ps 1 --workers 2 --threads 2 --device cpu --config c.json --insecure \
		--set ps.compression=$comp --set checkpoint.dir=$comp/ckpt --set log.dir=$comp/logs \
		>$comp.log 2>&1 || fail "ps.compression $comp: launch exited $?"
done
acc_none=$(eval_accuracy none/logs/metrics.jsonl)
acc_bf16=$(eval_accuracy bf16/logs/metrics.jsonl)
echo "eval accuracy: none $acc_none, bf16 $acc_bf16"
python3 - "$acc_none" "$acc_bf16" bf16/logs/metrics.jsonl <<'PY' || fail "bf16 did not train as uncompressed"
import json, sys
none, bf16 = float(sys.argv[1]), float(sys.argv[2])
loss = [json.loads(l)["loss"] for l in open(sys.argv[3]) if '"loss"' in l]
print("bf16 loss by log step:", loss)
assert loss[-1] < 0.5 * loss[0], "the loss did not fall"
assert abs(bf16 - none) <= 0.03, "accuracy differs by more than 3 points"
PY
# "in 12.3 MB, out 24.5 MB" of the server's last stats line
ratio() {
	grep -o 'in [0-9.]* MB, out [0-9.]* MB' "$1" | tail -1 |
		awk '{ if ($5 > 0) printf "%.3f\n", $2 / $5 }'
}
r_none=$(ratio none.log)
r_bf16=$(ratio bf16.log)
echo "server bytes in / out: none $r_none, bf16 $r_bf16"
[ -n "$r_none" ] && [ -n "$r_bf16" ] || fail "no stats line with byte counts"
python3 -c "import sys; sys.exit(0 if $r_bf16 < 0.6 and $r_none > 0.9 else 1)" ||
	fail "bf16 pushes did not halve the bytes in (in/out: none $r_none, bf16 $r_bf16)"
echo ok
