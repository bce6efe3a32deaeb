# test_elastic_service.sh: the membership service of elastic allreduce is
# not a single point of failure. `weft membership` runs on its own with
# hand-started workers (the Kubernetes form); it is killed with SIGKILL and
# started again on its port, as a restarted pod would be. The workers train
# on meanwhile, connect to the new service and it goes on from their
# generation. Then a third worker joins through it, is killed with SIGKILL,
# and the survivors re-form; the chief's SIGTERM ends the job. Workers 0 and
# 1 never restart, and every generation number is new.
. "$WEFT_SRC/tests/ps/lib.sh"
make_synth train.h5 480 16 3
export OMP_NUM_THREADS=1
export WEFT_JOB_TOKEN=elastic-service-test
read -r sp wp0 wp1 wp2 < <(free_ports 4)
cl="\"cluster\": {\"worker\": [\"127.0.0.1:$wp0\", \"127.0.0.1:$wp1\", \"127.0.0.1:$wp2\"]}"
cat >s.json <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "train.h5"},
 "train": {"batch_size": 16, "steps": 1000000, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.02},
 "strategy": {"name": "allreduce", "min_workers": 2, "stall_timeout": 10},
 "checkpoint": {"dir": "s/ckpt", "every_steps": 0}, "log": {"dir": "s/logs", "every_steps": 100}}
JSON
start_service() {
	TF_CONFIG="{$cl}" setsid "$WEFT" membership --config s.json --port "$sp" --insecure \
		>>svc.log 2>&1 &
	svc=$!
	LAUNCH_PIDS+=("$svc")
}
wpid=()
start_worker() {
	TF_CONFIG="{$cl, \"task\": {\"type\": \"worker\", \"index\": $1}}" \
		WEFT_ELASTIC_SERVICE="127.0.0.1:$sp" setsid "$WEFT" train --config s.json \
		--insecure --threads 1 >"w$1.log" 2>&1 &
	wpid[$1]=$!
	LAUNCH_PIDS+=("$!")
}
# until EVENT matches FILTERS within SECONDS, else fail naming it
expect() {
	local ev=$1 secs=$2
	shift 2
	events wait "$ev" "$secs" "$@" >/dev/null || fail "no $ev event $* within $secs s"
}

start_service
start_worker 0
start_worker 1
expect ring_reformed 60 who=worker:0 reason=start generation=1
kill -9 "$svc"
wait "$svc" 2>/dev/null || true
expect service_lost 30 who=worker:0
expect service_lost 30 who=worker:1
start_service
expect service_back 30 who=worker:0
expect service_back 30 who=worker:1
grep -q "worker slot 0 connected again, a member of generation 1" svc.log ||
	fail "the new service did not take worker 0 back into generation 1"
start_worker 2
expect ring_reformed 60 who=worker:0 reason=join generation=2 workers=3
expect ring_reformed 60 who=worker:2 generation=2
kill -9 "${wpid[2]}"
expect ring_reformed 60 who=worker:0 reason=failure generation=3 workers=2
kill -TERM "${wpid[0]}"
for w in 0 1; do
	rc=0
	wait "${wpid[$w]}" || rc=$?
	[ "$rc" = 0 ] || [ "$rc" = 130 ] || fail "worker $w exited $rc after the chief's SIGTERM"
done
python3 - "$WEFT_EVENTS" <<'PY' || fail "event checks"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for w in ("worker:0", "worker:1"):
    pids = {e["pid"] for e in ev if e.get("who") == w}
    assert len(pids) == 1, (w, pids)  # never restarted
    gens = [e["generation"] for e in ev if e.get("event") == "ring_reformed" and e["who"] == w]
    assert gens == [1, 2, 3], (w, gens)
print("generations 1, 2, 3 across a restart of the service; workers 0 and 1 one process each")
PY
echo ok
