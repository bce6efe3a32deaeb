#!/usr/bin/env bash
# weft-serve against the real clients: tritonclient (every HTTP call),
# Triton's perf_analyzer, TF Serving's REST examples with curl, a TF Serving
# and a Triton command line, many models from a model config file edited
# under load, and load/unload through the repository API. The clients come
# from the cached venv of scripts/client-venv.sh (skipped, exit 77, only
# where PyPI cannot be reached). Checks live in clients_test.py.
set -euo pipefail
: "${WEFT_SERVE:?set by ctest}" "${WEFT_SERVE_TOOL:?set by ctest}"
here="$(cd "$(dirname "$0")" && pwd)"
venv="$("$here/../../scripts/client-venv.sh")" || exit $?
command -v curl >/dev/null || { echo "skip: curl not found"; exit 77; }
exec "$venv/bin/python" "$here/clients_test.py"
