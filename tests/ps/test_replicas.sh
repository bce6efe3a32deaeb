# test_replicas.sh: with ps.replicas 2 a parameter server killed with
# SIGKILL mid-run costs nothing: the workers move its group to the backup
# within ps.server_timeout, the job goes on from the step it was at (no
# rollback event, no "continues at step" resync), the restarted server joins
# its groups again by state transfer while training runs, and the job ends
# exactly where the unkilled run ends (sync: the final loss and eval
# accuracy bitwise equal), its port free again (launch picks ports outside
# the ephemeral range). Both servers are killed in turn (ps 0: the
# primary of group 0; ps 1: the primary of group 1 and the backup of 0).
. "$WEFT_SRC/tests/ps/lib.sh"
mkdir -p data
make_synth data/train.h5 2000 16 1
make_synth data/eval.h5 500 16 2
args=(--ps 2 --workers 2 --threads 2 --device cpu --config "$WEFT_SRC/configs/synth-smallcnn.json"
	--set data.train=data/train.h5 --set data.eval=data/eval.h5 --set train.steps=300
	--set train.eval_every_steps=300 --set checkpoint.every_steps=50 --set log.every_steps=20
	--set ps.chunk_bytes=65536 --set ps.replicas=2 --set ps.server_timeout=1)
"$WEFT" launch "${args[@]}" --set checkpoint.dir=ref/ckpt --set log.dir=ref/logs >ref.log 2>&1 ||
	fail "the unkilled run failed"
last() { tail -1 "$1" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["step"], d["loss"], d["eval_accuracy"])'; }
want=$(last ref/logs/metrics.jsonl)
# the servers' ports lie outside the ephemeral range, so that no connection
# on the machine can hold a killed server's port when it restarts
read -r lo hi </proc/sys/net/ipv4/ip_local_port_range
for p in $(grep -oE 'listening on tcp://127.0.0.1:[0-9]+' ref.log | sed 's/.*://'); do
	[ "$p" -lt "$lo" ] || [ "$p" -gt "$hi" ] || fail "ps port $p is in the ephemeral range $lo-$hi"
done
for victim in 0 1; do
	name=kill$victim
	export WEFT_EVENTS=$WORK/$name.events.jsonl
	launch_bg $name.log "${args[@]}" --set checkpoint.dir=$name/ckpt --set log.dir=$name/logs
	wait_for $name.log '\[worker:1\] step +1[0-9]{2}/' 60
	kill -9 "$(pid_of ps:$victim)"
	rc=0
	wait_launch 120 || rc=$?
	[ $rc = 0 ] || fail "ps $victim killed: launch exited $rc"
	[ "$(events count rollback)" = 0 ] || fail "ps $victim killed: the job rolled back"
	! grep -q "continues at step" $name.log || fail "ps $victim killed: a worker re-synchronised"
	[ "$(events count ps_primary)" -ge 1 ] || fail "ps $victim killed: no backup took over"
	[ "$(events count ps_joined)" -ge 1 ] || fail "ps $victim killed: the restarted server did not join"
	[ -f $name/ckpt/step-300/DONE ] || fail "ps $victim killed: no complete final checkpoint"
	got=$(last $name/logs/metrics.jsonl)
	[ "$got" = "$want" ] || fail "ps $victim killed: the job ended at '$got', unkilled '$want'"
	echo "ok: ps $victim killed: $(grep -cE 'goes to ps' $name.log) request(s) failed over, ended at '$got'"
done
