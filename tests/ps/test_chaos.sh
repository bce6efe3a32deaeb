# test_chaos.sh: kill -9 one process of a `weft launch` cluster (a server,
# the chief or a worker) with 1 and 2 servers, sync, async and ssp, at a
# random moment or at a phase: start-up, a checkpoint, the final step (the
# final barrier), the chief's export. Every trial must end exit 0, with a
# complete final checkpoint, exactly one exported version, an eval accuracy
# near the unkilled run of its mode (sync 0.05; async and ssp 0.3: their
# accuracy varies from run to run without any kill, one unkilled-like run in
# about 60 ended at 0.73 against 0.98, while a broken recovery ends near
# chance, 0.1, or diverges), and within twice the unkilled
# time plus the timeouts (60 s). With replicated servers (set-ups "2 sync 2",
# "2 async 2": ps.replicas 2) no trial may roll back, whoever is killed.
# Seeded: WEFT_CHAOS_SEED (1); WEFT_CHAOS_TRIALS (8 in CI, cycling through
# the eight set-ups; the longer run out of CI: WEFT_CHAOS_TRIALS=60 ctest -R
# ps_test_chaos; only some set-ups: WEFT_CHAOS_SETUPS="2 sync 2;2 async 2").
# Each trial's line (set-up, victim, moment, time, accuracy, rollbacks) is
# printed.
. "$WEFT_SRC/tests/ps/lib.sh"
mkdir -p data
make_synth data/train.h5 2000 16 1
make_synth data/eval.h5 500 16 2
seed=${WEFT_CHAOS_SEED:-1}
trials=${WEFT_CHAOS_TRIALS:-8}
RANDOM=$seed
args=(--workers 2 --threads 2 --device cpu --config "$WEFT_SRC/configs/synth-smallcnn.json"
	--set data.train=data/train.h5 --set data.eval=data/eval.h5 --set train.steps=400
	--set train.eval_every_steps=400 --set checkpoint.every_steps=50 --set log.every_steps=20)
# async and ssp apply every worker's push: at most 1/W of the sync learning
# rate. 1/(2W): at 0.025, momentum 0.9, plain async runs diverged now and then
# with no kill at all (seed 31, trial 17: loss 40 at step 100, about one run
# in 40), which failed the trial; at 0.0125 16 unkilled async and ssp:2 runs
# with 2 servers reached 0.974-0.986 eval accuracy, as at 0.025 (0.964-0.992)
declare -A lr=([sync]=0.05 [async]=0.0125 [ssp:2]=0.0125)
declare -A tol=([sync]=0.05 [async]=0.3 [ssp:2]=0.3)
declare -A ref_acc ref_time
setups=("1 sync" "2 sync" "1 async" "2 async" "1 ssp:2" "2 ssp:2" "2 sync 2" "2 async 2")
# WEFT_CHAOS_SETUPS="1 sync;2 sync" keeps those (a long run hunting one mode)
if [ -n "${WEFT_CHAOS_SETUPS:-}" ]; then
	IFS=';' read -r -a setups <<<"$WEFT_CHAOS_SETUPS"
fi
for mode in $(printf '%s\n' "${setups[@]}" | cut -d' ' -f2 | sort -u); do
	t0=$(date +%s.%N)
	"$WEFT" launch --ps 1 "${args[@]}" --set strategy.mode=$mode --set optimizer.lr=${lr[$mode]} --set checkpoint.dir=ref-$mode/ckpt \
		--set log.dir=ref-$mode/logs >ref-$mode.log 2>&1 || fail "the unkilled $mode run failed"
	ref_time[$mode]=$(python3 -c "import time; print(round(time.time() - $t0, 1))")
	ref_acc[$mode]=$(eval_accuracy ref-$mode/logs/metrics.jsonl)
	echo "unkilled $mode: ${ref_time[$mode]} s, eval accuracy ${ref_acc[$mode]}"
done
# phase: the log line the kill waits for (none: a random moment)
phases=(random random start-up checkpoint final-step export)
declare -A phase_re=([start-up]="listening on" [checkpoint]="checkpoint step 200 written"
	[final-step]="step 400/400" [export]="training done")
for ((t = 0; t < trials; t++)); do
	read -r nps mode replicas <<<"${setups[t % ${#setups[@]}]}"
	replicas=${replicas:-1}
	victims=(worker:0 worker:1 ps:0)
	[ "$nps" = 2 ] && victims+=(ps:1)
	victim=${victims[RANDOM % ${#victims[@]}]}
	phase=${phases[RANDOM % ${#phases[@]}]}
	[ "$phase" = export ] && victim=worker:0 # the chief exports
	# a moment in (0, 0.95 x the unkilled time): start-up, checkpoints, the end
	at=$(python3 -c "print(round(${ref_time[$mode]} * 0.95 * ($RANDOM + 1) / 32769, 2))")
	name=t$t
	t0=$(date +%s.%N)
	export WEFT_EVENTS=$WORK/$name.events.jsonl
	launch_bg $name.log --ps "$nps" "${args[@]}" --set strategy.mode=$mode --set optimizer.lr=${lr[$mode]} \
		--set checkpoint.dir=$name/ckpt --set log.dir=$name/logs --set export.dir=$name/models/m \
		--set ps.replicas=$replicas
	if [ "$phase" = random ]; then
		sleep "$at"
		at="$at s"
	else
		for ((i = 0; i < 600; i++)); do
			grep -q "${phase_re[$phase]}" $name.log 2>/dev/null && break
			sleep 0.01
		done
		at=$phase
	fi
	pid=$(pid_of "$victim" || true)
	killed=no
	if [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; then killed=yes; fi
	limit=$(python3 -c "print(int(2 * ${ref_time[$mode]} + 60))")
	for ((i = 0; i < limit * 10; i++)); do
		kill -0 "$LAUNCH_PID" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$LAUNCH_PID" 2>/dev/null && fail "trial $t ($nps ps, $mode, kill $victim at $at): still running after $limit s"
	rc=0
	wait "$LAUNCH_PID" || rc=$?
	took=$(python3 -c "import time; print(round(time.time() - $t0, 1))")
	[ $rc = 0 ] || fail "trial $t ($nps ps, $mode, kill $victim at $at): launch exited $rc"
	[ -f $name/ckpt/step-400/DONE ] || fail "trial $t: no complete final checkpoint"
	versions=$(ls $name/models/m 2>/dev/null | tr '\n' ' ')
	[ "$versions" = "1 " ] || fail "trial $t ($nps ps, $mode, kill $victim at $at): exported versions: '$versions' (want exactly 1)"
	acc=$(eval_accuracy $name/logs/metrics.jsonl)
	rollbacks=$(events count rollback)
	echo "trial $t: $nps ps (replicas $replicas), $mode, kill -9 $victim at $at (killed: $killed): exit 0 in $took s ($(python3 -c "print(round($took / ${ref_time[$mode]}, 2))")x), eval accuracy $acc, $rollbacks rollback(s)"
	[ "$replicas" = 1 ] || [ "$rollbacks" = 0 ] ||
		fail "trial $t ($nps ps, replicas $replicas, $mode, kill $victim at $at): $rollbacks rollback(s)"
	python3 -c "import sys; sys.exit(0 if abs($acc - ${ref_acc[$mode]}) <= ${tol[$mode]} else 1)" ||
		fail "trial $t: eval accuracy $acc, unkilled ${ref_acc[$mode]}"
done
echo ok
