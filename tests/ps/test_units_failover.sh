# test_units_failover.sh: with ps.replicas 2 the data units go with the chunk
# that hands them out. 3 sync workers with strategy.backup_workers 1 (each
# step applies the first 2 pushes; the late batch is re-queued) and 2
# servers; the server holding the model's one chunk, and so the units, is
# killed with SIGKILL mid-epoch. Its backup takes over from the units of the
# last replicated step: the job exits 0 without a rollback, every complete
# epoch applied each of its samples exactly once (metrics.jsonl), and the
# workers' "unit" events show each unit of those epochs applied once, none
# twice, although the server that handed most of them out is gone.
. "$WEFT_SRC/tests/ps/lib.sh"
make_synth train.h5 480 16 3
# one chunk (the model is 0.58 MiB, ps.chunk_bytes 1 MiB): ps 0 holds it.
# The kill must land mid-run: on a loaded machine the watcher may wake only
# after a short job ended, so such a run is tried again, twice as long.
steps=400
for attempt in 1 2 3; do
	rm -rf run "$WEFT_EVENTS"
	cat >c.json <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "train.h5"},
 "train": {"batch_size": 16, "steps": $steps, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.02, "momentum": 0.9},
 "strategy": {"name": "parameter_server", "mode": "sync", "backup_workers": 1},
 "ps": {"replicas": 2, "server_timeout": 1},
 "checkpoint": {"dir": "run/ckpt", "every_steps": 0}, "log": {"dir": "run/logs", "every_steps": 50}}
JSON
	launch_bg launch.log --ps 2 --workers 3 --threads 3 --device cpu --config c.json
	events wait unit 60 unit=45 >/dev/null || fail "no worker trained unit 45 (epoch 2) within 60 s"
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
python3 - run/logs/metrics.jsonl $((2 * steps)) <<'PY' || fail "per-epoch counts wrong after the failover"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
done = [l for l in lines if "epoch_end" in l and l["complete"]]
want = int(sys.argv[2]) // 30  # 2 units applied per step, 30 per epoch
assert len(done) >= want, f"want {want} complete epochs: {done}"
for l in done:
    assert l["samples_applied"] == l["samples_per_epoch"] == 480, l
PY
python3 - "$WEFT_EVENTS" $((2 * steps)) <<'PY' || fail "a unit was lost or applied twice across the failover"
import collections, json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
units = [e for e in ev if e.get("event") == "unit"]
applied = collections.Counter(e["unit"] for e in units if e["applied"])
twice = sorted(u for u, n in applied.items() if n > 1)
assert not twice, f"applied more than once: {twice[:10]}"
n = int(sys.argv[2])
missing = [u for u in range(n // 30 * 30) if applied[u] != 1]  # the complete epochs
if missing:  # what the workers said of them, and when the backup took over
    for e in ev:
        if e.get("unit") in missing[:3] or e.get("event") in ("ps_primary", "exited"):
            print(json.dumps(e), file=sys.stderr)
assert not missing, f"never applied: {missing[:10]}"
assert sum(applied.values()) == n, sum(applied.values())
PY
echo "ok: ps 0 killed, $(events count ps_primary) takeover(s), every unit of $((2 * steps / 30)) epochs applied once"
