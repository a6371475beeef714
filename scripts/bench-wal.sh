#!/usr/bin/env bash
# Benchmarks the WAL on this machine's disk (durability: fsync on): raw
# fdatasync appends, durable appends from 1/8/64/256 callers, the same with
# every fsync delayed by 1 ms, and the recovery scan of 100,000 unfinished
# transactions. Builds wal_bench in Release into build-bench/ (or
# $TCC_BENCH_BUILD_DIR). The last line is the summary:
#   wal-bench: raw_fdatasync_per_s=N raw_p50_us=N single_p50_us=N
#     appends_per_s_64=N appends_per_s_256=N slow_fsync_appends_per_s_256=N
#     recovery_scan_100k_s=N
#   scripts/bench-wal.sh [seconds per run, default 2] [runs, default 3]
# Each durable figure is the run with the median throughput of its runs.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${TCC_BENCH_BUILD_DIR:-build-bench}
seconds=${1:-2}
runs=${2:-3}
scripts/install-deps.sh >&2
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build_dir" -j "$(nproc)" --target wal_bench >&2
data_dir="$build_dir/wal-bench-data"
out=$("$build_dir/tests/wal/wal_bench" "$data_dir" "$seconds" "$runs")
summary=$(printf '%s\n' "$out" | tail -n 1)
printf '%s\n' "$out" | sed '$d'

# The targets (issue 3), judged on this run's own raw fdatasync figures.
value() { printf '%s\n' "$summary" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
raw=$(value raw_fdatasync_per_s)
raw_p50=$(value raw_p50_us)
single_p50=$(value single_p50_us)
a256=$(value appends_per_s_256)
slow256=$(value slow_fsync_appends_per_s_256)
check() {  # name, condition (awk), detail
  if awk "BEGIN { exit !($2) }"; then
    echo "target met:     $1 ($3)"
  else
    echo "target MISSED:  $1 ($3)"
  fi
}
check "256 callers >= 10x raw fdatasync" "$a256 >= 10 * $raw" \
  "$a256 vs $raw/s"
check "single-caller p50 <= 2x raw p50" "$single_p50 <= 2 * $raw_p50" \
  "$single_p50 vs $raw_p50 us"
check "slow fsync, 256 callers >= 50000/s" "$slow256 >= 50000" \
  "$slow256/s"
printf '%s\n' "$summary"
