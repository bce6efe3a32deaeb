# test_stall.sh: a rank that stops (SIGSTOP) before the next allreduce, or
# inside it, is named by rank 0 with the bucket it waits on, and the job exits
# 138 within the stall timeout; a rank killed mid-run (SIGKILL) makes mpirun
# exit non-zero within the timeout, naming the rank. Never a hang.
. "$WEFT_SRC/tests/allreduce/lib.sh"
make_synth train.h5 512 16 3
cat >c.json <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "train.h5"},
 "train": {"batch_size": 16, "steps": 100000, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.01, "momentum": 0.9}, "log": {"every_steps": 5},
 "strategy": {"name": "allreduce", "bucket_mb": 0.1}}
JSON
export OMP_NUM_THREADS=1 WEFT_STALL_TIMEOUT=4

# start_job NAME: mpirun -np 2 in the background; waits until rank 1 trains.
start_job() {
	weft_mpirun 2 train --config c.json --device cpu --threads 1 \
		--set checkpoint.dir="$1/ckpt" --set log.dir="$1/logs" >"$1.out" 2>"$1.err" &
	JOB=$!
	BG_PIDS+=("$JOB")
	for _ in $(seq 200); do
		if [ -s "$1/logs/metrics.jsonl" ] && PID1=$(rank_pid 1); then
			return 0
		fi
		sleep 0.1
	done
	cat "$1.err"
	fail "$1: the job did not start training"
}

# wait_job LIMIT: waits for the job at most LIMIT s; sets RC and ELAPSED.
wait_job() {
	local t0=$SECONDS
	for _ in $(seq $(($1 * 10))); do
		kill -0 "$JOB" 2>/dev/null || break
		sleep 0.1
	done
	ELAPSED=$((SECONDS - t0))
	kill -0 "$JOB" 2>/dev/null && fail "the job still runs after $1 s: it hangs"
	RC=0
	wait "$JOB" || RC=$?
}

# 1. Rank 1 stops: rank 0 names it and the job exits 138.
start_job stop
kill -STOP "$PID1"
wait_job 20
kill -KILL "$PID1" 2>/dev/null || true
echo "stopped rank 1: mpirun exit $RC after ${ELAPSED}s"
grep "stall" stop.err | head -3
[ "$RC" -eq 138 ] || { cat stop.err; fail "exit $RC after a stalled rank, want 138"; }
grep -Eq "stall: rank 1 (did not reach|reached) the allreduce of step" stop.err ||
	{ cat stop.err; fail "rank 0 did not name rank 1"; }
grep -q "gradient bucket" stop.err || fail "the message does not name the bucket"
[ "$ELAPSED" -le 15 ] || fail "took ${ELAPSED}s with a 4 s stall timeout"

# 1b. Rank 1 stops while it waits inside the allreduce (rank 0 held back
# meanwhile): rank 0 names it as reached-but-silent.
start_job mute
PID0=$(rank_pid 0)
kill -STOP "$PID0"
sleep 0.5
kill -STOP "$PID1"
kill -CONT "$PID0"
wait_job 20
kill -KILL "$PID1" 2>/dev/null || true
echo "rank 1 stopped while waiting: mpirun exit $RC after ${ELAPSED}s"
[ "$RC" -eq 138 ] || { cat mute.err; fail "exit $RC after a silent rank, want 138"; }
grep -Eq "stall: rank 1 (reached .* but stopped responding|did not reach)" mute.err ||
	{ cat mute.err; fail "rank 0 did not name the silent rank 1"; }

# 2. Rank 1 is killed: the others exit non-zero, naming it.
start_job kill
kill -KILL "$PID1"
wait_job 20
echo "killed rank 1: mpirun exit $RC after ${ELAPSED}s"
grep -E "rank 1|exited on signal" kill.err kill.out | head -3
[ "$RC" -ne 0 ] || fail "exit 0 after a killed rank"
grep -Eq "process rank 1 .*(exited|killed)|stall: rank 1 " kill.err ||
	{ cat kill.err; fail "no message names rank 1"; }
[ "$ELAPSED" -le 15 ] || fail "took ${ELAPSED}s with a 4 s stall timeout"
echo ok
