#!/usr/bin/env bash
# weft-serve hardening (jsonparse): see hardening_test.py (python3 standard library;
# real server on loopback, stops by itself, every process killed on exit).
set -euo pipefail
: "${WEFT_SERVE:?set by ctest}" "${WEFT_SERVE_TOOL:?set by ctest}"
command -v python3 >/dev/null || { echo "skip: python3 not found"; exit 77; }
exec python3 "$(dirname "$0")/hardening_test.py" jsonparse
