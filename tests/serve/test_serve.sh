#!/usr/bin/env bash
# End-to-end test of weft-serve: a real server on a free loopback port, every
# endpoint and error of the TF Serving REST and KServe v2 APIs, /metrics, a
# hot swap under load from weft-bench, and a SIGTERM drain. The checks live in
# serve_test.py (python3 standard library only).
set -euo pipefail
: "${WEFT_SERVE:?set by ctest}" "${WEFT_SERVE_TOOL:?set by ctest}"
command -v python3 >/dev/null || { echo "skip: python3 not found"; exit 77; }
exec python3 "$(dirname "$0")/serve_test.py"
