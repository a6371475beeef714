#!/usr/bin/env bash
# Crash drill of the real processes (tests/drill/drill_main.cc): tccd and
# three bank participants (two RocksDB, one PostgreSQL) under concurrent
# transfers, with faults in turn (failpoint crashes, kill -9, a participant
# killed between commit and reply, SIGSTOP past every timeout, a failing
# fsync, a jumped wall clock), then the invariants. Builds first, starts a
# throwaway PostgreSQL unless TCC_PG_URL is set, stops it at the end.
#
#   scripts/drill.sh                     one minute, random seed
#   scripts/drill.sh --minutes 10        longer
#   scripts/drill.sh --seed 42           replay a seed's schedule
#   scripts/drill.sh --keep              keep logs and data (kept anyway on
#                                        a violation)
#
# The last line is the summary:
#   drill: transactions=N faults=N failpoint=N ... violations=N
#          recovery_p50_ms=N recovery_max_ms=N
# Exit status 0 only without violations.
set -euo pipefail
cd "$(dirname "$0")/.."

args=()
minutes=1
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes=$2; shift ;;
    --seed|--fsync-mode) args+=("$1" "$2"); shift ;;
    --keep) args+=("$1") ;;
    *) echo "usage: $0 [--minutes M] [--seed S] [--fsync-mode auto|strace|failpoint] [--keep]" >&2
       exit 2 ;;
  esac
  shift
done

build_dir=${TCC_BUILD_DIR:-build}
if [ -z "${TCC_SKIP_BUILD:-}" ]; then
  scripts/install-deps.sh
  cmake -S . -B "$build_dir" -G Ninja \
    -DCMAKE_BUILD_TYPE="${TCC_BUILD_TYPE:-RelWithDebInfo}" >/dev/null
  cmake --build "$build_dir" -j "$(nproc)" --target tcc-drill tccd tcc-bank
fi

pg_env=""
cleanup() {
  if [ -n "$pg_env" ]; then scripts/pg.sh stop "$pg_env" >/dev/null 2>&1 || true; rm -f "$pg_env"; fi
}
trap cleanup EXIT
if [ -z "${TCC_PG_URL:-}" ]; then
  pg_env=$(mktemp /tmp/tcc-drill-pg.XXXXXX)
  scripts/pg.sh start "$pg_env" >/dev/null
  # shellcheck disable=SC1090
  . "$pg_env"
fi

"$build_dir/tests/drill/tcc-drill" --minutes "$minutes" --pg-url "$TCC_PG_URL" "${args[@]}"
