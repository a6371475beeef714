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
#   replayed-rejected-is-success, barrier-skip-anti-hanging,
#   resume-skips-unknown-try-lookup).
#   --cluster: the cluster simulation (issue 23, tests/sim/cluster_simulation.h):
#   2-4 nodes, each the real driver over its fenced log, over a modelled
#   etcd-like store with leases; node crashes, pauses past the lease, lost
#   keep-alives, store outages and leader changes, node-store partitions,
#   late Txns, stale reads. The same summary line. Its breakers:
#   write-without-fence, takeover-without-cas, unknown-txn-as-refused,
#   lease-trust-from-receipt, restart-adopts-old-owner-key (and the core's).
#   The long swarm: scripts/sim.sh --cluster --seeds 100000
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${TCC_BUILD_DIR:-build}
if [[ ! -f "$build_dir/build.ninja" && ! -f "$build_dir/Makefile" ]]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >&2
fi
cmake --build "$build_dir" -j "${TCC_BUILD_JOBS:-2}" --target tcc-sim >&2
exec "$build_dir/tests/sim/tcc-sim" "$@"
