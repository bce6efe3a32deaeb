#!/usr/bin/env bash
# Installs the dependencies (idempotent) and builds weft into ${BUILD:-build}.
# Extra arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
BUILD=${BUILD:-build}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" "$@" >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
