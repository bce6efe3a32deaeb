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
# printed. Then mixed security modes: while a CURVE job (the first set-up,
# --key-dir) trains, a second worker:1 with the same TF_CONFIG and command
# line but --insecure, and another with a different key directory, must
# each stop within 30 s with a permanent error (1..127) naming CURVE or
# the key directory, and the job must end as an unkilled one (exit 0, one
# version, its accuracy); WEFT_CHAOS_TRIALS=0 runs only this.
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

# ---- mixed security modes: intruders with the job's TF_CONFIG ----
read -r nps mode _ <<<"${setups[0]}"
"$WEFT" keygen --out keys-job >/dev/null || fail "weft keygen"
"$WEFT" keygen --out keys-other >/dev/null || fail "weft keygen"
name=mixed
export WEFT_EVENTS=$WORK/$name.events.jsonl
# five times the trials' steps: the servers must outlive the intruders they
# refuse (2.5-4 s each beside heavy load, while the 400 steps after the
# first log line could take 2 s); an intruder that comes after the job
# waits for servers that have gone
mixed_steps=2000
launch_bg $name.log --ps "$nps" "${args[@]}" --set strategy.mode=$mode --set optimizer.lr=${lr[$mode]} \
	--set checkpoint.dir=$name/ckpt --set log.dir=$name/logs --set export.dir=$name/models/m \
	--set train.steps=$mixed_steps --set train.eval_every_steps=$mixed_steps --key-dir keys-job
wait_for $name.log "step +[0-9]+/$mixed_steps" 60
pid=$(pid_of worker:1) || fail "no worker:1 started"
tf_config=$(tr '\0' '\n' </proc/$pid/environ | sed -n 's/^TF_CONFIG=//p')
mapfile -d '' cmd </proc/$pid/cmdline
intruder=() # worker:1's command line without its security setting
for ((i = 0; i < ${#cmd[@]}; i++)); do
	if [ "${cmd[i]}" = --set ] && [[ "${cmd[i + 1]:-}" =~ ^cluster\.(key_dir|insecure)= ]]; then
		i=$((i + 1))
	else
		intruder+=("${cmd[i]}")
	fi
done
# intrude LOG ARGS...: worker:1 again, with ARGS, in the background
intrude() {
	local log=$1
	shift
	WEFT_EVENTS=$WORK/intruders.events.jsonl TF_CONFIG=$tf_config \
		timeout -k 5 45 "${intruder[@]}" "$@" >"$log" 2>&1 &
}
t0=$SECONDS
intrude plain.log --insecure
plain_pid=$!
intrude other.log --key-dir keys-other
other_pid=$!
for p in plain:$plain_pid:"CURVE" other:$other_pid:"keys-other"; do
	IFS=: read -r who ipid want <<<"$p"
	rc=0
	wait $ipid || rc=$?
	took=$((SECONDS - t0))
	echo "intruder $who: exit $rc after ${took}s: $(grep -m1 error $who.log || tail -1 $who.log)"
	[ "$rc" != 124 ] && [ "$rc" != 137 ] || kill -0 "$LAUNCH_PID" 2>/dev/null ||
		fail "intruder $who: exit $rc, and the job had ended meanwhile (nobody was left to refuse it: make the job longer)"
	[ "$rc" -ge 1 ] && [ "$rc" -le 127 ] && [ "$rc" != 124 ] || fail "intruder $who: exit $rc, want 1..127"
	[ "$took" -le 30 ] || fail "intruder $who: stopped after ${took}s"
	grep -q -- "$want" $who.log || fail "intruder $who: the error does not name '$want'"
done
running=yes
kill -0 "$LAUNCH_PID" 2>/dev/null || running="no (it had ended)"
[ "$running" = yes ] || [ -f $name/ckpt/step-$mixed_steps/DONE ] ||
	fail "the job stopped while the intruders were refused"
rc=0
wait_launch "$(python3 -c "print(int(2 * $mixed_steps / 400 * ${ref_time[$mode]} + 60))")" || rc=$?
[ $rc = 0 ] || fail "mixed security modes: launch exited $rc"
versions=$(ls $name/models/m 2>/dev/null | tr '\n' ' ')
[ "$versions" = "1 " ] || fail "mixed security modes: exported versions: '$versions' (want exactly 1)"
acc=$(eval_accuracy $name/logs/metrics.jsonl)
echo "mixed security modes: $nps ps, $mode, intruders refused (job still running: $running), job exit 0, eval accuracy $acc"
python3 -c "import sys; sys.exit(0 if abs($acc - ${ref_acc[$mode]}) <= ${tol[$mode]} else 1)" ||
	fail "mixed security modes: eval accuracy $acc, unkilled ${ref_acc[$mode]}"
echo ok
