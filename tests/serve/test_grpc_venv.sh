#!/usr/bin/env bash
# test_grpc_venv.sh: makes (once) and prints the cached venv of the real gRPC
# clients: tritonclient[all]==2.46.0 (tritonclient.grpc, perf_analyzer) and
# TF Serving's published stubs (tensorflow-serving-api) with TensorFlow's
# protos from tensorflow-protobuf instead of all of TensorFlow (both
# --no-deps: the stubs only import tensorflow.core.*_pb2). The venv is the
# shared client venv, ${WEFT_VENV_DIR:-$HOME/.cache/weft}/clients: where
# scripts/client-venv.sh exists it makes the venv and this script adds the
# gRPC packages on top (under the same lock), else this script makes it.
# Exit 77 (ctest: skipped) when PyPI cannot be reached and the venv lacks them.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
shared="$here/../../scripts/client-venv.sh"
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
if [ -x "$shared" ]; then
	VENV="$("$shared")" || exit $?
fi
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9
if [ -x "$VENV/bin/python" ] && check; then
	echo "$VENV"
	exit 0
fi
if ! timeout 20 python3 -c 'import urllib.request; urllib.request.urlopen("https://pypi.org/simple/tensorflow-serving-api/", timeout=15)' >/dev/null 2>&1; then
	echo "SKIP: PyPI (https://pypi.org) cannot be reached and the client venv $VENV lacks the gRPC clients" >&2
	exit 77
fi
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" >&2 || exit 1
PIP="$VENV/bin/python -m pip install -q --disable-pip-version-check"
# protobuf 3.20.3: the last release that loads both tritonclient 2.46's
# generated code (it needs protobuf<5) and TF Serving 2.7's (made before
# protobuf 4; later stubs import tensorflow.tsl, which no light package has).
$PIP "tritonclient[all]==2.46.0" "protobuf==3.20.3" grpcio "numpy<2" \
	"nvidia-cuda-runtime-cu12==12.4.127" >&2 || exit 1
$PIP --no-deps tensorflow-protobuf==2.7.0 tensorflow-serving-api==2.7.4 >&2 || exit 1
check || {
	echo "client venv at $VENV does not import the gRPC clients" >&2
	exit 1
}
echo "$VENV"
