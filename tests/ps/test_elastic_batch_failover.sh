# test_elastic_batch_failover.sh: strategy.elastic_batch global with
# ps.replicas 2: the units frame the backups get carries each worker's unit
# list. 3 workers of --elastic 2:4 (each step trains 4 units: two, one and
# one) and 2 servers; the server holding the model's one chunk, and so the
# units, is killed with SIGKILL mid-epoch. Its backup takes over from the
# lists of the last replicated step: the job exits 0 without a rollback,
# every complete epoch applied each of its samples exactly once, no unit
# was applied twice, and every step but the one the kill hit trained 4 units.
. "$WEFT_SRC/tests/ps/lib.sh"
make_synth train.h5 480 16 3
# one chunk (the model is 0.58 MiB, ps.chunk_bytes 1 MiB): ps 0 holds it.
# The kill must land mid-run: on a loaded machine the watcher may wake only
# after a short job ended, so such a run is tried again, twice as long.
steps=300
for attempt in 1 2 3; do
	rm -rf run "$WEFT_EVENTS"
	cat >c.json <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "train.h5"},
 "train": {"batch_size": 16, "steps": $steps, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.02, "momentum": 0.9},
 "strategy": {"name": "parameter_server", "mode": "sync", "elastic_batch": "global"},
 "ps": {"replicas": 2, "server_timeout": 1, "heartbeat_timeout": 30},
 "checkpoint": {"dir": "run/ckpt", "every_steps": 0}, "log": {"dir": "run/logs", "every_steps": 50}}
JSON
	launch_bg launch.log --ps 2 --workers 3 --elastic 2:4 --threads 3 --device cpu --config c.json
	events wait unit 60 step=12 >/dev/null || fail "no worker trained step 12 (epoch 2) within 60 s"
	killed=0
	kill -9 "$(pid_of ps:0)" 2>/dev/null && killed=1
	rc=0
	wait_launch 180 || rc=$?
	[ $killed = 1 ] && [ "$(events count exited task=ps:0 signal=9)" = 1 ] && break
	echo "attempt $attempt: the job ($steps steps) ended before the kill landed; again, longer"
	steps=$((steps * 2))
done
[ $killed = 1 ] || fail "the kill never landed mid-run"
[ $rc = 0 ] || fail "ps 0 killed: launch exited $rc"
[ "$(events count rollback)" = 0 ] || fail "ps 0 killed: the job rolled back"
[ "$(events count ps_primary)" -ge 1 ] || fail "ps 0 killed: its backup did not take over"
python3 - run/logs/metrics.jsonl "$WEFT_EVENTS" $steps <<'PY' || fail "units lost, doubled or not 4 a step across the failover"
import collections, json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
done = [l for l in lines if "epoch_end" in l and l["complete"]]
steps = int(sys.argv[3])
per_epoch = 28  # units: 480 samples / (16 x 4 slots) = 7 steps of 4
assert len(done) >= steps * 4 // per_epoch - 1, f"want {steps * 4 // per_epoch} complete epochs: {done}"
for l in done:
    assert l["samples_applied"] == l["samples_per_epoch"] == 16 * per_epoch, l
ev = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
units = [e for e in ev if e.get("event") == "unit"]
applied, per_step = collections.Counter(), collections.Counter()
for e in units:
    if e["applied"]:
        applied.update(e["units"])
        per_step[e["step"]] += len(e["units"])
twice = sorted(u for u, n in applied.items() if n > 1)
assert not twice, f"applied more than once: {twice[:10]}"
missing = [u for u in range(len(done) * per_epoch) if applied[u] != 1]  # the complete epochs
assert not missing, f"never applied: {missing[:10]}"
odd = {s: n for s, n in per_step.items() if n != 4}
assert len(per_step) == steps and len(odd) <= 1, odd
print("ps 0 killed; steps not of 4 units:", odd)
PY
echo "ok: ps 0 killed, $(events count ps_primary) takeover(s)"
