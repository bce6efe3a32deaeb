# test_kill_server.sh: a parameter server killed with SIGKILL mid-run is
# restarted by `weft launch`, loads the last complete checkpoint, the chief
# rolls every server and worker back to that step, and the job finishes
# with the eval accuracy of an uninterrupted run (within a point).
. "$WEFT_SRC/tests/ps/lib.sh"
mkdir -p data
make_synth data/train.h5 4000 32 1
make_synth data/eval.h5 1000 32 2
args=(--ps 2 --workers 2 --config "$WEFT_SRC/configs/synth-smallcnn.json"
	--set data.train=data/train.h5 --set data.eval=data/eval.h5 --set train.steps=300
	--set train.eval_every_steps=300 --set checkpoint.every_steps=50 --set log.every_steps=10)
"$WEFT" launch "${args[@]}" --set checkpoint.dir=a/ckpt --set log.dir=a/logs >clean.log 2>&1 ||
	fail "the uninterrupted run failed"
launch_bg launch.log "${args[@]}" --set checkpoint.dir=b/ckpt --set log.dir=b/logs
wait_for launch.log '\[worker:1\] step +120/' 60
grep -q "ps 0: checkpoint step 100 written" launch.log || fail "no checkpoint before the kill"
kill -9 "$(pid_of ps:0)"
rc=0
wait_launch 150 || rc=$?
[ $rc = 0 ] || fail "launch exited $rc"
grep -q "\[ps:0\] ps 0: restored step [1-9]" launch.log || fail "the restarted server did not restore"
grep -q "rolling every server back to step" launch.log || fail "the chief did not roll back"
grep -qE "\[worker:1\] ps: worker 1 continues at step [1-9]" launch.log ||
	fail "worker 1 did not follow the rollback"
[ -f b/ckpt/step-300/DONE ] || fail "no complete final checkpoint"
a=$(eval_accuracy a/logs/metrics.jsonl)
b=$(eval_accuracy b/logs/metrics.jsonl)
python3 -c "import sys; sys.exit(0 if abs($a - $b) <= 0.01 else 1)" ||
	fail "eval accuracy $b after the server restart, $a uninterrupted"
steps=$(python3 -c 'import json,sys; print(len([json.loads(l)["step"] for l in open(sys.argv[1])]) == len(set(json.loads(l)["step"] for l in open(sys.argv[1]))))' b/logs/metrics.jsonl)
[ "$steps" = True ] || fail "metrics.jsonl repeats steps after the rollback"
echo "ok: eval accuracy $b (uninterrupted $a)"
