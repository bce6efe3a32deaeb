# test_attack.sh: while a real `weft launch` cluster trains (CURVE keys from
# `weft keygen`), outsiders attack its parameter server with the job's real
# id: a plain client without a key, a CURVE client with a key of its own,
# and a plain client with a wrong job id. None may pull the weights, push a
# gradient, make the server write a checkpoint to a path it names, read
# stats or shut the server down; no error reply reveals the job id; and
# training ends exit 0 with the eval accuracy of an unattacked run.
# WEFT_ATTACK_INSECURE=1 runs the attacked cluster with --insecure: the
# test must then FAIL (that is how it was checked).
. "$WEFT_SRC/tests/ps/lib.sh"
: "${WEFT_PS_ATTACK:?set WEFT_PS_ATTACK to the ps_attack tool}"
mkdir -p data
make_synth data/train.h5 2000 32 1
make_synth data/eval.h5 500 32 2
"$WEFT" keygen --out keys >/dev/null || fail "weft keygen"
[ "$(stat -c %a keys/client.key)" = 600 ] || fail "client.key is not mode 600"
[ "$(stat -c %a keys/server.key)" = 600 ] || fail "server.key is not mode 600"
run() { # run NAME [launch args...]: a 250-step sync job, in the background
	local name=$1
	shift
	launch_bg "$name.log" --ps 1 --workers 2 --threads 2 --device cpu \
		--config "$WEFT_SRC/configs/synth-smallcnn.json" \
		--set data.train=data/train.h5 --set data.eval=data/eval.h5 --set train.steps=250 \
		--set train.eval_every_steps=250 --set checkpoint.dir="$name/ckpt" \
		--set checkpoint.every_steps=0 --set log.dir="$name/logs" --set log.every_steps=10 "$@"
}

# the reference: the same job, unattacked
run ref --key-dir keys
rc=0
wait "$LAUNCH_PID" || rc=$?
[ $rc = 0 ] || fail "reference run exited $rc"
grep -q "\[ps:0\] .*(CURVE)" ref.log || fail "the server did not use CURVE"
ref_acc=$(eval_accuracy ref/logs/metrics.jsonl)

if [ -n "${WEFT_ATTACK_INSECURE:-}" ]; then
	run att --insecure
else
	run att --key-dir keys
fi
wait_for att.log '\[worker:0\] step +20/' 90
port=$(grep -oE '"ps": \["127\.0\.0\.1:[0-9]+' att.log | head -1 | grep -oE '[0-9]+$')
job=$(grep -oE '\[ps:0\] .*job [0-9a-f]{16}' att.log | head -1 | grep -oE '[0-9a-f]{16}$')
[ -n "$port" ] && [ -n "$job" ] || fail "no ps port or job id in the log"
ep="tcp://127.0.0.1:$port"
# the control: the cluster's own key is answered (the tool works)
if [ -z "${WEFT_ATTACK_INSECURE:-}" ]; then
	"$WEFT_PS_ATTACK" goodkey "$ep" "$job" "$WORK/evil" keys >good.out 2>&1 ||
		fail "the cluster's own key was refused: $(cat good.out)"
fi
for mode in plain wrongkey wrongjob; do
	"$WEFT_PS_ATTACK" "$mode" "$ep" "$job" "$WORK/evil-$mode" keys >"$mode.out" 2>&1 &
	eval "apid_$mode=$!"
done
for mode in plain wrongkey wrongjob; do
	pid_var="apid_$mode"
	arc=0
	wait "${!pid_var}" || arc=$?
	cat "$mode.out"
	[ $arc = 0 ] || fail "attacker '$mode' was not refused (exit $arc): $(cat "$mode.out")"
	[ ! -e "$WORK/evil-$mode" ] || fail "attacker '$mode' made the server write $WORK/evil-$mode"
done
rc=0
wait "$LAUNCH_PID" || rc=$?
[ $rc = 0 ] || fail "the attacked run exited $rc"
grep -q "\[launch\] done: every process exited 0" att.log || fail "not every process exited 0"
grep -q "\[worker:0\] trained 250 steps" att.log || fail "the chief did not finish"
grep -q "\[ps:0\] .*refused a connection" att.log || fail "the server did not log the wrong key"
[ -f att/ckpt/step-250/DONE ] || fail "no complete final checkpoint"
acc=$(eval_accuracy att/logs/metrics.jsonl)
python3 -c "import sys; r, a = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if abs(r - a) <= 0.05 else 1)" \
	"$ref_acc" "$acc" || fail "eval accuracy $acc under attack, $ref_acc without"
echo "ok: eval accuracy $acc under attack, $ref_acc without"
