#!/usr/bin/env bash
# The operators' recovery drill: tccd is killed (kill -9) under load and
# restarted; tccctl shows the transactions it finds in flight being resolved;
# then every transaction must be final and the banks must hold the money they
# started with, nothing frozen.
#
#   scripts/recovery-drill.sh          build, then the drill (< 2 minutes)
#   scripts/recovery-drill.sh --keep   keep the logs and data (kept anyway
#                                      on a violation; the path is printed)
#   scripts/recovery-drill.sh --etcd   the same with tccd in cluster mode on
#                                      etcd (DESIGN.md section 14): the etcd
#                                      of TCC_ETCD_ENV_FILE (ctest's fixture)
#                                      or TCC_ETCD_ENDPOINTS, else one this
#                                      script starts (scripts/etcd.sh) and
#                                      stops; a cluster of its own under a
#                                      fresh key prefix
#
# Starts two bank participants (RocksDB) and tccd (RocksDB WAL, fsync on,
# admin token file generated here, mode 0600) on 127.0.0.1 with ports the OS
# picks, drives load (tcc-bench: a closed loop of transfers, plus a backlog of
# transfers registered and left to tccd), kill -9s tccd mid-load, restarts it
# on the same port, polls `tccctl status` until nothing is in flight and
# prints the recovery time, then the final checks with tccctl and
# tcc-bank-demo. Every process it started is stopped on exit. The last line:
#   recovery-drill: PASS|FAIL in_flight_at_kill=N recovered=N recovery_ms=N
#                   confirmed=N cancelled=N violations=N
# Exit status 0 only without violations.
#   TCC_SKIP_BUILD=1 TCC_BUILD_DIR=DIR   use an existing build (ctest does)
set -euo pipefail
cd "$(dirname "$0")/.."
keep=0
on_etcd=0
for arg in "$@"; do
  case $arg in
    --keep) keep=1 ;;
    --etcd) on_etcd=1 ;;
    *) echo "usage: $0 [--keep] [--etcd]" >&2; exit 2 ;;
  esac
done

[ "${TCC_SKIP_BUILD:-0}" = 1 ] || scripts/build.sh >/dev/null
build_dir=${TCC_BUILD_DIR:-build}
bin_tccd=$build_dir/coordinator/tccd
bin_ctl=$build_dir/coordinator/tccctl/tccctl
bin_bank=$build_dir/participant-sdk/examples/bank/tcc-bank
bin_demo=$build_dir/participant-sdk/examples/bank/tcc-bank-demo
bin_bench=$build_dir/tests/bench/tcc-bench
for b in "$bin_tccd" "$bin_ctl" "$bin_bank" "$bin_demo" "$bin_bench"; do
  [ -x "$b" ] || { echo "recovery-drill: $b not built" >&2; exit 1; }
done

accounts=100
initial_balance=1000
expected_total=$((2 * accounts * initial_balance))
dir=$(mktemp -d /tmp/tcc-recovery-drill.XXXXXX)
violations=0
pids=()

stop_all() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    # Bounded: SIGKILL whatever has not stopped within ~5 s.
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  pids=()
  if [ -n "${etcd_env_file:-}" ]; then
    scripts/etcd.sh stop "$etcd_env_file" >/dev/null 2>&1 || true
  fi
  if [ "$keep" = 1 ] || [ "$violations" -gt 0 ]; then
    echo "recovery-drill: logs and data kept in $dir"
  else
    rm -rf "$dir"
  fi
}
trap stop_all EXIT
trap 'echo "recovery-drill: interrupted" >&2; exit 130' INT TERM

violation() {
  echo "VIOLATION: $*"
  violations=$((violations + 1))
}

now_ms() { date +%s%3N; }

# Starts a server in the background (in this shell, so that stop_all knows
# its pid) and sets `port` and `pid` from its "listening on HOST:PORT" line
# (waits up to 30 s).
start() {
  local log=$1
  shift
  "$@" >"$log" 2>&1 &
  pid=$!
  pids+=("$pid")
  port=""
  for _ in $(seq 300); do
    port=$(grep -oP '^listening on 127\.0\.0\.1:\K[0-9]+$' "$log" || true)
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$port" ]
}

# Removes a pid from the list once this script reaped it.
forget() {
  local keep_pids=() p
  for p in "${pids[@]}"; do [ "$p" = "$1" ] || keep_pids+=("$p"); done
  pids=("${keep_pids[@]}")
}

# The admin credential: tccd reads `NAME TOKEN` lines; tccctl takes the token
# of the first line of the same file.
umask 077
printf 'drill %s\n' "$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')" \
  >"$dir/admin-tokens"
umask 022

start "$dir/bank-a.log" "$bin_bank" --name bank-a --listen 127.0.0.1:0 \
  --data-dir "$dir/bank-a" --accounts $accounts \
  --initial-balance $initial_balance || { cat "$dir/bank-a.log" >&2; exit 1; }
port_a=$port
start "$dir/bank-b.log" "$bin_bank" --name bank-b --listen 127.0.0.1:0 \
  --data-dir "$dir/bank-b" --accounts $accounts \
  --initial-balance $initial_balance || { cat "$dir/bank-b.log" >&2; exit 1; }
port_b=$port

tccd_config=config/tccd.yaml
wal_says="WAL $dir/tccd, fsync on"
if [ $on_etcd = 1 ]; then
  # config/tccd.yaml with its cluster: section (the file's last) replaced.
  endpoints=""
  if [ -n "${TCC_ETCD_ENV_FILE:-}" ]; then
    endpoints=$(sed -n 's/^export TCC_ETCD_ENDPOINTS=//p' "$TCC_ETCD_ENV_FILE")
  elif [ -n "${TCC_ETCD_ENDPOINTS:-}" ]; then
    endpoints=$TCC_ETCD_ENDPOINTS
  else
    etcd_env_file=$dir/etcd.env
    scripts/etcd.sh start --members 3 "$etcd_env_file" >/dev/null
    endpoints=$(sed -n 's/^export TCC_ETCD_ENDPOINTS=//p' "$etcd_env_file")
  fi
  [ -n "$endpoints" ] || { echo "recovery-drill: --etcd: no etcd endpoints" >&2; exit 1; }
  prefix="/tcc-recovery-drill/$(basename "$dir")/"
  tccd_config=$dir/tccd.yaml
  {
    sed '/^cluster:/,$d' config/tccd.yaml
    printf 'cluster:\n  enabled: true\n  node_id: drill-1\n'
    printf '  advertise_address: 127.0.0.1:1\n  key_prefix: "%s"\n' "$prefix"
    printf '  shards: 8\n  lease_ttl_ms: 2000\n  lease_margin_ms: 500\n'
    printf '  etcd:\n    endpoints: [%s]\n' "$endpoints"
  } >"$tccd_config"
  "$bin_tccd" --config "$tccd_config" --init-cluster >"$dir/init-cluster.log" 2>&1 ||
    { cat "$dir/init-cluster.log" >&2; exit 1; }
  wal_says="WAL in etcd $endpoints under $prefix"
fi
tccd_args=(--config "$tccd_config" --data-dir "$dir/tccd"
  --metrics-listen off --admin-token-file "$dir/admin-tokens"
  --participant "bank-a=127.0.0.1:$port_a"
  --participant "bank-b=127.0.0.1:$port_b")
start "$dir/tccd.log" "$bin_tccd" --listen 127.0.0.1:0 "${tccd_args[@]}" ||
  { cat "$dir/tccd.log" >&2; exit 1; }
port_t=$port
tccd_pid=$pid
export TCCCTL_ADDR=127.0.0.1:$port_t
export TCCCTL_TOKEN_FILE=$dir/admin-tokens
ctl() { "$bin_ctl" "$@"; }

echo "== tccd on 127.0.0.1:$port_t ($wal_says); bank-a :$port_a, bank-b :$port_b ($accounts accounts of $initial_balance each)"
ctl status

# Sum of the in-flight counts in `tccctl --json status` output.
in_flight() {
  { grep -oP '"count":"\K[0-9]+' <<<"$1" || true; } |
    awk '{s += $1} END {print s + 0}'
}
field() { { grep -oP "\"$1\":\"?\\K[^\",}]*" <<<"$2" || true; } | head -1; }

echo
echo "== load: tcc-bench, 8 callers submitting transfers, 64 registering a backlog of up to 5000"
"$bin_bench" --target "127.0.0.1:$port_t" --payload-format bank \
  --participants bank-a,bank-b --accounts $accounts --concurrency 8 \
  --warmup-s 0 --duration-s 20 --timeout-ms 5000 >"$dir/bench.log" 2>&1 &
bench_pid=$!
pids+=("$bench_pid")
"$bin_bench" --target "127.0.0.1:$port_t" --payload-format bank \
  --participants bank-a,bank-b --accounts $accounts --concurrency 64 \
  --register 5000 --timeout-ms 5000 >"$dir/register.log" 2>&1 &
register_pid=$!
pids+=("$register_pid")
sleep 1.5

unfinished_states=(--state open --state trying --state awaiting_approval
  --state confirming --state cancelling)
before=$(ctl --json status)
echo "   just before the kill: in flight $(in_flight "$before"); the oldest:"
ctl list "${unfinished_states[@]}" --page-size 3 >"$dir/before-kill.txt" || true
sed 's/^/   /' "$dir/before-kill.txt"
# One of them, to look at once recovered.
sample_gid=$(awk 'NR > 1 && NF >= 5 {print $1; exit}' "$dir/before-kill.txt")
kill -KILL "$tccd_pid"
wait "$tccd_pid" 2>/dev/null || true
forget "$tccd_pid"
echo "== kill -9 tccd (pid $tccd_pid)"
# The callers get UNAVAILABLE from here on; stop them.
for p in "$bench_pid" "$register_pid"; do
  kill -TERM "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || true
  forget "$p"
done

restart_ms=$(now_ms)
started=0
for _ in $(seq 20); do
  # A port a killed process held can take a moment to be free again.
  if start "$dir/tccd-restarted.log" "$bin_tccd" --listen "127.0.0.1:$port_t" "${tccd_args[@]}"; then
    started=1
    break
  fi
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  forget "$pid"
  sleep 0.25
done
if [ $started = 0 ]; then
  violation "tccd did not restart; see $dir/tccd-restarted.log"
  exit 1
fi
serving_ms=$(now_ms)
echo "== tccd restarted (pid $pid), serving after $((serving_ms - restart_ms)) ms; resolving what was in flight:"
# Polls status until nothing is in flight (bounded: 90 s).
recovered=0
listed=0
last_print=0
recovery_ms=-1
at_restart=""
for _ in $(seq 900); do
  s=$(ctl --json status 2>/dev/null || true)
  if [ -n "$s" ]; then
    n=$(in_flight "$s")
    [ -n "$at_restart" ] || at_restart=$n
    t=$(($(now_ms) - restart_ms))
    if [ $((t - last_print)) -ge 500 ] || [ "$n" = 0 ] || [ $listed = 0 ]; then
      printf '   +%5d ms  %-10s in flight %5d  recovery %s/%s\n' "$t" \
        "$(field health "$s")" "$n" "$(field recovery_done "$s")" \
        "$(field recovery_total "$s")"
      last_print=$t
    fi
    if [ $listed = 0 ] && [ "$n" != 0 ]; then
      # Once: what is still in flight.
      ctl list "${unfinished_states[@]}" --page-size 5 >"$dir/in-flight.txt" || true
      sed 's/^/   /' "$dir/in-flight.txt"
      # Rather one the restarted tccd found unfinished, to look at later.
      g=$(awk 'NR > 1 && NF >= 5 {print $1; exit}' "$dir/in-flight.txt")
      [ -z "$g" ] || sample_gid=$g
    fi
    listed=1
    if [ "$n" = 0 ]; then
      recovery_ms=$t
      recovered=$(field recovery_total "$s")
      break
    fi
  fi
  sleep 0.1
done
if [ "$recovery_ms" -lt 0 ]; then
  violation "transactions still in flight 90 s after the restart"
fi
echo "== recovery time: $recovery_ms ms from the restart to nothing in flight ($recovered transactions found unfinished in the WAL)"

echo
echo "== final checks"
ctl status
left=$(ctl list --all "${unfinished_states[@]}" | tail -1) || true
echo "   unfinished: $left"
[ "$left" = "0 transactions" ] || violation "unfinished transactions left: $left"
confirmed=$(ctl list --all --state confirmed --page-size 1000 | tail -1 | awk '{print $1}') || true
cancelled=$(ctl list --all --state cancelled --page-size 1000 | tail -1 | awk '{print $1}') || true
echo "   confirmed $confirmed, cancelled $cancelled"
if [ -n "$sample_gid" ]; then
  echo
  echo "== one that was in flight: tccctl show $sample_gid"
  ctl show "$sample_gid" | sed 's/^/   /' || violation "show $sample_gid failed"
fi

# tcc-bank-demo: three more transfers through the restarted tccd, each
# outcome checked, then nothing frozen or pending; its last balances line
# gives the banks' totals, which must be what they started with.
echo
echo "== tcc-bank-demo against the restarted tccd"
demo_rc=0
"$bin_demo" --tccd "127.0.0.1:$port_t" --bank-a "127.0.0.1:$port_a" \
  --bank-b "127.0.0.1:$port_b" >"$dir/demo.log" 2>&1 || demo_rc=$?
grep -E '^demo:|ok:|UNEXPECTED' "$dir/demo.log" | sed 's/^ */   /'
[ $demo_rc = 0 ] || violation "tcc-bank-demo failed (exit $demo_rc); see $dir/demo.log"
balances=$(grep 'balances:' "$dir/demo.log" | tail -1)
total=$(grep -oP 'total \K-?[0-9]+' <<<"$balances" | awk '{s += $1} END {print s + 0}')
echo "   money: $total across both banks (started with $expected_total)"
[ "$total" = "$expected_total" ] || violation "money not conserved: $total != $expected_total"

result=PASS
[ $violations = 0 ] || result=FAIL
echo "recovery-drill: $result in_flight_at_kill=$(in_flight "$before") recovered=$recovered recovery_ms=$recovery_ms confirmed=$confirmed cancelled=$cancelled violations=$violations"
[ $violations = 0 ]
