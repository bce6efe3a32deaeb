#!/usr/bin/env bash
# A model config applied all or nothing: HandleReloadConfigRequest (TF
# Serving's ModelServiceStub) and edits of --model_config_file; see
# reload_test.py. The clients come from a cached venv (scripts/client-venv.sh);
# skipped (77) only when PyPI cannot be reached.
set -euo pipefail
: "${WEFT_SERVE:?set by ctest}" "${WEFT_SERVE_TOOL:?set by ctest}"
here="$(cd "$(dirname "$0")" && pwd)"
venv="$("$here/../../scripts/client-venv.sh")" || exit $?
exec "$venv/bin/python" "$here/reload_test.py"
