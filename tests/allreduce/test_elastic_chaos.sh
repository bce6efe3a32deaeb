# test_elastic_chaos.sh: an elastic allreduce job (weft launch --workers 3
# --elastic 2:4, strategy allreduce over the TCP ring) under a seeded random
# schedule of four events at random moments: a worker joins (SIGUSR1 to
# launch), the last one leaves (SIGUSR2), kill -9 of a random worker (the
# chief included; launch restarts it and it joins again), kill -9 of the
# membership service (launch restarts it; the workers connect to it again). Every trial must
# end exit 0 with a complete final checkpoint, an eval accuracy within 0.05
# of the unchanged run, within 2x its time + 60 s (no hang), and lose no
# more than the step in flight to a failure (each `rollback` event goes
# back at most strategy.commit_every = 1 step: the survivors restore their
# committed state, they never read a checkpoint). Seeded: WEFT_CHAOS_SEED
# (1), WEFT_CHAOS_TRIALS (2 in CI; the longer run: WEFT_CHAOS_TRIALS=50
# bash this script with WEFT and WEFT_SRC set). Each trial's line is
# printed.
. "$WEFT_SRC/tests/ps/lib.sh"
mkdir -p data
make_synth data/train.h5 2000 16 1
make_synth data/eval.h5 500 16 2
seed=${WEFT_CHAOS_SEED:-1}
trials=${WEFT_CHAOS_TRIALS:-2}
RANDOM=$seed
export OMP_NUM_THREADS=1
args=(--workers 3 --elastic 2:4 --threads 1 --device cpu
	--config "$WEFT_SRC/configs/synth-smallcnn.json" --set data.train=data/train.h5
	--set data.eval=data/eval.h5 --set train.steps=1500 --set train.eval_every_steps=1500
	--set checkpoint.every_steps=500 --set log.every_steps=100 --set strategy.name=allreduce
	--set strategy.stall_timeout=10 --set optimizer.lr=0.05)
t0=$(date +%s.%N)
export WEFT_EVENTS=$WORK/ref.events.jsonl
"$WEFT" launch "${args[@]}" --set checkpoint.dir=ref/ckpt --set log.dir=ref/logs >ref.log 2>&1 ||
	fail "the unchanged elastic run failed"
ref_time=$(python3 -c "import time; print(round(time.time() - $t0, 1))")
ref_acc=$(eval_accuracy ref/logs/metrics.jsonl)
echo "unchanged: ${ref_time} s, eval accuracy ${ref_acc}"
for ((t = 0; t < trials; t++)); do
	name=t$t
	export WEFT_EVENTS=$WORK/$name.events.jsonl
	t0=$(date +%s.%N)
	launch_bg $name.log "${args[@]}" --set checkpoint.dir=$name/ckpt --set log.dir=$name/logs
	# four events at sorted random moments in (0, 0.9 x the unchanged time)
	moments=$(for i in 1 2 3 4; do python3 -c "print(round(${ref_time} * 0.9 * ($RANDOM + 1) / 32769, 2))"; done | sort -n)
	what=""
	for at in $moments; do
		python3 -c "import time; time.sleep(max(0, $at - (time.time() - $t0)))"
		kill -0 "$LAUNCH_PID" 2>/dev/null || break
		case $((RANDOM % 4)) in
		0) kill -USR1 "$LAUNCH_PID"; what+=" join@$at" ;;
		1) kill -USR2 "$LAUNCH_PID"; what+=" leave@$at" ;;
		2)
			w=$((RANDOM % 4))
			pid=$(pid_of "worker:$w" || true)
			# only a running worker (a free slot's last pid is gone)
			if [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; then what+=" kill-worker:$w@$at"; fi
			;;
		3)
			pid=$(pid_of membership:0 || true)
			if [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; then what+=" kill-service@$at"; fi
			;;
		esac
	done
	echo "trial $t:$what: waiting for the job (at most 2x the unchanged time + 60 s)"
	rc=0
	wait_launch "$(python3 -c "print(int(2 * ${ref_time} + 60))")" || rc=$?
	took=$(python3 -c "import time; print(round(time.time() - $t0, 1))")
	[ $rc = 0 ] || fail "trial $t ($what): launch exited $rc"
	[ -f $name/ckpt/step-1500/DONE ] || fail "trial $t ($what): no complete final checkpoint"
	acc=$(eval_accuracy $name/logs/metrics.jsonl)
	summary=$(python3 - "$WEFT_EVENTS" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
back = [e["from"] - e["to"] for e in ev if e.get("event") == "rollback"]
assert all(b <= 1 for b in back), "a rollback of more than the step in flight: %s" % back
gens = {e["generation"] for e in ev if e.get("event") == "ring_reformed"}
print("%d generations, %d rollback(s) of the step in flight" % (len(gens), len(back)))
PY
) || fail "trial $t ($what): $summary"
	echo "trial $t:$what: exit 0 in $took s ($(python3 -c "print(round($took / ${ref_time}, 2))")x), eval accuracy $acc, $summary"
	python3 -c "import sys; sys.exit(0 if abs($acc - ${ref_acc}) <= 0.05 else 1)" ||
		fail "trial $t ($what): eval accuracy $acc, unchanged ${ref_acc}"
done
echo ok
