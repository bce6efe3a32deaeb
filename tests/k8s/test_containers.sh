# test_containers.sh: what can be checked of the container files without a
# container engine (check_containers.py): multi-stage, non-root, no model
# or data baked in, the binaries they copy are the ones this build makes,
# the runtime packages provide every library those binaries link (and
# weft-serve links no MPI, NCCL or ZeroMQ); then the images' entrypoints
# run: `weft --help`, and weft-serve with its default arguments (a model
# directory of ours) answers /v2/health/live and drains on SIGTERM.
set -euo pipefail
: "${WEFT_SRC:?set WEFT_SRC to the source tree}"
: "${WEFT_BUILD:?set WEFT_BUILD to the build directory}"
python3 "$WEFT_SRC/tests/k8s/check_containers.py" "$WEFT_SRC" "$WEFT_BUILD"

"$WEFT_BUILD/weft" --help >/dev/null || { echo "FAIL: weft --help (the train image's CMD)"; exit 1; }
WORK=$(mktemp -d /tmp/weft-containers-test.XXXXXX)
PID=""
trap '[ -n "$PID" ] && kill -9 "$PID" 2>/dev/null; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/models/default"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# the serving images' ENTRYPOINT + CMD, with our model directory and port
"$WEFT_BUILD/weft-serve" --model_name default --model_base_path "$WORK/models/default" \
	--rest_api_port "$port" >"$WORK/serve.log" 2>&1 &
PID=$!
for ((i = 0; i < 100; i++)); do
	curl -sf "http://127.0.0.1:$port/v2/health/live" >/dev/null 2>&1 && break
	sleep 0.1
done
curl -sf "http://127.0.0.1:$port/v2/health/live" >/dev/null ||
	{ echo "FAIL: weft-serve's default command is not live: $(cat "$WORK/serve.log")"; exit 1; }
kill -TERM "$PID"
rc=0
wait "$PID" || rc=$?
PID=""
[ $rc = 0 ] || { echo "FAIL: weft-serve exited $rc on SIGTERM: $(cat "$WORK/serve.log")"; exit 1; }
echo ok
