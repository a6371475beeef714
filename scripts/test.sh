#!/usr/bin/env bash
# Builds tccd and runs the whole test suite with ctest. Exits non-zero on any
# failure; the last lines are ctest's summary.
#   scripts/test.sh            everything
#   scripts/test.sh -L unit    only one label (unit, integration, sim, drill)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
build_dir=${TCC_BUILD_DIR:-build}
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" "$@"
