#!/bin/sh
# peers_venv.sh: the benchmarks' peer engines from PyPI in a cached venv
# (${WEFT_VENV_DIR:-$HOME/.cache/weft}/peers): current torch, torchvision,
# onnx, onnxruntime, openvino, nncf, matplotlib, keras (Keras 3 on torch
# where TensorFlow is not installed: the Keras-made models of
# tests/serve/test_keras_serve.sh). Prints the venv's python on stdout; exits 77
# with a message on stderr when PyPI cannot be reached and no venv exists.
set -u
dir="${WEFT_VENV_DIR:-$HOME/.cache/weft}/peers"
py="$dir/bin/python"
if [ -x "$py" ] && "$py" -c 'import torch, onnxruntime, openvino, onnx' 2>/dev/null; then
	# OpenVINO's int8 peer needs NNCF (added later: venvs made before lack it)
	"$py" -c 'import nncf' 2>/dev/null || "$dir/bin/pip" install -q nncf >&2 ||
		echo "peers_venv: nncf not installable: no OpenVINO int8 peer" >&2
	# bench_cluster.sh's plot (added later too)
	"$py" -c 'import matplotlib' 2>/dev/null || "$dir/bin/pip" install -q matplotlib >&2 ||
		echo "peers_venv: matplotlib not installable: no plots" >&2
	# Keras 3 (added later too)
	KERAS_BACKEND=torch "$py" -c 'import keras, h5py' 2>/dev/null || "$dir/bin/pip" install -q keras h5py >&2 ||
		echo "peers_venv: keras not installable: no Keras-made models" >&2
	echo "$py"
	exit 0
fi
mkdir -p "$(dirname "$dir")"
echo "peers_venv: creating $dir (torch, onnxruntime, openvino from PyPI; a few minutes once)" >&2
python3 -m venv "$dir" >&2 || exit 1
if ! "$dir/bin/pip" install -q torch torchvision onnx onnxscript onnxruntime openvino nncf matplotlib keras h5py >&2; then
	echo "peers_venv: PyPI cannot be reached: no peer engines" >&2
	exit 77
fi
echo "$py"
