# test_job_id.sh: the job id of an --insecure job cannot be computed from
# what an outsider sees (the model name and the addresses): `weft launch`
# mixes in a random token per run, every process of the run agrees on it
# (the job trains to the end), and two runs of the same job differ. By hand,
# processes given the same WEFT_JOB_TOKEN agree and an --insecure process
# without one says that its job id is guessable.
. "$WEFT_SRC/tests/ps/lib.sh"
mkdir -p data
make_synth data/train.h5 256 8 1
cat >c.json <<'JSON'
{"model": {"name": "mlp"}, "data": {"train": "data/train.h5"},
 "train": {"batch_size": 16, "steps": 6}, "checkpoint": {"dir": "ckpt"},
 "log": {"dir": "logs"}}
JSON
# the job id weft derived from public values alone: FNV-1a over the model
# name and the ps, chief and worker addresses, each followed by '|'
public_id() { # public_id LOG
	python3 - "$1" <<'PY'
import json, re, sys
log = open(sys.argv[1]).read()
cluster = json.loads("{" + re.search(r'TF_CONFIG cluster: \{("cluster": \{.*?\})', log).group(1) + "}")["cluster"]
h = 14695981039346656037
def fnv(h, s):
    for b in s.encode():
        h = ((h ^ b) * 1099511628211) % 2**64
    return ((h ^ ord("|")) * 1099511628211) % 2**64
h = fnv(h, "mlp")
for role in ("ps", "chief", "worker"):
    for a in cluster.get(role, []):
        h = fnv(h, a)
print("%016x" % (h or 1))
PY
}
job_of() { # job_of LOG: the id the server logged
	grep -oE '\[ps:0\] ps 0 of 1: .*job [0-9a-f]{16}' "$1" | head -1 | grep -oE '[0-9a-f]{16}$'
}
ids=()
for run in 1 2; do
	rm -rf ckpt logs
	launch_bg "run$run.log" --ps 1 --workers 2 --threads 2 --device cpu --insecure --config c.json
	rc=0
	wait_launch 120 || rc=$?
	[ "$rc" = 0 ] || fail "--insecure run $run exited $rc"
	grep -q "every process exited 0" "run$run.log" || fail "run $run: not every process exited 0"
	job=$(job_of "run$run.log")
	pub=$(public_id "run$run.log")
	echo "run $run: job $job, computable from the model and addresses: $pub"
	[ -n "$job" ] || fail "run $run: the server logged no job id"
	[ "$job" != "$pub" ] || fail "run $run: the job id is the public hash of the model name and addresses"
	ids+=("$job")
done
[ "${ids[0]}" != "${ids[1]}" ] || fail "two runs had the same job id"

# by hand: a token in the environment is what every process mixes in
read -r PS_PORT W_PORT < <(free_ports 2)
CLUSTER="\"cluster\": {\"worker\": [\"127.0.0.1:$W_PORT\"], \"ps\": [\"127.0.0.1:$PS_PORT\"]}"
export WEFT_JOB_TOKEN=0123456789abcdef0123456789abcdef
rm -rf ckpt logs
TF_CONFIG="{$CLUSTER, \"task\": {\"type\": \"ps\", \"index\": 0}}" \
	setsid "$WEFT" ps --config c.json --insecure >hand-ps.log 2>&1 &
LAUNCH_PIDS+=("$!")
rc=0
TF_CONFIG="{$CLUSTER, \"task\": {\"type\": \"worker\", \"index\": 0}}" timeout 120 \
	"$WEFT" train --config c.json --device cpu --threads 1 --no-progress-line --insecure \
	--set strategy.name=parameter_server >hand-worker.log 2>&1 || rc=$?
[ "$rc" = 0 ] || fail "by hand with one WEFT_JOB_TOKEN: the worker exited $rc"
if grep -q "WEFT_JOB_TOKEN is not set" hand-ps.log hand-worker.log; then
	fail "warned about a missing token that was set"
fi
unset WEFT_JOB_TOKEN
TF_CONFIG="{$CLUSTER, \"task\": {\"type\": \"ps\", \"index\": 0}}" WEFT_PS_CONNECT_TIMEOUT=1 \
	timeout 10 "$WEFT" ps --config c.json --insecure >notoken.log 2>&1 &
pid=$!
LAUNCH_PIDS+=("$pid")
wait_for notoken.log "WEFT_JOB_TOKEN is not set" 10
echo ok
