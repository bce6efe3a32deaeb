# test_tfconfig.sh: `weft tfconfig` as a user in a pod would run it: the
# TF_CONFIG derived from the pod's identity (Indexed Job index, StatefulSet
# ordinal of the host name, services, counts), the forms Kubeflow writes
# (TFJob's injected TF_CONFIG with port 2222, its sparse worker map; MPIJob's
# OMPI_* variables), and wrong variables failing with exit 1..127 and a
# message that names them, also from `weft train`.
set -euo pipefail
: "${WEFT:?set WEFT to the weft binary}"
: "${WEFT_SRC:?set WEFT_SRC to the source tree}"
unset TF_CONFIG OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK \
	JOB_COMPLETION_INDEX WEFT_ROLE WEFT_INDEX WEFT_DOMAIN WEFT_PORT
fail() {
	echo "FAIL: $*" >&2
	exit 1
}
# field JSON PYEXPR: a value of `weft tfconfig --json`'s object j
field() {
	python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(json.dumps(eval(sys.argv[2])))' "$1" "$2"
}
# expect JSON PYEXPR WANT
expect() {
	local got
	got=$(field "$1" "$2")
	[ "$got" = "$3" ] || fail "$2: got $got, want $3 (from $1)"
}
BASE=(WEFT_NUM_PS=2 WEFT_NUM_WORKERS=2 WEFT_NUM_CHIEF=1 WEFT_PS_SERVICE=ps
	WEFT_WORKER_SERVICE=worker WEFT_CHIEF_SERVICE=chief WEFT_PORT=2222)

# ---- an Indexed Job's worker (k8s/base/train/worker.yaml)
j=$(env "${BASE[@]}" WEFT_ROLE=worker JOB_COMPLETION_INDEX=1 "$WEFT" tfconfig --json)
expect "$j" 'j["source"]' '"pod"'
expect "$j" '[j["role"], j["index"], j["rank"], j["world_size"], j["is_chief"]]' '["worker", 1, 2, 3, false]'
expect "$j" 'j["tf_config"]' '{"cluster": {"chief": ["chief-0.chief:2222"], "worker": ["worker-0.worker:2222", "worker-1.worker:2222"], "ps": ["ps-0.ps:2222", "ps-1.ps:2222"]}, "task": {"type": "worker", "index": 1}}'
# the line to export, and the human form
tf=$(env "${BASE[@]}" WEFT_ROLE=worker JOB_COMPLETION_INDEX=1 "$WEFT" tfconfig --tf-config)
[ "$(field "$tf" 'j["task"]')" = '{"type": "worker", "index": 1}' ] || fail "--tf-config: $tf"
out=$(env "${BASE[@]}" WEFT_ROLE=worker JOB_COMPLETION_INDEX=1 "$WEFT" tfconfig)
echo "$out" | grep -qF "source: WEFT_ROLE=worker, index from JOB_COMPLETION_INDEX=1 (Indexed Job)" ||
	fail "human form: $out"
# the TF_CONFIG weft derives is one `weft tfconfig` reads back unchanged
j2=$(TF_CONFIG=$tf "$WEFT" tfconfig --json)
expect "$j2" '[j["source"], j["role"], j["index"], j["rank"]]' '["tf_config", "worker", 1, 2]'

# ---- a StatefulSet's server: the index is the ordinal of the host name
if unshare --uts true 2>/dev/null; then
	j=$(env "${BASE[@]}" WEFT_ROLE=ps unshare --uts sh -c 'hostname ps-1 && exec "$@"' sh \
		"$WEFT" tfconfig --json)
	expect "$j" '[j["role"], j["index"], j["is_chief"]]' '["ps", 1, false]'
	expect "$j" '"StatefulSet ordinal" in j["origin"] and "ps-1" in j["origin"]' 'true'
	# a StatefulSet named otherwise than its service: WEFT_PS_NAME
	j=$(env "${BASE[@]}" WEFT_ROLE=ps WEFT_PS_NAME=weft-ps unshare --uts \
		sh -c 'hostname weft-ps-0 && exec "$@"' sh "$WEFT" tfconfig --json)
	expect "$j" 'j["tf_config"]["cluster"]["ps"]' '["weft-ps-0.ps:2222", "weft-ps-1.ps:2222"]'
	expect "$j" 'j["index"]' '0'
	# a host name of another form is not an ordinal: the error says what to set
	rc=0
	out=$(env "${BASE[@]}" WEFT_ROLE=ps unshare --uts sh -c 'hostname node-7 && exec "$@"' sh \
		"$WEFT" tfconfig 2>&1) || rc=$?
	[ $rc -ge 1 ] && [ $rc -le 127 ] || fail "host node-7: exit $rc: $out"
	echo "$out" | grep -q 'this host is "node-7": set WEFT_PS_NAME' || fail "host node-7: $out"
else
	echo "note: no UTS namespace here: the host-name ordinal is not checked"
fi

# ---- the chief (an Indexed Job of one), and a lone chief without any index
j=$(env "${BASE[@]}" WEFT_ROLE=chief "$WEFT" tfconfig --json)
expect "$j" '[j["role"], j["index"], j["rank"], j["is_chief"]]' '["chief", 0, 0, true]'

# ---- Kubeflow TFJob: the operator injects TF_CONFIG (port 2222, "cloud")
TFJOB='{"cluster":{"chief":["weft-chief-0.default.svc:2222"],"ps":["weft-ps-0.default.svc:2222","weft-ps-1.default.svc:2222"],"worker":["weft-worker-0.default.svc:2222","weft-worker-1.default.svc:2222"]},"task":{"type":"ps","index":1},"environment":"cloud"}'
# it wins over the pod variables
j=$(env "${BASE[@]}" WEFT_ROLE=worker TF_CONFIG="$TFJOB" "$WEFT" tfconfig --json)
expect "$j" '[j["source"], j["role"], j["index"], j["world_size"]]' '["tf_config", "ps", 1, 3]'
expect "$j" 'j["tf_config"]' "$(python3 -c 'import json,sys; print(json.dumps(json.loads(sys.argv[1])))' "$TFJOB")"
TFJOB_W=${TFJOB/\"type\":\"ps\",\"index\":1/\"type\":\"worker\",\"index\":0}
j=$(TF_CONFIG="$TFJOB_W" "$WEFT" tfconfig --json)
expect "$j" '[j["role"], j["index"], j["rank"], j["is_chief"]]' '["worker", 0, 1, false]'
# the sparse worker map (configs/tf_config-kubeflow-sparse.json): one
# worker's view, sized by WEFT_NUM_WORKERS, refused without it
SPARSE=$(cat "$WEFT_SRC/configs/tf_config-kubeflow-sparse.json")
j=$(WEFT_NUM_WORKERS=3 TF_CONFIG="$SPARSE" "$WEFT" tfconfig --json)
expect "$j" '[j["role"], j["index"], j["tf_config"]["cluster"]["worker"]]' '["worker", 1, {"1": "tfjob-worker-1.ns.svc:2222"}]'
expect "$j" '[j["rank"], j["world_size"]]' '[2, 4]'
rc=0
out=$(TF_CONFIG="$SPARSE" "$WEFT" tfconfig --json 2>&1) || rc=$?
[ "$rc" -ge 1 ] && [ "$rc" -le 127 ] || fail "sparse map without WEFT_NUM_WORKERS: exit $rc, want 1..127"
echo "$out" | grep -q "set WEFT_NUM_WORKERS" || fail "sparse map without WEFT_NUM_WORKERS: $out"

# ---- Kubeflow MPIJob: mpirun's OMPI_* variables, no TF_CONFIG
j=$(OMPI_COMM_WORLD_RANK=3 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=0 "$WEFT" tfconfig --json)
expect "$j" '[j["source"], j["rank"], j["world_size"], j["local_rank"], j["is_chief"], j["tf_config"]]' \
	'["mpi", 3, 4, 0, false, null]'
rc=0
out=$(OMPI_COMM_WORLD_RANK=3 OMPI_COMM_WORLD_SIZE=4 "$WEFT" tfconfig --tf-config 2>&1) || rc=$?
[ $rc -ge 1 ] && [ $rc -le 127 ] && echo "$out" | grep -q "no TF_CONFIG" || fail "mpi --tf-config: $rc $out"

# ---- wrong variables: exit 1..127 naming the variable, from tfconfig and from train
# expect_fail NEEDLE VAR=VALUE... -- WEFT_ARGS...
expect_fail() {
	local needle=$1 vars=() rc=0 out
	shift
	while [ "$1" != -- ]; do
		vars+=("$1")
		shift
	done
	shift
	out=$(env "${BASE[@]}" "${vars[@]}" timeout 20 "$WEFT" "$@" 2>&1) || rc=$?
	[ $rc -ge 1 ] && [ $rc -le 127 ] || fail "${vars[*]}: exit $rc, want 1..127: $out"
	echo "$out" | grep -qF -- "$needle" || fail "${vars[*]}: message does not name $needle: $out"
}
expect_fail WEFT_ROLE WEFT_ROLE=gardener -- tfconfig
expect_fail "WEFT_NUM_WORKERS=2" WEFT_ROLE=worker JOB_COMPLETION_INDEX=5 -- tfconfig
expect_fail WEFT_NUM_CHIEF WEFT_ROLE=chief WEFT_NUM_CHIEF=3 -- tfconfig
expect_fail WEFT_PS_SERVICE WEFT_ROLE=chief WEFT_PS_SERVICE=Ps_Servers -- tfconfig
WORK=$(mktemp -d /tmp/weft-tfconfig-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
"$WEFT" data synth --out "$WORK/train.h5" --count 64 --size 8 --seed 1 >/dev/null
cat >"$WORK/c.json" <<JSON
{"model": {"name": "mlp"}, "data": {"train": "$WORK/train.h5"},
 "train": {"batch_size": 8, "steps": 2}, "strategy": {"name": "parameter_server"}}
JSON
expect_fail WEFT_NUM_PS WEFT_ROLE=worker WEFT_NUM_PS=0 JOB_COMPLETION_INDEX=0 -- \
	train --config "$WORK/c.json"
expect_fail "JOB_COMPLETION_INDEX=9" WEFT_ROLE=worker JOB_COMPLETION_INDEX=9 -- \
	train --config "$WORK/c.json"
expect_fail "task.type is worker" WEFT_ROLE=worker JOB_COMPLETION_INDEX=0 -- \
	ps --config "$WORK/c.json"
echo ok
