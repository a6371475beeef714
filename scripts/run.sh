#!/usr/bin/env bash
# Builds and starts tccd. (Until the daemon lands, tccd prints its version and
# config and exits.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
build_dir=${TCC_BUILD_DIR:-build}
exec "$build_dir/coordinator/tccd" --config config/tccd.yaml "$@"
