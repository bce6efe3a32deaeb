#!/usr/bin/env bash
# weft-serve as a Triton deployment sees it, with the real clients of the
# cached venv of scripts/client-venv.sh (skipped, exit 77, only where PyPI
# cannot be reached). Checks live in triton_test.py.
set -euo pipefail
: "${WEFT_SERVE:?set by ctest}" "${WEFT_SERVE_TOOL:?set by ctest}"
here="$(cd "$(dirname "$0")" && pwd)"
venv="$("$here/../../scripts/client-venv.sh")" || exit $?
exec "$venv/bin/python" "$here/triton_test.py"
