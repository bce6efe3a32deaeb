#!/usr/bin/env bash
# A Keras model's own input name and preprocessing (Rescaling, Normalization) in
# weft-serve: Keras (the peers venv, bench/peers_venv.sh) makes the model and
# the answers to compare with, the real clients (scripts/client-venv.sh) send
# the requests. Skipped (77), saying why, where neither venv can be had or
# Keras cannot be imported (keras_model.py make says so). Checks live in
# keras_serve_test.py.
set -euo pipefail
: "${WEFT:?set by ctest}" "${WEFT_SERVE:?set by ctest}" "${WEFT_SRC:?set by ctest}"
here="$(cd "$(dirname "$0")" && pwd)"
venv="$("$here/../../scripts/client-venv.sh")" || exit $?
kpy="$("$WEFT_SRC/bench/peers_venv.sh")" || exit $?
export WEFT_KERAS_PYTHON="$kpy"
exec "$venv/bin/python" "$here/keras_serve_test.py"
