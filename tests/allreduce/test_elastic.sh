# test_elastic.sh: elastic allreduce without MPI (weft launch --elastic,
# strategy allreduce over the TCP ring and its membership service).
# 1. No change (2 workers, --elastic 2:2) ends within 1e-5 of one process
#    with --accumulate 2, as mpirun -np 2 does; so does the job resumed
#    from its checkpoint of step 6 (model, slots, data position); both
#    again through the host copy of the gradient a GPU worker sums
#    (strategy.debug_host_copy).
# 2. --elastic 2:3 with 2 started: SIGUSR1 adds worker 2 (the ring re-forms
#    with 3), kill -9 of worker 2 mid-run (the survivors restore their
#    committed state and re-form with 2; launch restarts it and it joins
#    again), SIGUSR2 makes it leave (exit 0). The job exits 0, workers 0 and
#    1 were never restarted (one pid each throughout), every change shows as
#    ring_reformed, the job trains every step asked and its loss falls.
# 3. `weft membership` on its own with hand-started workers (the Kubernetes
#    form): one of two killed, the other fails after strategy.elastic_timeout
#    with fewer than MIN (exit 2, naming the settings).
. "$WEFT_SRC/tests/ps/lib.sh"
CMP="$WEFT_SRC/tests/trainer/compare_dump.py"
make_synth train.h5 480 16 3
export OMP_NUM_THREADS=1

# ---- 1. no membership change: the same model as --accumulate 2 ----------------
cat >e.json <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "train.h5", "augment": true},
 "train": {"batch_size": 16, "steps": 12, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9}, "log": {"every_steps": 4},
 "checkpoint": {"every_steps": 6, "keep": 5}}
JSON
"$WEFT" train --config e.json --device cpu --threads 1 --accumulate 2 \
	--set checkpoint.dir=acc/ckpt --set log.dir=acc/logs 2>acc.err ||
	{ cat acc.err; fail "--accumulate 2 run failed"; }
"$WEFT" inspect --model acc/ckpt/step-12/model.h5 --dump >acc.txt
# ring: on host memory; copy: through the host copy a GPU's gradient takes
for v in ring copy; do
	set_v=()
	[ $v = copy ] && set_v=(--set strategy.debug_host_copy=true)
	# small buckets: the communication thread sums several while backward runs
	launch_bg $v.log --workers 2 --elastic 2:2 --threads 2 --config e.json "${set_v[@]}" \
		--set strategy.name=allreduce --set strategy.bucket_mb=0.05 \
		--set checkpoint.dir=$v/ckpt --set log.dir=$v/logs
	wait_launch 60 || fail "$v: the unchanged elastic job failed"
	"$WEFT" inspect --model $v/ckpt/step-12/model.h5 --dump >$v.txt
	python3 "$CMP" acc.txt $v.txt 1e-5 || fail "$v: 2 elastic workers differ from --accumulate 2"
	[ -f $v/ckpt/step-6/DONE ] && [ -f $v/ckpt/step-6/data_position.json ] ||
		fail "$v: no complete checkpoint with its data position at step 6"
	# Resume: drop the final checkpoint; the ring continues from step 6
	# (model, optimizer slots and data position) to the same model.
	rm -rf $v/ckpt/step-12
	launch_bg $v.res.log --workers 2 --elastic 2:2 --threads 2 --config e.json --resume \
		"${set_v[@]}" --set strategy.name=allreduce --set checkpoint.dir=$v/ckpt \
		--set log.dir=$v/logs
	wait_launch 60 || fail "$v: the resumed elastic job failed"
	grep -q "resuming from $v/ckpt/step-6" $v.res.log || fail "$v: did not resume from step 6"
	"$WEFT" inspect --model $v/ckpt/step-12/model.h5 --dump >$v.res.txt
	python3 "$CMP" acc.txt $v.res.txt 1e-5 || fail "$v: the resumed elastic job differs"
done

# ---- 2. join, kill -9, rejoin, leave ----------------------------------------------
# count_at_least N EVENT SECONDS FILTERS...: until N events match.
count_at_least() {
	local n=$1 ev=$2 secs=$3 i
	shift 3
	for ((i = 0; i < secs * 10; i++)); do
		[ "$(events count "$ev" "$@")" -ge "$n" ] && return 0
		kill -0 "$LAUNCH_PID" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}
# The changes must come mid-run: on a loaded machine a short job may end
# first; such a run is tried again, twice as long.
steps=1500
for attempt in 1 2 3; do
	rm -rf run "$WEFT_EVENTS"
	cat >c.json <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "train.h5"},
 "train": {"batch_size": 16, "steps": $steps, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.02, "momentum": 0.9},
 "strategy": {"name": "allreduce", "stall_timeout": 10, "elastic_lr": "fixed", "bucket_mb": 0.1},
 "checkpoint": {"dir": "run/ckpt", "every_steps": 0}, "log": {"dir": "run/logs", "every_steps": 10}}
JSON
	launch_bg launch.log --workers 2 --elastic 2:3 --threads 2 --config c.json
	events wait ring_reformed 60 who=worker:0 reason=start >/dev/null || fail "no first ring"
	kill -USR1 "$LAUNCH_PID"
	count_at_least 1 ring_reformed 60 who=worker:2 workers=3 || { wait_launch 60 || true; steps=$((steps * 2)); continue; }
	w2=$(events get started task_pid task=worker:2)
	kill -9 "$w2"
	count_at_least 1 ring_reformed 60 who=worker:0 reason=failure || { wait_launch 60 || true; steps=$((steps * 2)); continue; }
	# launch restarts it; it joins again
	count_at_least 2 started 60 task=worker:2 || { wait_launch 60 || true; steps=$((steps * 2)); continue; }
	w2b=$(events get started task_pid task=worker:2)
	count_at_least 1 ring_reformed 60 who=worker:2 pid="$w2b" workers=3 || { wait_launch 60 || true; steps=$((steps * 2)); continue; }
	kill -USR2 "$LAUNCH_PID"
	count_at_least 1 left 60 who=worker:2 && break
	[ $attempt = 3 ] && fail "the job ended before the changes were done, three times"
	echo "attempt $attempt: the job ($steps steps) ended before the changes; again, longer"
	wait_launch 120 || true
	steps=$((steps * 2))
done
rc=0
wait_launch 120 || rc=$?
[ "$rc" = 0 ] || fail "launch exited $rc"
grep -q "\[launch\] worker:2 exited with status 0 (it left; its slot is free)" launch.log ||
	fail "worker 2 did not exit 0 after leaving"
[ -f "run/ckpt/step-$steps/DONE" ] || fail "no final checkpoint at step $steps"
python3 - run/logs/metrics.jsonl "$WEFT_EVENTS" "$steps" <<'PY' || fail "elastic run checks"
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
ev = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
steps = int(sys.argv[3])
assert m[-1]["step"] == steps, m[-1]
assert m[-1]["loss"] < 0.5 * m[0]["loss"] and m[-1]["accuracy"] >= 0.9, (m[0], m[-1])
started = {}
for e in ev:
    if e.get("event") == "started":
        started.setdefault(e["task"], []).append(e["task_pid"])
# no restart of the survivors: one pid each, and their rings were re-formed by that pid
for w in ("worker:0", "worker:1"):
    assert len(started[w]) == 1, (w, started[w])
    pids = {e["pid"] for e in ev if e.get("event") == "ring_reformed" and e["who"] == w}
    assert pids == set(started[w]), (w, pids, started[w])
assert len(started["worker:2"]) == 2, started["worker:2"]
r0 = [e for e in ev if e.get("event") == "ring_reformed" and e["who"] == "worker:0"]
reasons = [e["reason"] for e in r0]
for want in ("start", "join", "failure", "leave"):
    assert want in reasons, reasons
gens = [e["generation"] for e in r0]
assert gens == sorted(gens) and len(set(gens)) == len(gens), gens
assert r0[-1]["workers"] == 2, r0[-1]
fail = [e for e in r0 if e["reason"] == "failure"][0]
assert fail["workers"] == 2 and fail["restored_step"] > 0, fail
joined = [e for e in ev if e.get("event") == "worker_joined" and e["worker"] == 2]
left = [e for e in ev if e.get("event") == "worker_left" and e["worker"] == 2]
assert joined and left, (joined, left)
print("generations", gens, "reasons", reasons, "failure restored step", fail["restored_step"])
PY

# ---- 3. the service on its own (the Kubernetes form); fewer than MIN fails --------
read -r sp wp0 wp1 < <(free_ports 3)
export WEFT_EVENTS=$WORK/k-events.jsonl # this part's own: part 2 had a worker 1 too
export WEFT_JOB_TOKEN=elastic-test-token
cl="\"cluster\": {\"worker\": [\"127.0.0.1:$wp0\", \"127.0.0.1:$wp1\"]}"
cat >k.json <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "train.h5"},
 "train": {"batch_size": 16, "steps": 1000000, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.02},
 "strategy": {"name": "allreduce", "min_workers": 2, "elastic_timeout": 6, "stall_timeout": 5},
 "checkpoint": {"dir": "k/ckpt", "every_steps": 0}, "log": {"dir": "k/logs", "every_steps": 100}}
JSON
TF_CONFIG="{$cl}" setsid "$WEFT" membership --config k.json --port "$sp" --insecure >svc.log 2>&1 &
LAUNCH_PIDS+=("$!")
kpid=()
for i in 0 1; do
	TF_CONFIG="{$cl, \"task\": {\"type\": \"worker\", \"index\": $i}}" \
		WEFT_ELASTIC_SERVICE="127.0.0.1:$sp" setsid "$WEFT" train --config k.json \
		--insecure --threads 1 >"k$i.log" 2>&1 &
	kpid+=("$!")
	LAUNCH_PIDS+=("$!")
done
events wait ring_reformed 30 who=worker:1 reason=start >/dev/null || fail "no ring of the service"
kill -9 "${kpid[1]}"
wait "${kpid[1]}" 2>/dev/null || true
rc=0
wait "${kpid[0]}" || rc=$?
[ "$rc" = 2 ] || fail "worker 0 exited $rc with fewer than MIN workers, want 2"
grep -q "fewer than strategy.min_workers 2, for [0-9]* s (strategy.elastic_timeout)" k0.log ||
	fail "worker 0 did not say why it failed"
grep -q "generation 1: 2 workers" svc.log || fail "the service formed no ring"
echo ok
