# test_emulated_cluster.sh: 4 sync workers and 2 parameter servers, each in
# its own network namespace with a shaped 100 Mbit/s link (`weft launch
# --link`), end bitwise equal to one process with --accumulate 4: the
# servers add the workers' gradients in worker order, so the network's
# timing never changes a result; nor does priority by layer
# (ps.priority_kb), which only changes the order pushes and replies leave
# in. Skips (77) where network namespaces cannot
# be made (not root, no iproute2).
. "$WEFT_SRC/tests/ps/lib.sh"
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
	echo "SKIP: needs root and iproute2 (ip, tc) for network namespaces"
	exit 77
fi
ns=weft-test-$$
if ! ip netns add "$ns" 2>/dev/null; then
	echo "SKIP: this machine does not allow network namespaces"
	exit 77
fi
ip netns del "$ns"
make_synth train.h5 512 16 3
export WEFT_PS_CHUNK_BYTES=65536 # several chunks on each server
cat >c.json <<JSON
{"model": {"name": "smallcnn"}, "data": {"train": "train.h5", "augment": true},
 "train": {"batch_size": 16, "steps": 10, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9,
               "schedule": {"name": "cosine", "warmup_steps": 2}},
 "checkpoint": {"every_steps": 5}, "log": {"every_steps": 5}}
JSON
"$WEFT" train --config c.json --device cpu --threads 1 --accumulate 4 \
	--set checkpoint.dir=one/ckpt --set log.dir=one/logs >one.log 2>&1 ||
	fail "the --accumulate 4 run failed"
"$WEFT" launch --ps 2 --workers 4 --threads 2 --device cpu --config c.json --insecure \
	--link 100mbit --set checkpoint.dir=net/ckpt --set log.dir=net/logs >net.log 2>&1 ||
	fail "launch --link 100mbit failed"
tag=$(sed -n 's/^\[launch\] emulated network \(wf[0-9]*\):.*/\1/p' net.log)
[ -n "$tag" ] || fail "launch did not use the emulated network"
grep -q '"10.213.0.1:2222"' net.log || fail "TF_CONFIG does not name the namespaces' addresses"
"$WEFT" launch --ps 2 --workers 4 --threads 2 --device cpu --config c.json --insecure \
	--link 100mbit --set ps.priority_kb=16 --set checkpoint.dir=prio/ckpt \
	--set log.dir=prio/logs >prio.log 2>&1 || fail "launch --link 100mbit with ps.priority_kb failed"
grep -q "mode sync, priority by layer" prio.log || fail "the workers did not say priority by layer"
for step in 5 10; do
	"$WEFT" inspect --model one/ckpt/step-$step/model.h5 --dump >one.txt
	for run in net prio; do
		"$WEFT" inspect --model $run/ckpt/step-$step/model.h5 --dump >$run.txt
		python3 "$WEFT_SRC/tests/trainer/compare_dump.py" $run.txt one.txt 0 ||
			fail "step $step: the emulated cluster ($run) differs from --accumulate 4"
	done
done
# the namespaces and the bridge are gone with the launcher
! ip netns list | grep -q "^$tag-" || fail "namespaces left behind: $(ip netns list)"
! ip link show "${tag}b" >/dev/null 2>&1 || fail "bridge ${tag}b left behind"
echo ok
