#!/usr/bin/env bash
# Triton's system shared memory extension with the real clients:
# tritonclient.http/.grpc and perf_analyzer --shared-memory system (checks in
# shm_clients_test.py). The clients come from a cached venv
# (scripts/client-venv.sh); skipped (77) only when PyPI cannot be reached.
set -euo pipefail
: "${WEFT_SERVE:?set by ctest}" "${WEFT_SERVE_TOOL:?set by ctest}"
here="$(cd "$(dirname "$0")" && pwd)"
venv="$("$here/../../scripts/client-venv.sh")" || exit $?
exec "$venv/bin/python" "$here/shm_clients_test.py"
