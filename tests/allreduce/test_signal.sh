# test_signal.sh: a signal stops an `mpirun -np 2` job cleanly. SIGTERM to
# mpirun (which signals every rank, at whatever step each is): both ranks stop
# after the same step, exit 130, rank 0 leaves a complete checkpoint there,
# and `--resume` continues from it. SIGTERM to rank 1 alone: rank 0 stops with
# it at the same step and mpirun exits 130. Never a stall (exit 138).
. "$WEFT_SRC/tests/allreduce/lib.sh"
make_synth train.h5 512 16 3
cat >c.json <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "train.h5"},
 "train": {"batch_size": 16, "steps": 1000000, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.01, "momentum": 0.9}, "log": {"every_steps": 50},
 "strategy": {"name": "allreduce", "bucket_mb": 0.1}, "checkpoint": {"every_steps": 0}}
JSON
export OMP_NUM_THREADS=1 WEFT_STALL_TIMEOUT=20
# On SIGTERM/SIGINT mpirun signals the ranks' process groups and sends
# SIGKILL odls_base_sigkill_timeout seconds later (default 1): give the
# ranks time to checkpoint, as the README advises.
export OMPI_MCA_odls_base_sigkill_timeout=5

# Each rank runs under this wrapper: its own log file (mpirun stops reading
# the ranks' output while it terminates a job) and its exit code recorded.
cat >rank.sh <<'SH'
#!/bin/bash
exec >"$WEFT_TEST_DIR/$RUN.rank$OMPI_COMM_WORLD_RANK.log" 2>&1
trap 'true' TERM INT # the signal is for weft; the wrapper waits for it
"$@" &
child=$!
while :; do
	rc=0
	wait "$child" || rc=$?
	kill -0 "$child" 2>/dev/null || break
done
echo "$rc" >"$WEFT_TEST_DIR/$RUN.rank$OMPI_COMM_WORLD_RANK.rc"
exit "$rc"
SH
chmod +x rank.sh

# start RUN [ARGS...]: the 2-rank job in the background, each rank wrapped.
start() {
	RUN=$1
	shift
	export RUN
	mpirun -np 2 --oversubscribe --bind-to none -x WEFT_STALL_TIMEOUT -x OMP_NUM_THREADS \
		-x RUN -x WEFT_TEST_DIR ./rank.sh "$WEFT" train --config c.json --device cpu \
		--threads 1 --set checkpoint.dir="$RUN/ckpt" --set log.dir="$RUN/logs" "$@" \
		>"$RUN.out" 2>"$RUN.err" &
	JOB=$!
	BG_PIDS+=("$JOB")
	for _ in $(seq 300); do
		if [ -s "$RUN/logs/metrics.jsonl" ] && rank_pid 1 >/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	cat "$RUN".*log "$RUN.err"
	fail "$RUN: the job did not start training"
}

# finish LIMIT: wait for the job at most LIMIT s; sets RC.
finish() {
	for _ in $(seq $(($1 * 10))); do
		kill -0 "$JOB" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$JOB" 2>/dev/null && { cat "$RUN".*log; fail "$RUN: still running after $1 s"; }
	RC=0
	wait "$JOB" || RC=$?
}

# stopped_step RUN: the step both ranks say they stopped at (fails unless equal).
stopped_step() {
	local s0 s1
	s0=$(sed -n 's/^stopped at step \([0-9]*\):.*/\1/p' "$1.rank0.log")
	s1=$(sed -n 's/^stopped at step \([0-9]*\):.*/\1/p' "$1.rank1.log")
	[ -n "$s0" ] && [ "$s0" = "$s1" ] ||
		{ cat "$1".*log; fail "$1: ranks stopped at steps '$s0' and '$s1'"; }
	echo "$s0"
}

complete_ckpt() {
	for f in DONE model.h5 optimizer.h5; do
		[ -f "$1/$f" ] || fail "$1 has no $f"
	done
}

# 1. SIGTERM to mpirun: every rank gets it; both stop after one step, exit 130.
start term
sleep 1
kill -TERM "$JOB"
finish 40
for r in 0 1; do
	[ -f "term.rank$r.rc" ] || { cat term.rank$r.log; fail "rank $r was killed (no exit code)"; }
	rc=$(cat "term.rank$r.rc")
	[ "$rc" -eq 130 ] || { cat "term.rank$r.log"; fail "rank $r exited $rc, want 130"; }
done
step=$(stopped_step term)
echo "SIGTERM to mpirun: both ranks exit 130 after step $step (mpirun exit $RC)"
complete_ckpt "term/ckpt/step-$step"
grep -q "stall:" term.rank0.log term.rank1.log && fail "a rank reported a stall"

# 2. --resume continues from that checkpoint to the end (10 more steps).
RUN=resume
export RUN
mpirun -np 2 --oversubscribe --bind-to none -x WEFT_STALL_TIMEOUT -x OMP_NUM_THREADS \
	-x RUN -x WEFT_TEST_DIR ./rank.sh "$WEFT" train --config c.json --device cpu --threads 1 \
	--resume --set checkpoint.dir=term/ckpt --set log.dir=term/logs \
	--set train.steps=$((step + 10)) >resume.out 2>resume.err ||
	{ cat resume.*log resume.err; fail "--resume after the stop failed"; }
grep -q "resuming from .*step-$step (step $step of" resume.rank0.log ||
	{ cat resume.rank0.log; fail "rank 0 did not resume from step $step"; }
[ "$(last_metric term/logs/metrics.jsonl step)" -eq $((step + 10)) ] ||
	fail "the resumed run did not reach step $((step + 10))"
complete_ckpt "term/ckpt/step-$((step + 10))"
echo "resumed at step $step and finished at step $((step + 10))"

# 3. SIGTERM to rank 1 alone: rank 0 stops with it; mpirun reports 130.
start one
sleep 0.5
kill -TERM "$(rank_pid 1)"
finish 30
step=$(stopped_step one)
[ "$(cat one.rank0.rc)" -eq 130 ] && [ "$(cat one.rank1.rc)" -eq 130 ] ||
	fail "ranks exited $(cat one.rank0.rc) and $(cat one.rank1.rc), want 130"
[ "$RC" -eq 130 ] || { cat one.err; fail "mpirun exited $RC, want 130"; }
complete_ckpt "one/ckpt/step-$step"
echo "SIGTERM to rank 1 only: both ranks stop after step $step, mpirun exit $RC"
echo ok
