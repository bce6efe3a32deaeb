#!/usr/bin/env bash
# The README's test command: set everything up, build, run every test
# (unit, integration with real processes; gpu tests skip where no GPU is usable).
# Extra arguments go to ctest (e.g. -L unit, -R model_).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd "${BUILD:-build}"
ctest --output-on-failure -j"$(nproc)" "$@"
