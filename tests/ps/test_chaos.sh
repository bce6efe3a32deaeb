# test_chaos.sh: kill -9 one process of a `weft launch` cluster (a server,
# the chief or a worker) at a random moment, with 1 and 2 servers, sync and
# async. Every trial must end exit 0, with a complete final checkpoint, an
# eval accuracy near the unkilled run of its mode (0.05), and within twice
# the unkilled time plus the timeouts (60 s). Seeded: WEFT_CHAOS_SEED (1);
# WEFT_CHAOS_TRIALS (4, cycling through the four set-ups) runs more out of
# CI. Each trial's line (set-up, victim, moment, time, accuracy) is printed.
. "$WEFT_SRC/tests/ps/lib.sh"
mkdir -p data
make_synth data/train.h5 2000 16 1
make_synth data/eval.h5 500 16 2
seed=${WEFT_CHAOS_SEED:-1}
trials=${WEFT_CHAOS_TRIALS:-4}
RANDOM=$seed
args=(--workers 2 --threads 2 --device cpu --config "$WEFT_SRC/configs/synth-smallcnn.json"
	--set data.train=data/train.h5 --set data.eval=data/eval.h5 --set train.steps=400
	--set train.eval_every_steps=400 --set checkpoint.every_steps=50 --set log.every_steps=20)
# async applies every worker's push: about 1/W of the sync learning rate
declare -A lr=([sync]=0.05 [async]=0.025)
declare -A ref_acc ref_time
for mode in sync async; do
	t0=$(date +%s.%N)
	"$WEFT" launch --ps 1 "${args[@]}" --set strategy.mode=$mode --set optimizer.lr=${lr[$mode]} --set checkpoint.dir=ref-$mode/ckpt \
		--set log.dir=ref-$mode/logs >ref-$mode.log 2>&1 || fail "the unkilled $mode run failed"
	ref_time[$mode]=$(python3 -c "import time; print(round(time.time() - $t0, 1))")
	ref_acc[$mode]=$(eval_accuracy ref-$mode/logs/metrics.jsonl)
	echo "unkilled $mode: ${ref_time[$mode]} s, eval accuracy ${ref_acc[$mode]}"
done
setups=("1 sync" "2 sync" "1 async" "2 async")
for ((t = 0; t < trials; t++)); do
	read -r nps mode <<<"${setups[t % 4]}"
	victims=(worker:0 worker:1 ps:0)
	[ "$nps" = 2 ] && victims+=(ps:1)
	victim=${victims[RANDOM % ${#victims[@]}]}
	# a moment in (0, 0.95 x the unkilled time): start-up, checkpoints, the end
	at=$(python3 -c "print(round(${ref_time[$mode]} * 0.95 * ($RANDOM + 1) / 32769, 2))")
	name=t$t
	t0=$(date +%s.%N)
	launch_bg $name.log --ps "$nps" "${args[@]}" --set strategy.mode=$mode --set optimizer.lr=${lr[$mode]} \
		--set checkpoint.dir=$name/ckpt --set log.dir=$name/logs
	sleep "$at"
	pid=$(pid_of $name.log "$victim" || true)
	killed=no
	if [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; then killed=yes; fi
	limit=$(python3 -c "print(int(2 * ${ref_time[$mode]} + 60))")
	for ((i = 0; i < limit * 10; i++)); do
		kill -0 "$LAUNCH_PID" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$LAUNCH_PID" 2>/dev/null && fail "trial $t ($nps ps, $mode, kill $victim at $at s): still running after $limit s"
	rc=0
	wait "$LAUNCH_PID" || rc=$?
	took=$(python3 -c "import time; print(round(time.time() - $t0, 1))")
	[ $rc = 0 ] || fail "trial $t ($nps ps, $mode, kill $victim at $at s): launch exited $rc"
	[ -f $name/ckpt/step-400/DONE ] || fail "trial $t: no complete final checkpoint"
	acc=$(eval_accuracy $name/logs/metrics.jsonl)
	echo "trial $t: $nps ps, $mode, kill -9 $victim at $at s (killed: $killed): exit 0 in $took s, eval accuracy $acc"
	python3 -c "import sys; sys.exit(0 if abs($acc - ${ref_acc[$mode]}) <= 0.05 else 1)" ||
		fail "trial $t: eval accuracy $acc, unkilled ${ref_acc[$mode]}"
done
echo ok
