#!/usr/bin/env bash
# One drain rule for HTTP and gRPC on SIGTERM, with real clients (python
# http.client keep-alive, grpc futures, tritonclient's stream, a raw HTTP/2
# connection); see drain_rule_test.py. The clients come from a cached venv
# (scripts/client-venv.sh); skipped (77) only when PyPI cannot be reached.
set -euo pipefail
: "${WEFT_SERVE:?set by ctest}" "${WEFT_SERVE_TOOL:?set by ctest}"
here="$(cd "$(dirname "$0")" && pwd)"
venv="$("$here/../../scripts/client-venv.sh")" || exit $?
exec "$venv/bin/python" "$here/drain_rule_test.py"
