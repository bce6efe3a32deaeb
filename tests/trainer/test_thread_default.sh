# test_threads.sh: weft's default thread count follows the CPU affinity it is
# started with and leaves out a CPU another process keeps busy; its OpenMP
# threads spin only briefly (GOMP_SPINCOUNT: the rounds of a 5 us spin) when no CPU was busy at
# start and sleep at once (OMP_WAIT_POLICY=passive) when one was, both set
# before the runtime loads, unless the user's environment says otherwise.
. "$WEFT_SRC/tests/trainer/lib.sh"
unset OMP_NUM_THREADS # the user's OMP_NUM_THREADS wins; the default is what is tested here
command -v taskset >/dev/null || { echo "SKIP: taskset not installed (util-linux)"; exit 77; }
"$WEFT" version >v.txt
grep -Eq "OpenMP wait policy (passive|\(unset\), GOMP_SPINCOUNT [0-9]+)" v.txt ||
	fail "OpenMP threads neither sleep nor spin briefly: $(cat v.txt)"
OMP_WAIT_POLICY=active "$WEFT" version >v1.txt
grep -q "wait policy active" v1.txt || fail "the user's OMP_WAIT_POLICY was overridden"
GOMP_SPINCOUNT=1000 "$WEFT" version >v2.txt
grep -q "wait policy (unset), GOMP_SPINCOUNT 1000" v2.txt || fail "the user's GOMP_SPINCOUNT was overridden"
cpu=$(taskset -pc $$ | sed 's/.*: *//; s/[,-].*//')
taskset -c "$cpu" "$WEFT" version >v3.txt
grep -q "cpus: 1 default threads (affinity 1" v3.txt || fail "affinity of one CPU does not give 1 thread"
grep -Eq "GOMP_SPINCOUNT [0-9]+" v3.txt || fail "no short spin with no busy CPU: $(cat v3.txt)"
# two CPUs, one of them kept busy by another process: one thread
read -r c0 c1 < <(python3 -c 'import os; c = sorted(os.sched_getaffinity(0)); print(c[0], c[-1])')
if [ "$c0" != "$c1" ]; then
	taskset -c "$c1" sh -c 'while :; do :; done' &
	spin=$!
	# until it has run a few clock ticks (utime, field 14 of its stat)
	for _ in $(seq 250); do
		[ "$(cut -d' ' -f14 "/proc/$spin/stat" 2>/dev/null || echo 0)" -ge 3 ] && break
		sleep 0.02
	done
	taskset -c "$c0,$c1" "$WEFT" version >v4.txt
	kill "$spin"
	wait "$spin" 2>/dev/null || true
	grep -q "cpus: 1 default threads (affinity 2, .*busy [12])" v4.txt ||
		fail "a CPU kept busy by another process still counts: $(grep cpus v4.txt)"
	grep -q "OpenMP wait policy passive" v4.txt ||
		fail "OpenMP threads spin although a CPU was busy at start: $(grep cpus v4.txt)"
fi
make_synth s.h5 256 8 1
taskset -c "$cpu" "$WEFT" train --set data.train=s.h5 --set train.steps=2 --set train.batch_size=32 \
	--set log.dir=lg --set checkpoint.dir=ck --device cpu --no-progress-line --config /dev/stdin \
	<<<'{}' >/dev/null 2>err.txt || { cat err.txt; fail "training failed"; }
grep -q '"threads": 1' lg/config.json || fail "train.threads 0 under a 1-CPU affinity did not resolve to 1: $(grep threads lg/config.json)"
echo ok
