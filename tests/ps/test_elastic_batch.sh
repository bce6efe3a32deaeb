# test_elastic_batch.sh: strategy.elastic_batch global with elastic
# synchronous parameter servers: every step trains the cluster's worker
# slots' worth of data units (N = MAX), shared among the workers present
# (the server holding the last chunk hands each its list), and the update is
# the mean over the units.
# 1. No change, fewer workers than slots, 12 steps: 2 workers of --elastic
#    2:4 with one server (two units each) end within 1e-4 of one process
#    with --accumulate 4 (a unit is one worker's batch, so the 4 units of a
#    step are the single process's 4 micro-batches of that step); with
#    elastic_batch worker (one unit each) they do not.
# 2. A join mid-run (2 of 3 slots, then 3): from the `unit` events, every
#    step's applied units number exactly 3, except the step of the joiner's
#    first applied push (4: its one unit, from its pull or from the reply to
#    a push that came late, on top of the 3 the others share); every
#    complete epoch applies each sample once.
# 3. What stays refused names its fields: backup workers, no elastic
#    membership. (ps.replicas: tests/ps/test_elastic_batch_failover.sh.)
. "$WEFT_SRC/tests/ps/lib.sh"
CMP="$WEFT_SRC/tests/trainer/compare_dump.py"
make_synth train.h5 480 16 3
export OMP_NUM_THREADS=1
config() { # config FILE STEPS
	cat >"$1" <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "train.h5", "augment": true},
 "train": {"batch_size": 16, "steps": $2, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9}, "log": {"every_steps": 4},
 "strategy": {"name": "parameter_server", "mode": "sync", "elastic_batch": "global"},
 "ps": {"heartbeat_timeout": 30, "stall_timeout": 10},
 "checkpoint": {"every_steps": 0}}
JSON
}

# ---- 1. fewer workers than slots, no change ---------------------------------
config g12.json 12
"$WEFT" train --config g12.json --device cpu --threads 1 --accumulate 4 \
	--set strategy.name=local --set strategy.elastic_batch=worker \
	--set checkpoint.dir=single/ckpt --set log.dir=single/logs 2>single.err ||
	{ cat single.err; fail "--accumulate 4 run failed"; }
"$WEFT" inspect --model single/ckpt/step-12/model.h5 --dump >single.txt
# ps BATCH: 2 workers of --elastic 2:4, one server, elastic_batch BATCH, dumped to ps-BATCH.txt
ps() {
	local n=ps-$1
	launch_bg $n.log --ps 1 --workers 2 --elastic 2:4 --threads 1 --config g12.json \
		--set strategy.elastic_batch=$1 --set checkpoint.dir=$n/ckpt --set log.dir=$n/logs
	wait_launch 90 || fail "2 workers of --elastic 2:4 (elastic_batch $1) failed"
	"$WEFT" inspect --model $n/ckpt/step-12/model.h5 --dump >$n.txt
}
ps global
python3 "$CMP" single.txt ps-global.txt 1e-4 ||
	fail "2 workers of 2:4 with elastic_batch global differ from --accumulate 4"
ps worker
python3 "$CMP" single.txt ps-worker.txt 1e-3 >/dev/null &&
	fail "elastic_batch worker with 2 of 4 workers equals --accumulate 4: the setting changed nothing"

# ---- 2. a join mid-run ------------------------------------------------------
steps=300
for attempt in 1 2 3; do
	rm -rf join "$WEFT_EVENTS"
	config g$steps.json $steps
	launch_bg join.log --ps 1 --workers 2 --elastic 2:3 --threads 1 --config g$steps.json \
		--set checkpoint.dir=join/ckpt --set log.dir=join/logs --set log.every_steps=10
	events wait unit 60 who=worker:0 step=20 >/dev/null || fail "worker 0 did not reach step 20"
	kill -USR1 "$LAUNCH_PID"
	rc=0
	wait_launch 240 || rc=$?
	[ $rc = 0 ] || fail "the job with a join exited $rc"
	[ "$(events count unit who=worker:2 applied=true)" -ge 1 ] && break
	[ $attempt = 3 ] && fail "the job ended before worker 2 trained, three times"
	echo "attempt $attempt: the job ($steps steps) ended before the join; again, longer"
	steps=$((steps * 2))
done
python3 - "$WEFT_EVENTS" join/logs/metrics.jsonl <<'PY' || fail "units per step, or the epochs' samples"
import collections, json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
units = [e for e in ev if e.get("event") == "unit"]
per_step = collections.Counter()
applied = collections.Counter()
for e in units:
    if e["applied"]:
        per_step[e["step"]] += len(e["units"])
        applied.update(e["units"])
# the step of the joiner's first applied push trains 4: its own unit (from
# its pull, or from the reply to a push that came late) and the 3 the
# others share; every other step 3
joined = min(e["step"] for e in units if e["who"] == "worker:2" and e["applied"])
odd = {s: n for s, n in per_step.items() if n != 3}
assert odd == {joined: 4}, (joined, odd)
assert len(per_step) >= 20 and min(per_step) == 0, sorted(per_step.items())[:5]
# after the join the three workers share 3 units a step: one each
late = [e for e in units if e["step"] > joined and e["applied"]]
assert late and all(len(e["units"]) == 1 for e in late), late[:3]
lines = [json.loads(l) for l in open(sys.argv[2])]
done = [l for l in lines if l.get("complete")]
assert len(done) >= 3, lines[-3:]
for l in done:
    assert l["samples_applied"] == l["samples_per_epoch"] == 480, l
for u in range(len(done) * 30):  # 480 samples / 16 per unit
    assert applied[u] == 1, (u, applied[u])
print("join at step", joined, "; steps with 4 units:", sorted(odd), "of", len(per_step))
PY

# ---- 3. refusals ------------------------------------------------------------
refused() { # refused WHAT TEXT SETTINGS...: weft train refuses g12.json with SETTINGS, naming TEXT
	local what=$1 text=$2
	shift 2
	"$WEFT" train --config g12.json --set strategy.min_workers=2 "$@" 2>refused.err &&
		fail "elastic_batch global with $what was accepted"
	grep -q "$text" refused.err || fail "the refusal of $what does not name it: $(cat refused.err)"
}
refused "backup workers" "strategy.elastic_batch: global with parameter servers needs strategy.backup_workers 0" \
	--set strategy.backup_workers=1
refused "no elastic membership" "strategy.elastic_batch: global needs elastic membership" \
	--set strategy.min_workers=0
echo ok
