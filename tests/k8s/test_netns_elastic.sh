# test_netns_elastic.sh: what the Kubernetes controllers do to a running
# job, on "pods" in their own network namespaces (tests/k8s/netns.sh), with
# the pod variables of the manifests (no TF_CONFIG): two servers holding two
# copies of every shard (ps.replicas 2), a chief and two worker slots with
# WEFT_MIN_WORKERS=2 (elastic). The job starts with the chief and worker-0;
# worker-1's pod starts later (the Indexed Job scaled up) and joins at the
# servers' step; ps-1's pod is killed with SIGKILL and started again (its
# StatefulSet restarts it at the same name and address), the workers carry on
# with the other copy and the new ps-1 joins again by state transfer;
# worker-0's pod gets SIGTERM (scaled down) and leaves for good, exit 0.
# The job must finish without a rollback, the chief with the final
# checkpoint and a loss that learned. Skips (77) without the privileges to
# create namespaces.
set -euo pipefail
. "$WEFT_SRC/tests/k8s/netns.sh"
netns_test_begin

DOMAIN=default.svc.cluster.local
netns_switch
netns_pod ps-0 10.244.8.10
netns_pod ps-1 10.244.8.11
netns_pod chief-0 10.244.8.20
netns_pod worker-0 10.244.8.30
netns_pod worker-1 10.244.8.31
netns_hosts "$DOMAIN"

"$WEFT" data synth --out train.h5 --count 960 --size 16 --seed 1 >/dev/null
STEPS=600
cat >job.json <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "$WORK/train.h5", "augment": false},
 "train": {"batch_size": 16, "steps": $STEPS, "seed": 1, "threads": 1},
 "optimizer": {"name": "sgd", "lr": 0.02, "momentum": 0.9},
 "strategy": {"name": "parameter_server", "mode": "sync"},
 "ps": {"replicas": 2, "chunk_bytes": 65536, "server_timeout": 2, "heartbeat_timeout": 5},
 "checkpoint": {"dir": "$WORK/ckpt", "every_steps": 200, "keep": 2},
 "log": {"dir": "$WORK/logs", "every_steps": 10}}
JSON
export WEFT_EVENTS=$WORK/events.jsonl
events() { python3 "$WEFT_SRC/tests/events.py" "$WEFT_EVENTS" "$@"; }
# the pods' ConfigMap (k8s/base/train), elastic: at least 2 of the 3 trainers
POD_ENV=(WEFT_NUM_PS=2 WEFT_NUM_WORKERS=2 WEFT_NUM_CHIEF=1 WEFT_PS_SERVICE=ps
	WEFT_WORKER_SERVICE=worker WEFT_CHIEF_SERVICE=chief WEFT_PORT=2222 WEFT_DOMAIN=$DOMAIN
	WEFT_MIN_WORKERS=2 WEFT_PS_CONNECT_TIMEOUT=30 OMP_NUM_THREADS=1 WEFT_KEY_DIR=$WORK/keys
	WEFT_EVENTS=$WEFT_EVENTS)
"$WEFT" keygen --out "$WORK/keys" >/dev/null || fail "weft keygen"

start_pod ps-0 ps - -- ps --config job.json --stats-every 0
start_pod ps-1 ps - -- ps --config job.json --stats-every 0
start_pod chief-0 chief 0 -- train --config job.json --no-progress-line
start_pod worker-0 worker 0 -- train --config job.json --no-progress-line
events wait unit 120 who=chief:0 step=40 >/dev/null || fail "the chief did not reach step 40"

# scale up: worker-1's pod starts and joins where the job is
start_pod worker-1 worker 1 -- train --config job.json --no-progress-line
events wait worker_joined 90 worker=2 >/dev/null || fail "worker-1 (trainer 2) did not join"
events wait unit 90 who=worker:1 applied=true >/dev/null || fail "worker-1 applied nothing"

# ps-1's pod dies and its StatefulSet starts it again
kill -9 -- "-${PID[ps-1]}"
wait "${PID[ps-1]}" 2>/dev/null || true
mv ps-1.log ps-1-killed.log
start_pod ps-1 ps - -- ps --config job.json --stats-every 0
events wait ps_joined 120 >/dev/null || fail "the restarted ps-1 did not join its groups again"

# scale down: worker-0's pod is told to stop, and leaves for good
[ "$(events count servers_shut_down)" = 0 ] || fail "the job ended too early: make it longer"
kill -TERM "${PID[worker-0]}"
events wait worker_left 90 worker=1 >/dev/null || fail "worker-0 (trainer 1) did not leave"
wait_exit worker-0 60
[ "$rc" = 0 ] || fail "worker-0 exited $rc after SIGTERM, want 0 (it left the elastic job)"

for p in chief-0 worker-1 ps-0 ps-1; do
	wait_exit $p 240
	[ "$rc" = 0 ] || fail "$p exited $rc"
done
[ "$(events count rollback)" = 0 ] || fail "the job rolled back"
[ "$(events count ps_primary)" -ge 1 ] || fail "no copy took over from the killed ps-1"
[ -f "ckpt/step-$STEPS/DONE" ] || fail "no complete checkpoint of step $STEPS"
last=$(grep -oE "trained $STEPS steps: loss [0-9.]+" chief-0.log) || fail "the chief did not train $STEPS steps"
awk -v l="${last##* }" 'BEGIN { exit !(l < 1.5) }' || fail "did not learn ($last)"
echo "ok: joined, ps-1 killed and restarted, left; $last; no rollback"
