# test_load_cancel.sh: SIGTERM while weft-serve loads a model (its check in
# a child process, then the load itself and its batch plans) ends the server
# at once: the load stops, it does not run to its end first.
. "$WEFT_SRC/tests/trainer/lib.sh"
: "${WEFT_SERVE:?set by ctest}" "${WEFT_SERVE_TOOL:?set by ctest}"
mkdir -p models/1
"$WEFT_SERVE_TOOL" model resnet50 models/1/model.h5 1 32 # 94 MB: seconds to check and load
"$WEFT_SERVE" --model_name m --model_base_path models --rest_api_port 0 --port 0 \
	--grpc_port 0 2>serve.err &
spid=$!
trap 'kill -9 $spid 2>/dev/null || true; wait $spid 2>/dev/null || true; cleanup' EXIT
for _ in $(seq 1 600); do
	grep -q "loading model m version 1" serve.err && break
	kill -0 $spid 2>/dev/null || { cat serve.err; fail "weft-serve ended before loading"; }
	sleep 0.05
done
t0=$(date +%s%N)
kill -TERM $spid
rc=0
wait $spid || rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
cat serve.err
[ $rc = 0 ] || fail "weft-serve exited $rc after SIGTERM, want 0"
grep -q "stopped (the process is stopping)" serve.err || fail "the load was not stopped"
! grep -q "version 1 is available" serve.err || fail "the load ran to its end after SIGTERM"
[ $ms -lt 2000 ] || fail "weft-serve took $ms ms to exit after SIGTERM"
echo "exit $ms ms after SIGTERM"
echo PASS
