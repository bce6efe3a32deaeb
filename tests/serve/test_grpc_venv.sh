#!/usr/bin/env bash
# test_grpc_venv.sh: makes (once) and prints the cached venv of the real gRPC
# clients: tritonclient[all]==2.46.0 (tritonclient.grpc, perf_analyzer) and
# TF Serving's published stubs (tensorflow-serving-api) with the TensorFlow
# protos from tensorflow-protobuf instead of all of TensorFlow (both --no-deps:
# the stubs only import tensorflow.core.*_pb2). Location convention shared
# with scripts/client-venv.sh: ${WEFT_VENV_DIR:-$HOME/.cache/weft}/clients.
# Exit 77 (ctest: skipped) when PyPI cannot be reached and no venv exists.
set -u
VENV="${WEFT_VENV_DIR:-$HOME/.cache/weft}/clients"
check() {
	"$VENV/bin/python" - <<'PY' 2>/dev/null
import tritonclient.grpc, tritonclient.http
from tensorflow_serving.apis import prediction_service_pb2_grpc, model_service_pb2_grpc
from tensorflow_serving.apis import predict_pb2
from tensorflow.core.framework import tensor_pb2
predict_pb2.PredictRequest().inputs["input"].dtype = 1  # maps work
PY
}
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9
if [ -x "$VENV/bin/python" ] && check; then
	echo "$VENV"
	exit 0
fi
if ! timeout 20 python3 -m pip download --no-deps -q -d /tmp/weft-pypi-probe.$$ six >/dev/null 2>&1; then
	rm -rf /tmp/weft-pypi-probe.$$
	echo "SKIP: PyPI unreachable and no client venv at $VENV" >&2
	exit 77
fi
rm -rf /tmp/weft-pypi-probe.$$
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" >&2 || exit 1
PIP="$VENV/bin/python -m pip install -q --disable-pip-version-check"
# protobuf 3.20.3: the last release that loads both tritonclient 2.46's
# generated code (protobuf<5) and TF Serving 2.7's (made before protobuf 4).
$PIP "tritonclient[all]==2.46.0" "protobuf==3.20.3" grpcio numpy nvidia-cuda-runtime-cu12 >&2 || exit 1
# TF Serving 2.7's stubs with TF 2.7's protos (later tensorflow-protobuf
# releases lack tensorflow/tsl, which later stubs import).
$PIP --no-deps tensorflow-protobuf==2.7.0 tensorflow-serving-api==2.7.4 >&2 || exit 1
check || { echo "client venv at $VENV does not import the clients" >&2; exit 1; }
echo "$VENV"
