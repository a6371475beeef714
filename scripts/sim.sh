#!/usr/bin/env bash
# The deterministic simulation (tests/sim/): builds tcc-sim if needed and runs
# it. Every run ends with
#   sim: seeds=N transactions=N faults=N crashes=N violations=N
# and exits non-zero on a violation, after printing the seed, its drawn
# parameters and the line that replays it.
#   scripts/sim.sh --seed S [--short] [--trace]   replay one seed exactly
#   scripts/sim.sh --seeds N [--first F]          run N seeds
#   scripts/sim.sh --minutes M [--first F]        search for M minutes
#   --short: the CI profile (smaller seeds); --break NAME: a test-only rule
#   breaker (skip-cancel-for-unconfirmed-try, act-before-decision-durable,
#   replayed-rejected-is-success, barrier-skip-anti-hanging).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${TCC_BUILD_DIR:-build}
if [[ ! -f "$build_dir/build.ninja" && ! -f "$build_dir/Makefile" ]]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >&2
fi
cmake --build "$build_dir" -j "${TCC_BUILD_JOBS:-2}" --target tcc-sim >&2
exec "$build_dir/tests/sim/tcc-sim" "$@"
