# test_netns_cluster.sh: a parameter-server job across "hosts": one server,
# a chief and two workers, each in its own network namespace with its own
# address, hosts file and host name, as pods of k8s/base/train would be
# (ps-0 of a StatefulSet, chief-0 and worker-N of Indexed Jobs). No
# TF_CONFIG: every process derives it from pod-like variables (WEFT_ROLE,
# JOB_COMPLETION_INDEX or the host name's ordinal, the services). The job
# trains to the end; then again with worker-1's link cut mid-run: the server
# declares it dead, the rest finish, and the cut worker exits 138
# (transient: a Job's podFailurePolicy retries it). Skips (77) without the
# privileges to create namespaces.
set -euo pipefail
. "$WEFT_SRC/tests/k8s/netns.sh"
netns_test_begin

DOMAIN=default.svc.cluster.local
netns_switch
netns_pod ps-0 10.244.7.10
netns_pod chief-0 10.244.7.20
netns_pod worker-0 10.244.7.30
netns_pod worker-1 10.244.7.31
netns_hosts "$DOMAIN"

"$WEFT" data synth --out train.h5 --count 2000 --size 32 --seed 1 >/dev/null
cat >config.json <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "$WORK/train.h5", "augment": false},
 "train": {"batch_size": 16, "steps": STEPS, "seed": 1, "threads": 1},
 "optimizer": {"name": "sgd", "lr": 0.02, "momentum": 0.9,
               "schedule": {"name": "cosine", "warmup_steps": 20}},
 "strategy": {"name": "parameter_server", "mode": "sync"},
 "checkpoint": {"dir": "CKPT", "every_steps": 50, "keep": 2},
 "log": {"dir": "LOGS", "every_steps": 10}}
JSON

# the variables the manifests give every training pod (weft-cluster ConfigMap)
POD_ENV=(WEFT_NUM_PS=1 WEFT_NUM_WORKERS=2 WEFT_NUM_CHIEF=1 WEFT_PS_SERVICE=ps
	WEFT_WORKER_SERVICE=worker WEFT_CHIEF_SERVICE=chief WEFT_PORT=2222 WEFT_DOMAIN=$DOMAIN
	WEFT_PS_HEARTBEAT_TIMEOUT=3 WEFT_PS_SERVER_TIMEOUT=4 WEFT_PS_CONNECT_TIMEOUT=30
	OMP_NUM_THREADS=1 WEFT_KEY_DIR=$WORK/keys)
"$WEFT" keygen --out "$WORK/keys" >/dev/null || fail "weft keygen"

# every pod sees the others under their Kubernetes names, and derives the
# same cluster
out=$(netns_run worker-1 env "${POD_ENV[@]}" WEFT_ROLE=worker JOB_COMPLETION_INDEX=1 \
	"$WEFT" tfconfig --resolve) || fail "tfconfig --resolve in worker-1: $out"
echo "$out" | grep -qF "ps[0] ps-0.ps.$DOMAIN:2222 -> tcp://10.244.7.10:2222" ||
	fail "worker-1 does not resolve ps-0 to its pod address: $out"
echo "$out" | grep -qF "task: worker 1 (trainer rank 2 of 3; chief: no)" ||
	fail "worker-1's identity: $out"
out=$(netns_run ps-0 env "${POD_ENV[@]}" WEFT_ROLE=ps "$WEFT" tfconfig) || fail "tfconfig in ps-0: $out"
echo "$out" | grep -qF "index from the host name ps-0 (StatefulSet ordinal)" ||
	fail "ps-0 did not take its index from its host name: $out"

# run_job NAME STEPS: config NAME.json and all four pods started.
run_job() {
	sed -e "s|STEPS|$2|" -e "s|CKPT|$WORK/$1/ckpt|" -e "s|LOGS|$WORK/$1/logs|" config.json \
		>"$1.json"
	start_pod ps-0 ps - -- ps --config "$1.json" --stats-every 0
	start_pod chief-0 chief 0 -- train --config "$1.json" --no-progress-line
	start_pod worker-0 worker 0 -- train --config "$1.json" --no-progress-line
	start_pod worker-1 worker 1 -- train --config "$1.json" --no-progress-line
}

# ---- 1. the whole job -------------------------------------------------------
t0=$(date +%s)
run_job full 300
for p in chief-0 worker-0 worker-1 ps-0; do
	wait_exit $p 120
	[ "$rc" = 0 ] || fail "job 1: $p exited $rc"
	mv "$p.log" "full-$p.log"
done
grep -qE "ps 0/1: listening on tcp://10\.244\.7\.10:2222 \(CURVE\).*3 workers" full-ps-0.log ||
	fail "job 1: the server did not listen on the pod port for 3 workers"
grep -q "training done; the parameter servers were told to shut down" full-chief-0.log ||
	fail "job 1: the chief did not shut the servers down"
grep -q "shut down by the chief" full-ps-0.log || fail "job 1: ps-0 was not shut down by the chief"
[ -f full/ckpt/step-300/DONE ] || fail "job 1: no complete checkpoint of step 300"
last=$(grep -oE "trained 300 steps: loss [0-9.]+" full-chief-0.log) || fail "job 1: the chief did not train 300 steps"
# it learned: chance on 10 classes is a loss of 2.30
awk -v l="${last##* }" 'BEGIN { exit !(l < 1.5) }' || fail "job 1: did not learn ($last)"
echo "job 1: $last, on 1 server + chief + 2 workers in $(($(date +%s) - t0)) s"

# ---- 2. worker-1's link cut mid-run -------------------------------------------
t0=$(date +%s)
run_job cut 400
for ((i = 0; i < 600; i++)); do
	grep -qE "step +1[0-9][0-9]/400" chief-0.log 2>/dev/null && break
	sleep 0.1
done
grep -qE "step +1[0-9][0-9]/400" chief-0.log || fail "job 2: the chief did not reach step 100 within 60 s"
netns_cut worker-1
echo "job 2: worker-1's link cut at $(grep -oE 'step +[0-9]+/400' chief-0.log | tail -1)"
for p in chief-0 worker-0 ps-0; do
	wait_exit $p 150
	[ "$rc" = 0 ] || fail "job 2: $p exited $rc with worker-1 cut off"
done
grep -q "worker 2 silent for .* declared dead" ps-0.log ||
	fail "job 2: the server did not declare worker-1 (trainer rank 2) dead"
[ -f cut/ckpt/step-400/DONE ] || fail "job 2: no complete checkpoint of step 400"
wait_exit worker-1 60
[ "$rc" = 138 ] || fail "job 2: the cut worker exited $rc, want 138 (transient)"
last=$(grep -oE "trained 400 steps: loss [0-9.]+" chief-0.log) || fail "job 2: the chief did not train 400 steps"
echo "ok: job 2 ($last) finished without worker-1 in $(($(date +%s) - t0)) s; worker-1 exited 138"
