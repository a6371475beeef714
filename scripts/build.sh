#!/usr/bin/env bash
# Configures and builds tccd into build/ (or $TCC_BUILD_DIR), installing the
# dependencies first if any is missing. Used by test.sh and run.sh.
#   TCC_BUILD_TYPE=Release scripts/build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
build_dir=${TCC_BUILD_DIR:-build}
# ccache: paths relative to the checkout, so clones in other folders share
# the cache.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
build_type=${TCC_BUILD_TYPE:-RelWithDebInfo}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" >/dev/null
cmake --build "$build_dir" -j "$(nproc)"
