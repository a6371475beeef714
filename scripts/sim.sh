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
#   write-without-fence, takeover-without-cas, head-without-cas,
#   unknown-txn-as-refused,
#   lease-trust-from-receipt, restart-adopts-old-owner-key (and the core's).
#   The long swarm: scripts/sim.sh --cluster --seeds 100000 --jobs 2
#   --jobs J (with --seeds N [--first F]): J processes over disjoint seed
#   ranges, their summary lines summed into one (each seed still runs alone,
#   deterministically; a violation in any range fails the run).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${TCC_BUILD_DIR:-build}
if [[ ! -f "$build_dir/build.ninja" && ! -f "$build_dir/Makefile" ]]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >&2
fi
cmake --build "$build_dir" -j "${TCC_BUILD_JOBS:-2}" --target tcc-sim >&2
sim="$build_dir/tests/sim/tcc-sim"
jobs=1 seeds=0 first=1 rest=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --jobs) jobs=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --first) first=$2; shift 2 ;;
    *) rest+=("$1"); shift ;;
  esac
done
if [[ $jobs -le 1 || $seeds -eq 0 ]]; then
  args=("${rest[@]}")
  [[ $seeds -ne 0 ]] && args+=(--seeds "$seeds")
  [[ $first -ne 1 ]] && args+=(--first "$first")
  exec "$sim" "${args[@]}"
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
start=$SECONDS
per=$(( (seeds + jobs - 1) / jobs ))
pids=()
for ((j = 0; j < jobs; ++j)); do
  n=$(( seeds - j * per < per ? seeds - j * per : per ))
  [[ $n -le 0 ]] && break
  "$sim" "${rest[@]}" --first $(( first + j * per )) --seeds "$n" \
    > "$out/$j" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
grep -hv '^sim: seeds=' "$out"/* || true
echo "sim: $jobs jobs, $(( SECONDS - start )) s"
cat "$out"/* | awk '/^sim: seeds=/ {
    for (i = 2; i <= NF; ++i) { split($i, kv, "="); sum[kv[1]] += kv[2] }
  } END {
    printf "sim: seeds=%d transactions=%d faults=%d crashes=%d violations=%d\n",
      sum["seeds"], sum["transactions"], sum["faults"], sum["crashes"],
      sum["violations"] }'
exit $status
