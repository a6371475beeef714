#!/usr/bin/env bash
# The demo: builds tccd and the bank demo, starts two bank participants
# (bank-a, bank-b, on the embedded RocksDB barrier store) and tccd (on its
# embedded RocksDB WAL, fsync on), all on 127.0.0.1 with ports the OS picks,
# data under ./.tccd-demo/, then submits three transfers and prints each
# outcome and the balances. Keeps serving until Ctrl-C.
#
#   scripts/run.sh          the demo, then serve until Ctrl-C
#   scripts/run.sh --once   the demo, then stop everything; exit 0 only if
#                           every outcome was the expected one
#   scripts/run.sh --mixed [--once]
#                           the same transfers between a C++ bank (bank-a:
#                           tcc-bank, gRPC, RocksDB) and a Python bank (bank-b:
#                           the Python SDK's example, HTTP/JSON, PostgreSQL
#                           from scripts/pg.sh, stopped and removed at exit)
#   scripts/run.sh --cluster [--once]
#                           cluster mode (DESIGN.md section 14): a 3-member
#                           etcd (scripts/etcd.sh) and 3 tccd nodes over it,
#                           the two banks; transfers through node-1, then
#                           node-2 is killed with -9: its shards are taken
#                           over, more transfers finish through the others,
#                           and `tccctl cluster` shows where every shard went
set -euo pipefail
cd "$(dirname "$0")/.."
once=0
mixed=0
cluster=0
for arg in "$@"; do
  case $arg in
    --once) once=1 ;;
    --mixed) mixed=1 ;;
    --cluster) cluster=1 ;;
    *) echo "usage: $0 [--mixed | --cluster] [--once]" >&2; exit 2 ;;
  esac
done
if [ $mixed = 1 ] && [ $cluster = 1 ]; then
  echo "usage: $0 [--mixed | --cluster] [--once]" >&2
  exit 2
fi

[ "${TCC_SKIP_BUILD:-0}" = 1 ] || scripts/build.sh >/dev/null
build_dir=${TCC_BUILD_DIR:-build}
bin_tccd=$build_dir/coordinator/tccd
bin_bank=$build_dir/participant-sdk/examples/bank/tcc-bank
bin_demo=$build_dir/participant-sdk/examples/bank/tcc-bank-demo
bin_ctl=$build_dir/coordinator/tccctl/tccctl
demo_dir=${TCC_DEMO_DIR:-$PWD/.tccd-demo}
rm -rf "$demo_dir"
mkdir -p "$demo_dir"

pids=()
pg_env=""
etcd_env=""
stop_all() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
  if [ -n "$pg_env" ]; then scripts/pg.sh stop "$pg_env" >/dev/null 2>&1 || true; fi
  pg_env=""
  if [ -n "$etcd_env" ]; then scripts/etcd.sh stop "$etcd_env" >/dev/null 2>&1 || true; fi
  etcd_env=""
}
trap stop_all EXIT
trap 'echo; echo "stopping"; exit 0' INT TERM

# Starts a server in the background (in this shell, so that stop_all knows
# its pid) and sets `port` from its "listening on HOST:PORT" line (waits up to
# 30 s).
start() {
  local log=$1
  shift
  "$@" >"$log" 2>&1 &
  pids+=($!)
  port=""
  for _ in $(seq 300); do
    port=$(grep -oP '^listening on 127\.0\.0\.1:\K[0-9]+$' "$log" || true)
    [ -n "$port" ] && break
    if ! kill -0 "${pids[-1]}" 2>/dev/null; then break; fi
    sleep 0.1
  done
  if [ -z "$port" ]; then
    echo "run.sh: $* did not start; its log:" >&2
    cat "$log" >&2
    exit 1
  fi
}

# --cluster: everything after the banks (see the header).
run_cluster() {
  etcd_env=$demo_dir/etcd.env
  scripts/etcd.sh start --members 3 --owner-pid $$ "$etcd_env" >/dev/null
  local endpoints
  endpoints=$(sed -n 's/^export TCC_ETCD_ENDPOINTS=//p' "$etcd_env")
  local eps="\"${endpoints//,/\", \"}\""
  # A node advertises its address, so its port is chosen here (free now).
  local ports
  ports=$(/usr/bin/python3 -c 'import socket
ss = [socket.socket() for _ in range(3)]
for s in ss:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')
  local node_ports
  read -r -a node_ports <<<"$ports"
  local i
  for i in 1 2 3; do
    cat >"$demo_dir/node$i.yaml" <<EOF
listen: 127.0.0.1:${node_ports[$((i - 1))]}
metrics_listen: ""
data_dir: $demo_dir/node$i
admin:
  token_file: $tokens
participants:
  bank-a: {address: "127.0.0.1:$port_a"}
  bank-b: {address: "127.0.0.1:$port_b"}
cluster:
  enabled: true
  node_id: node-$i
  advertise_address: 127.0.0.1:${node_ports[$((i - 1))]}
  shards: 16
  lease_ttl_ms: 2000
  lease_margin_ms: 500
  etcd:
    endpoints: [$eps]
EOF
  done
  "$bin_tccd" --config "$demo_dir/node1.yaml" --init-cluster
  local node_pids=()
  for i in 1 2 3; do
    start "$demo_dir/node$i.log" "$bin_tccd" --config "$demo_dir/node$i.yaml"
    node_pids+=("${pids[-1]}")
  done
  local n1=127.0.0.1:${node_ports[0]} n3=127.0.0.1:${node_ports[2]}
  local ctl=("$bin_ctl" --addr "$n1" --token-file "$tokens")
  local rc=0
  # Until the shards have settled on their assigned nodes (hand-overs:
  # a shard released by one node is unowned until the next takes it).
  for i in $(seq 1 100); do
    if "${ctl[@]}" cluster >"$demo_dir/cluster.txt" 2>&1 &&
      grep -q '^unowned: 0' "$demo_dir/cluster.txt" &&
      ! grep -q 'moving to their assigned' "$demo_dir/cluster.txt"; then
      break
    fi
    sleep 0.1
  done
  echo "etcd: 3 members on $endpoints"
  echo "tccd: node-1..3 on 127.0.0.1:${node_ports[*]} (16 shards, lease TTL 2 s, WALs in etcd)"
  echo "bank-a on 127.0.0.1:$port_a, bank-b on 127.0.0.1:$port_b (10 accounts of 100 each)"
  echo "logs: $demo_dir/*.log"
  echo
  echo "\$ tccctl cluster"
  "${ctl[@]}" cluster || rc=$?
  echo
  echo "== transfers through node-1 (it forwards each gid to its shard's owner)"
  "$bin_demo" --tccd "$n1" --bank-a "127.0.0.1:$port_a" \
    --bank-b "127.0.0.1:$bank_b_service" || rc=$?
  echo
  echo "== kill -9 node-2 (pid ${node_pids[1]}); transfers through node-1 and node-3 meanwhile"
  local killed_ms
  killed_ms=$(date +%s%3N)
  kill -9 "${node_pids[1]}"
  wait "${node_pids[1]}" 2>/dev/null || true
  "$bin_demo" --tccd "$n1,$n3" --bank-a "127.0.0.1:$port_a" \
    --bank-b "127.0.0.1:$bank_b_service" || rc=$?
  # Every shard owned again, none by node-2.
  local owned=0 waited_ms=0
  for i in $(seq 1 200); do
    if "${ctl[@]}" cluster >"$demo_dir/cluster.txt" 2>&1 &&
      grep -q '^unowned: 0' "$demo_dir/cluster.txt" &&
      ! grep -q '^  node-2' "$demo_dir/cluster.txt"; then
      owned=1
      waited_ms=$(($(date +%s%3N) - killed_ms))
      break
    fi
    sleep 0.05
  done
  local took
  took=$(cat "$demo_dir/node1.log" "$demo_dir/node3.log" |
    grep -c 'took shard .*last owner: node-2' || true)
  echo
  if [ $owned = 1 ]; then
    echo "node-2's shards: $took taken over by node-1 and node-3; every shard owned again $waited_ms ms after the kill (seen by then)"
  else
    echo "run.sh: shards still without an owner, or node-2 still listed, 10 s after the kill" >&2
    rc=1
  fi
  echo
  echo "\$ tccctl cluster"
  cat "$demo_dir/cluster.txt"
  if [ $once = 1 ]; then
    return $rc
  fi
  echo
  echo "Serving until Ctrl-C (node-1, node-3). Try: $bin_demo --tccd $n1,$n3 --bank-a 127.0.0.1:$port_a --bank-b 127.0.0.1:$bank_b_service"
  echo "Operate: ${ctl[*]} cluster | status | list | drain node-3"
  while true; do
    for pid in "${node_pids[0]}" "${node_pids[2]}"; do
      if ! kill -0 "$pid" 2>/dev/null; then
        echo "run.sh: a node stopped; see $demo_dir/*.log" >&2
        return 1
      fi
    done
    sleep 1
  done
}

start "$demo_dir/bank-a.log" "$bin_bank" --name bank-a \
  --listen 127.0.0.1:0 --data-dir "$demo_dir/bank-a" --accounts 10 \
  --initial-balance 100
port_a=$port
if [ $mixed = 1 ]; then
  # The Python bank over HTTP on PostgreSQL; its Bank service (balances, for
  # the demo's checks) on a port of its own.
  pg_env=$demo_dir/postgres.env
  scripts/pg.sh start "$pg_env" >/dev/null
  pg_url=$(sed -n 's/^export TCC_PG_URL=//p' "$pg_env")
  export PYTHONPATH="$build_dir/participant-sdk/python/gen:$PWD/participant-sdk/python/src:$PWD/participant-sdk/python/examples/bank"
  export PYTHONDONTWRITEBYTECODE=1
  start "$demo_dir/bank-b.log" /usr/bin/python3 participant-sdk/python/examples/bank/bank.py \
    --name bank-b --protocol http --listen 127.0.0.1:0 --bank-listen 127.0.0.1:0 \
    --store postgres --pg-url "$pg_url" --accounts 10 --initial-balance 100
  port_b=$port
  bank_b_service=$(grep -oP '^bank service on 127\.0\.0\.1:\K[0-9]+$' "$demo_dir/bank-b.log")
  participant_b="bank-b=http://127.0.0.1:$port_b"
else
  start "$demo_dir/bank-b.log" "$bin_bank" --name bank-b \
    --listen 127.0.0.1:0 --data-dir "$demo_dir/bank-b" --accounts 10 \
    --initial-balance 100
  port_b=$port
  bank_b_service=$port_b
  participant_b="bank-b=127.0.0.1:$port_b"
fi
# An admin token for tccctl (admin calls need a credential).
tokens=$demo_dir/admin-tokens
(umask 077 && echo "demo $(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" >"$tokens")
if [ $cluster = 1 ]; then
  rc=0
  run_cluster || rc=$?
  exit $rc
fi
start "$demo_dir/tccd.log" "$bin_tccd" --config config/tccd.yaml \
  --data-dir "$demo_dir/tccd" --listen 127.0.0.1:0 \
  --admin-token-file "$tokens" \
  --metrics-listen 127.0.0.1:0 \
  --console-listen 127.0.0.1:0 \
  --participant "bank-a=127.0.0.1:$port_a" \
  --participant "$participant_b"
port_t=$port
metrics=$(grep -oP '^metrics: \K.*' "$demo_dir/tccd.log" || true)
console=$(grep -oP '^console: \K.*' "$demo_dir/tccd.log" || true)

echo "tccd on 127.0.0.1:$port_t (WAL in $demo_dir/tccd, fsync on)"
if [ $mixed = 1 ]; then
  echo "bank-a (C++, gRPC, RocksDB) on 127.0.0.1:$port_a; bank-b (Python, HTTP, PostgreSQL) on http://127.0.0.1:$port_b, its Bank service on :$bank_b_service (10 accounts of 100 each)"
else
  echo "bank-a on 127.0.0.1:$port_a, bank-b on 127.0.0.1:$port_b (10 accounts of 100 each)"
fi
echo "logs: $demo_dir/*.log"

rc=0
"$bin_demo" --tccd "127.0.0.1:$port_t" --bank-a "127.0.0.1:$port_a" \
  --bank-b "127.0.0.1:$bank_b_service" || rc=$?
echo "metrics: $metrics"
echo "console: $console (sign in with the token after 'demo' in $tokens)"
ctl=("$bin_ctl" --addr "127.0.0.1:$port_t" --token-file "$tokens")
echo
echo "\$ tccctl status"
"${ctl[@]}" status || rc=$?
echo "\$ tccctl list"
"${ctl[@]}" list || rc=$?

if [ $once = 1 ]; then
  exit $rc
fi
echo
echo "Serving until Ctrl-C. Try: $bin_demo --tccd 127.0.0.1:$port_t --bank-a 127.0.0.1:$port_a --bank-b 127.0.0.1:$bank_b_service"
echo "Operate: ${ctl[*]} status | list | show GID"
while true; do
  for pid in "${pids[@]}"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "run.sh: a process stopped; see $demo_dir/*.log" >&2
      exit 1
    fi
  done
  sleep 1
done
