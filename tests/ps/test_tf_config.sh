# test_tf_config.sh: `weft train` / `weft ps` with a wrong TF_CONFIG exit at
# once with a status in 1..127 and a message naming the field; a worker with
# no server to reach exits 138 (transient) within its connect timeout.
. "$WEFT_SRC/tests/ps/lib.sh"
make_synth train.h5 64 8 1
cat >c.json <<JSON
{"model": {"name": "mlp"}, "data": {"train": "train.h5"},
 "train": {"batch_size": 8, "steps": 2}, "strategy": {"name": "parameter_server"}}
JSON
# expect_fail TF_CONFIG NEEDLE [weft args...]
expect_fail() {
	local tf=$1 needle=$2 rc=0
	shift 2
	TF_CONFIG=$tf timeout 60 "$WEFT" "$@" >out.txt 2>&1 || rc=$?
	[ $rc -ge 1 ] && [ $rc -le 127 ] || fail "TF_CONFIG=$tf: exit $rc, want 1..127: $(cat out.txt)"
	grep -qF -- "$needle" out.txt || fail "TF_CONFIG=$tf: message does not name '$needle': $(cat out.txt)"
}
ps='"ps": ["127.0.0.1:1"]'
expect_fail '{"cluster": ' "not JSON" train --config c.json
expect_fail '{"task": {"type": "worker"}}' '"cluster"' train --config c.json
expect_fail "{\"cluster\": {$ps, \"worker\": [\"a:1\"]}, \"task\": {\"type\": \"gardener\"}}" \
	"task.type" train --config c.json
expect_fail "{\"cluster\": {$ps, \"worker\": [\"a:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 3}}" \
	"task.index" train --config c.json
expect_fail "{\"cluster\": {$ps, \"worker\": [\"a:1\", \"a:1\"]}, \"task\": {\"type\": \"worker\"}}" \
	"duplicate" train --config c.json
expect_fail '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker"}}' "cluster.ps" \
	train --config c.json
expect_fail "{\"cluster\": {$ps, \"worker\": [\"a:1\"]}, \"task\": {\"type\": \"worker\"}}" \
	"strategy.name" train --config c.json --set strategy.name=local
expect_fail "{\"cluster\": {$ps, \"worker\": [\"a:1\"]}, \"task\": {\"type\": \"worker\"}}" \
	"task.type" ps --config c.json
expect_fail "" "TF_CONFIG" ps --config c.json
# no keys and no --insecure: a permanent error that says what to do
wtf="{\"cluster\": {$ps, \"worker\": [\"127.0.0.1:2\", \"127.0.0.1:3\"]}, \"task\": {\"type\": \"worker\", \"index\": 1}}"
unset WEFT_KEY_DIR
expect_fail "$wtf" "weft keygen --out DIR" train --config c.json
grep -qF -- "--insecure" out.txt || fail "no keys: --insecure not mentioned: $(cat out.txt)"
expect_fail "{\"cluster\": {$ps, \"worker\": [\"a:1\"]}, \"task\": {\"type\": \"ps\"}}" \
	"--key-dir DIR" ps --config c.json
expect_fail "$wtf" "$WORK/server.pub" train --config c.json --key-dir "$WORK"
# a worker whose servers never answer: transient
rc=0
TF_CONFIG="$wtf" WEFT_PS_CONNECT_TIMEOUT=2 timeout 30 "$WEFT" train --config c.json --insecure \
	>out.txt 2>&1 || rc=$?
[ $rc = 138 ] || fail "unreachable servers: exit $rc, want 138: $(cat out.txt)"
grep -q "did not answer" out.txt || fail "unreachable servers: not named: $(cat out.txt)"
echo ok
