#!/usr/bin/env bash
# weft-serve's gRPC APIs with the real clients: tritonclient.grpc (KServe v2
# GRPCInferenceService) and TF Serving's published stubs (PredictionService,
# ModelService), answers compared with the HTTP API of the same server, bad
# and hostile input, a stalled client, SIGTERM. The clients come from a cached
# venv (scripts/client-venv.sh); skipped (77) only when PyPI cannot be reached.
set -euo pipefail
: "${WEFT_SERVE:?set by ctest}" "${WEFT_SERVE_TOOL:?set by ctest}"
here="$(cd "$(dirname "$0")" && pwd)"
venv="$("$here/../../scripts/client-venv.sh")" || exit $?
exec "$venv/bin/python" "$here/test_grpc_clients.py"
