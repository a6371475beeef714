#!/usr/bin/env bash
# Benchmarks tccd against a baseline measured in the same run (issue 8), and
# prints the results as a Markdown table.
#
# The baseline is the ceiling for any coordinator on this machine: the same
# Submit load against tcc-baseline-relay, which makes the same participant
# calls (Try, Try, then Confirm, Confirm) to two tcc-noop-participants that
# answer at once, with no log and no barrier. tccd runs with its defaults
# (config/tccd.yaml: fsync on) in front of two tcc-bank participants on the
# RocksDB barrier (synced writes), 10,000 accounts each; payloads are the
# bank's "ACCOUNT:AMOUNT:xxx..." padded to the size asked.
#
#   scripts/bench.sh            the full set (about 10 minutes)
#   scripts/bench.sh --quick    the headline, C=1 and the half-rate p99 only
#
# Options:
#   --quick            see above
#   --no-build         use the binaries already in the build directory
#   --build-dir DIR    default build-release (built in Release)
#   --out FILE         also write the Markdown table there
#                      (default: <build-dir>/bench/results.md)
#   --duration-s N     measured seconds per run (default 10)
#   --warmup-s N       warm-up seconds per run (default 2)
#   --recovery-count N transactions left for recovery (default 100000)
#   --only-recovery    only the two recovery measurements (with the tccd stack)
#   --keep-data        keep the processes' data directories (deleted at exit
#                      otherwise; the logs are always kept)
#   --tccd-config FILE tccd's configuration (default config/tccd.yaml)
#   --python-banks     instead of the set above: the headline case (C=64, 2
#                      branches, 100 B) with the two banks run by the Python
#                      SDK (participant-sdk/python/examples/bank/bank.py),
#                      over HTTP/JSON and over gRPC, alternating, and the C++
#                      banks as the reference, in one run; the last line is
#                      tcc-bench-python: http_tps=N grpc_tps=N ratio=N ...
#   --python-rounds N  rounds of (HTTP, gRPC) runs with --python-banks
#                      (default 2; medians reported)
#   --python-store S   sqlite (default) or postgres (scripts/pg.sh, started
#                      and removed here) for the Python banks
#   --etcd             instead of the set above: the headline case (C=64, 2
#                      branches, 100 B) and C=1 with tccd on its RocksDB WAL,
#                      then the same two with tccd in cluster mode on a
#                      3-member loopback etcd (scripts/etcd.sh, started and
#                      stopped here), in one run; fsync on everywhere. It
#                      reports the etcd Txns per transaction and the appends
#                      per Txn (tccd_etcd_txns_total, tccd_etcd_appends_total;
#                      warm-up included); the last line is
#                      tcc-bench: etcd_tps=N rocksdb_tps=N etcd_ratio=N
#                        etcd_txns_per_tx=N appends_per_etcd_txn=N
#                        etcd_single_p50_ms=N errors=N
#   --etcd-members N   with --etcd: 3 (default) or 1 member (to see what
#                      the replication costs on this machine)
#   --etcd-rounds N    with --etcd: N rounds of (RocksDB C=64, etcd C=64),
#                      alternating, then C=1 on each once (default 1). The
#                      C=64 figures and etcd_ratio are then medians (the
#                      ratio: the median of each round's own), and every
#                      round is in the table: on a machine whose speed
#                      drifts, two runs half a minute apart compare better
#                      than two runs a minute and more apart
#   --etcd-soak S      instead of the set above: the headline case (C=64,
#                      2 branches, 100 B) with tccd on a 3-member loopback
#                      etcd for S seconds (scripts/etcd.sh's flags: its
#                      auto-compaction and 2 GiB quota), sampling every 15 s
#                      the transactions finished (confirmed or cancelled), each member's database
#                      size and size in use, its keys and its NOSPACE alarm;
#                      shows whether etcd's space stays bounded and the rate
#                      steady under full load. The last line is
#                      tcc-bench-soak: seconds=N tps=N tps_first_min=N
#                        tps_last_min=N db_mb_max=N db_in_use_mb_last=N
#                        kb_per_tx=N nospace=0|1 errors=N
#                      (kb_per_tx: the database's growth per transaction
#                      over the first minute, before etcd's first
#                      compaction of the load's revisions)
#   --python-http-batch on|off
#                      on (default): tccd sends the Python banks over HTTP
#                      batches (participants.NAME.batch: true, POST /batch,
#                      as gRPC's Batch); off: one request per call
#   --cluster          instead of the set above: the headline case (C=64,
#                      2 branches, 100 B) and C=1 with tccd on its RocksDB
#                      WAL (one node), then with 1, 2 and 3 tccd nodes in
#                      cluster mode over one 3-member loopback etcd
#                      (scripts/etcd.sh, started and stopped here; a fresh
#                      key prefix per node count), in one run; fsync on
#                      everywhere. tcc-bench sends the transactions
#                      round-robin over the nodes (one connection each), so
#                      a node forwards what another owns. Per configuration:
#                      tx/s, p50, p99, etcd Txns per transaction (group
#                      commit and all of the client's), forwarded calls per
#                      transaction, CPU s per 1,000 tx of every process
#                      (nodes, etcd members, banks, tcc-bench), and on paper
#                      what 3 nodes on 3 machines would do from those CPU
#                      figures; the last line is
#                      tcc-bench: cluster_tps_1=N cluster_tps_2=N
#                        cluster_tps_3=N rocksdb_tps=N etcd_txns_per_tx_3=N
#                        errors=N
#   --payload-rounds N instead of the set above: N runs of tccd, then N of
#                      the baseline, at C=64 with 2 branches of 16 KiB
#                      payloads (one stack each, so tccd's WAL ages from
#                      run to run); every run in the table, medians
#                      reported; the last line is
#                      tcc-bench-payload: tccd_tps=N baseline_tps=N ratio=N
#                        tccd_cpu_ms_per_tx=N errors=N
#                      (ratio: the median of round i's tccd / baseline)
#   --against BIN      instead of the set above: the build directory's tccd
#                      ("new") against another tccd binary BIN ("old"; e.g.
#                      one built from an earlier commit), alternated
#                      (issue 20: a figure claimed on a machine whose speed
#                      drifts needs at least three alternations). Each
#                      round starts a fresh stack (both banks and tccd, new
#                      data directories) with new, runs C=64 (2 branches,
#                      --against-payload bytes) and C=1 (100 B), then the
#                      same with old (the order turns each round: new
#                      first, then old first, ...). Every run is in the table, with
#                      tccd's switches, futex calls and syscalls per
#                      transaction; the last line gives the medians:
#                      tcc-bench-against: new_tps=N old_tps=N
#                        new_cpu_ms_per_tx=N old_cpu_ms_per_tx=N
#                        new_single_p50_ms=N old_single_p50_ms=N errors=N
#                      (tps and CPU of the C=64 runs, tccd's CPU per
#                      transaction in ms)
#   --against-rounds N rounds of (new, old) with --against (default 3)
#   --against-rate R   with --against, also an open loop at R transactions/s
#                      (100 B) after C=1, for issue 20's p99 bar (e.g. half
#                      of the old C=64 rate); the last line then also has
#                      new_p99_at_rate_ms=N old_p99_at_rate_ms=N
#   --against-payload BYTES
#                      the payload of --against's C=64 runs (default 100;
#                      16384 for issue 20's large-payload figure)
#
# Everything runs on 127.0.0.1 with ports picked by the OS; every process
# started here is stopped on exit (also on error or Ctrl-C), and every step
# has a time limit. The last line printed (without --python-banks,
# --etcd or --cluster) is:
#   tcc-bench: tps=N baseline_tps=N ratio=N p50_ms=N p99_ms=N
#     p99_half_load_ms=N single_p50_ms=N slow_fsync_tps=N recovery_tps=N
#     errors=N baseline_p99_half_load_ms=N baseline_single_p50_ms=N
# (one line; fields not measured print 0). errors counts every run's errors.
# The last two are the baseline's own figures at its half rate and at C=1:
# what the RPCs alone reach on this machine, beside tccd's two.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
build=1
build_dir="build-release"
out=""
duration_s=10
warmup_s=2
recovery_count=100000
only_recovery=0
keep_data=0
tccd_config=config/tccd.yaml
python_banks=0
python_rounds=2
python_store=sqlite
etcd_mode=0
etcd_members=3
etcd_rounds=1
soak_s=0
payload_rounds=0
against_bin=""
against_rounds=3
against_payload=100
against_rate=0
python_http_batch=on
cluster_mode=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=1 ;;
    --no-build) build=0 ;;
    --build-dir) build_dir=$2; shift ;;
    --out) out=$2; shift ;;
    --duration-s) duration_s=$2; shift ;;
    --warmup-s) warmup_s=$2; shift ;;
    --recovery-count) recovery_count=$2; shift ;;
    --only-recovery) only_recovery=1 ;;
    --keep-data) keep_data=1 ;;
    --tccd-config) tccd_config=$2; shift ;;
    --python-banks) python_banks=1 ;;
    --python-rounds) python_rounds=$2; shift ;;
    --python-store) python_store=$2; shift ;;
    --python-http-batch) python_http_batch=$2; shift ;;
    --etcd) etcd_mode=1 ;;
    --cluster) cluster_mode=1 ;;
    --etcd-members) etcd_members=$2; shift ;;
    --etcd-rounds) etcd_rounds=$2; shift ;;
    --etcd-soak) soak_s=$2; shift ;;
    --payload-rounds) payload_rounds=$2; shift ;;
    --against) against_bin=$2; shift ;;
    --against-rounds) against_rounds=$2; shift ;;
    --against-payload) against_payload=$2; shift ;;
    --against-rate) against_rate=$2; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
out=${out:-$build_dir/bench/results.md}

if [[ $build == 1 ]]; then
  TCC_BUILD_TYPE=Release TCC_BUILD_DIR="$build_dir" scripts/build.sh
fi
bin=$build_dir/tests/bench
for tool in tcc-bench tcc-baseline-relay tcc-noop-participant tcc-metric-wait; do
  if [[ ! -x $bin/$tool ]]; then
    echo "bench.sh: $bin/$tool is missing (build first, or drop --no-build)" >&2
    exit 1
  fi
done

run_dir=$(mktemp -d "${TMPDIR:-/tmp}/tcc-bench.XXXXXX")
started_pids=()

# Stops every process started here: SIGTERM, up to 5 s of grace, SIGKILL.
stop_pids() {
  local pid
  for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "$@"; do
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}
cleanup() {
  stop_pids "${started_pids[@]}"
  started_pids=()
}
# On exit the processes stop and their data directories go (about 1.3 GB
# after a full set: the recovery runs' 100,000 transactions); the logs stay.
pg_env=""
etcd_env=""
cleanup_on_exit() {
  cleanup
  if [[ -n $pg_env ]]; then scripts/pg.sh stop "$pg_env" >/dev/null 2>&1 || true; fi
  # Only with its env file: without one, etcd.sh stop would take
  # $TCC_ETCD_DIR, someone else's cluster.
  if [[ -n $etcd_env && -f $etcd_env ]]; then
    scripts/etcd.sh stop "$etcd_env" >/dev/null 2>&1 || true
  fi
  if [[ $keep_data == 0 ]]; then rm -rf "$run_dir"/stack-*; fi
}
trap cleanup_on_exit EXIT
trap 'exit 130' INT TERM

# start_server NAME CMD...: starts CMD (which prints "listening on HOST:PORT"),
# its output in $run_dir/NAME.log; sets server_pid and server_port.
start_server() {
  local name=$1
  shift
  local log=$run_dir/$name.log
  : >"$log"  # exists before the poll below reads it
  "$@" >"$log" 2>&1 &
  server_pid=$!
  started_pids+=("$server_pid")
  server_port=""
  for _ in $(seq 200); do  # 20 s at most
    server_port=$(sed -n 's/^listening on [^ ]*:\([0-9][0-9]*\)$/\1/p' "$log" |
                  head -n1)
    [[ -n $server_port ]] && return 0
    if ! kill -0 "$server_pid" 2>/dev/null; then break; fi
    sleep 0.1
  done
  echo "bench.sh: $name did not start; its output:" >&2
  cat "$log" >&2
  exit 1
}

# The baseline: two no-op participants (bank-a, bank-b) and the relay.
# Sets baseline_target and baseline_pids (relay first).
start_baseline() {
  start_server noop-a "$bin/tcc-noop-participant" --listen 127.0.0.1:0
  local noop_a_pid=$server_pid noop_a_port=$server_port
  start_server noop-b "$bin/tcc-noop-participant" --listen 127.0.0.1:0
  local noop_b_pid=$server_pid noop_b_port=$server_port
  start_server relay "$bin/tcc-baseline-relay" --listen 127.0.0.1:0 \
    --participant "bank-a=127.0.0.1:$noop_a_port" \
    --participant "bank-b=127.0.0.1:$noop_b_port"
  baseline_target=127.0.0.1:$server_port
  baseline_pids="$server_pid,$noop_a_pid,$noop_b_pid"
  baseline_roles="relay,noop-a,noop-b"
}

# tccd and its participants: two tcc-bank participants on the RocksDB barrier
# (synced writes: fsync on), 10,000 accounts each, names bank-a and bank-b,
# then tccd with config/tccd.yaml (its defaults: fsync on), each on
# 127.0.0.1:0 with a fresh data directory under $run_dir. Sets tccd_target,
# tccd_pids, tccd_roles (tccd first), tccd_metrics (its /metrics URL) and
# tccd_data. With "slow-fsync" as $1, every fsync of tccd (WAL group sync,
# failpoint wal.before_sync) and every synced commit of the participants
# (failpoint barrier.before_synced_commit) is delayed by 1 ms. With "etcd" as
# $1, tccd runs in cluster mode on the etcd of $etcd_endpoints (a cluster of
# its own under a fresh key prefix, made by `tccd --init-cluster`; the
# data directory then holds only the node's archive).
tccd_target="" tccd_pids="" tccd_roles="" tccd_metrics="" tccd_data=""
tccd_bin=$build_dir/coordinator/tccd
bank_bin=$build_dir/participant-sdk/examples/bank/tcc-bank
stack_count=0
start_tccd_stack() {
  local variant=${1:-normal}
  [[ -x $tccd_bin && -x $bank_bin ]] || return 1
  local tccd_fp="" bank_fp=""
  if [[ $variant == slow-fsync ]]; then
    tccd_fp="wal.before_sync=sleep(1)"
    bank_fp="barrier.before_synced_commit=sleep(1)"
  fi
  stack_count=$((stack_count + 1))
  local dir=$run_dir/stack-$stack_count-$variant
  mkdir -p "$dir"
  start_banks "$dir" "$bank_fp"
  local participants=("${tccd_participants[@]}")
  tccd_data=$dir/tccd
  local config=$tccd_config listen=127.0.0.1:0
  if [[ $variant == etcd ]]; then
    config=$dir/tccd-etcd.yaml
    listen=127.0.0.1:$(free_port)
    write_etcd_config "$config" "$listen" "/tcc-bench/$stack_count/"
    if ! timeout --kill-after=5 60 "$tccd_bin" --config "$config" \
        --data-dir "$tccd_data" --init-cluster \
        >"$run_dir/tccd-init-$stack_count.log" 2>&1; then
      echo "bench.sh: tccd --init-cluster failed; its output:" >&2
      cat "$run_dir/tccd-init-$stack_count.log" >&2
      exit 1
    fi
  fi
  TCC_FAILPOINTS=$tccd_fp start_server "tccd-$stack_count" "$tccd_bin" \
    --config "$config" --data-dir "$tccd_data" \
    --listen "$listen" --metrics-listen 127.0.0.1:0 "${participants[@]}"
  tccd_target=127.0.0.1:$server_port
  tccd_pids="$server_pid$bank_pids"
  tccd_roles="tccd,bank-a,bank-b"
  tccd_metrics=$(sed -n 's/^metrics: \(http:[^ ]*\)$/\1/p' \
                 "$run_dir/tccd-$stack_count.log" | head -n1)
}

# start_banks DIR [FAILPOINTS]: the two tcc-bank participants of a stack
# (above), their data under DIR. Sets bank_pids (",PID_A,PID_B") and
# tccd_participants (tccd's --participant flags).
bank_pids=""
start_banks() {
  local bank
  bank_pids="" tccd_participants=()
  for bank in bank-a bank-b; do
    TCC_FAILPOINTS=${2:-} start_server "$bank-$stack_count" "$bank_bin" \
      --name "$bank" --listen 127.0.0.1:0 --store rocksdb \
      --data-dir "$1/$bank" --accounts 10000 --initial-balance 1000000000
    bank_pids+=",$server_pid"
    tccd_participants+=(--participant "$bank=127.0.0.1:$server_port")
  done
}

# start_cluster_stack N: the banks (as above) and N tccd nodes in cluster
# mode on the etcd of $etcd_endpoints, a cluster of their own under a fresh
# key prefix (`tccd --init-cluster` once, with node 1's configuration), each
# node listening on (and advertising) a fixed port of its own, then waits
# until every shard is owned by its assigned node (`tccctl cluster`). Sets
# cluster_targets (the nodes' addresses, comma-separated), cluster_pids (the
# nodes' pids, then the banks'), cluster_roles, cluster_metrics (the nodes'
# /metrics URLs, space-separated) and cluster_settle_s.
cluster_targets="" cluster_pids="" cluster_roles="" cluster_metrics=""
cluster_settle_s=0
ctl_bin=$build_dir/coordinator/tccctl/tccctl
start_cluster_stack() {
  local nodes=$1 i
  [[ -x $tccd_bin && -x $bank_bin && -x $ctl_bin ]] || return 1
  stack_count=$((stack_count + 1))
  local dir=$run_dir/stack-$stack_count-cluster-$nodes
  mkdir -p "$dir"
  start_banks "$dir"
  local tokens=$dir/admin-tokens
  (umask 077 && echo "bench $(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" >"$tokens")
  local prefix=/tcc-bench/cluster-$nodes-$stack_count/ addresses=() port
  for port in $(free_port "$nodes"); do
    addresses+=("127.0.0.1:$port")
    i=${#addresses[@]}
    write_etcd_config "$dir/node-$i.yaml" "${addresses[-1]}" "$prefix" "bench-$i"
  done
  if ! timeout --kill-after=5 60 "$tccd_bin" --config "$dir/node-1.yaml" \
      --data-dir "$dir/node-1" --init-cluster \
      >"$run_dir/tccd-init-$stack_count.log" 2>&1; then
    echo "bench.sh: tccd --init-cluster failed; its output:" >&2
    cat "$run_dir/tccd-init-$stack_count.log" >&2
    exit 1
  fi
  local t0 node_pids=""
  t0=$(now_s)
  cluster_metrics="" cluster_roles=""
  for i in $(seq "$nodes"); do
    start_server "tccd-$stack_count-node-$i" "$tccd_bin" \
      --config "$dir/node-$i.yaml" --data-dir "$dir/node-$i" \
      --listen "${addresses[$((i - 1))]}" --metrics-listen 127.0.0.1:0 \
      --admin-token-file "$tokens" "${tccd_participants[@]}"
    node_pids+="${node_pids:+,}$server_pid"
    cluster_roles+="${cluster_roles:+,}node-$i"
    cluster_metrics+="${cluster_metrics:+ }$(sed -n 's/^metrics: \(http:[^ ]*\)$/\1/p' \
      "$run_dir/tccd-$stack_count-node-$i.log" | head -n1)"
  done
  cluster_targets=$(IFS=,; echo "${addresses[*]}")
  cluster_pids="$node_pids$bank_pids"
  cluster_roles+=",bank-a,bank-b"
  # Settled: every node listed, every shard owned, none still to move to
  # its assigned node (a node that joins takes its shards by hand-over).
  local view=$dir/cluster.txt settled=0
  for _ in $(seq 600); do  # 60 s at most
    if "$ctl_bin" --addr "${addresses[0]}" --token-file "$tokens" cluster \
        >"$view" 2>&1 &&
        grep -q "^nodes ($nodes):" "$view" && grep -q '^unowned: 0' "$view" &&
        ! grep -q 'moving to their assigned' "$view"; then
      settled=1
      break
    fi
    sleep 0.1
  done
  cluster_settle_s=$(awk -v a="$t0" -v b="$(now_s)" 'BEGIN { printf "%.1f", b - a }')
  if [[ $settled != 1 ]]; then
    echo "bench.sh: the $nodes-node cluster did not settle in 60 s; tccctl cluster:" >&2
    cat "$view" >&2
    exit 1
  fi
  echo "bench.sh: $nodes-node cluster settled $cluster_settle_s s after the first node started" >&2
}

# free_port [N]: N (default 1) distinct free TCP ports on 127.0.0.1 (for
# tccd's advertise_address in cluster mode, which cannot be port 0; taken
# meanwhile is unlikely, and fails the start).
free_port() {
  python3 -c 'import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))' "${1:-1}"
}

# write_etcd_config FILE LISTEN PREFIX [NODE_ID]: $tccd_config with its
# cluster section (the file's last) replaced by one for the etcd of
# $etcd_endpoints (node id bench-1 unless given).
etcd_endpoints=""
write_etcd_config() {
  {
    sed '/^cluster:/,$d' "$tccd_config"
    echo "cluster:"
    echo "  enabled: true"
    echo "  node_id: ${4:-bench-1}"
    echo "  advertise_address: $2"
    echo "  key_prefix: $3"
    echo "  etcd:"
    echo "    endpoints: [${etcd_endpoints//,/, }]"
  } >"$1"
}

# The same stack with the two banks run by the Python SDK's example over
# $1 (http or grpc), on $python_store (SQLite: a file each, synchronous
# FULL; PostgreSQL: a schema each, synchronous_commit on). Sets the same
# variables as start_tccd_stack.
py_bank=participant-sdk/python/examples/bank/bank.py
start_python_stack() {
  local protocol=$1
  stack_count=$((stack_count + 1))
  local dir=$run_dir/stack-$stack_count-python-$protocol
  mkdir -p "$dir"
  local bank bank_pids="" participants=() store_args
  for bank in bank-a bank-b; do
    if [[ $python_store == postgres ]]; then
      store_args=(--store postgres --pg-url "$pg_url" --name "${bank}-s$stack_count")
    else
      store_args=(--store sqlite --db "$dir/$bank.db" --name "$bank")
    fi
    PYTHONPATH=$py_path PYTHONDONTWRITEBYTECODE=1 \
      start_server "py-$bank-$stack_count" /usr/bin/python3 "$py_bank" \
      "${store_args[@]}" --protocol "$protocol" --listen 127.0.0.1:0 \
      --accounts 10000 --initial-balance 1000000000 --log-level warning
    bank_pids+=",$server_pid"
    if [[ $protocol == http ]]; then
      participants+=(--participant "$bank=http://127.0.0.1:$server_port")
    else
      participants+=(--participant "$bank=127.0.0.1:$server_port")
    fi
  done
  # Over HTTP with batches: $tccd_config with the banks declared as HTTP
  # participants serving /batch (the flags above then set their urls).
  local config=$tccd_config
  if [[ $protocol == http && $python_http_batch == on ]]; then
    config=$dir/tccd.yaml
    awk '/^participants:/ { skip = 1; next } skip && /^[^ #]/ { skip = 0 }
         !skip { print }' "$tccd_config" >"$config"
    printf 'participants:\n' >>"$config"
    for bank in bank-a bank-b; do
      printf '  %s: {protocol: http, url: "http://127.0.0.1:1", batch: true}\n' \
        "$bank" >>"$config"
    done
  fi
  tccd_data=$dir/tccd
  start_server "tccd-$stack_count" "$tccd_bin" \
    --config "$config" --data-dir "$tccd_data" \
    --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 "${participants[@]}"
  tccd_target=127.0.0.1:$server_port
  tccd_pids="$server_pid$bank_pids"
  tccd_roles="tccd,py-bank-a,py-bank-b"
}

# metric URL NAME: the value of an unlabelled metric in a /metrics page (0 if
# absent; used once before and once after a run, outside the timed part).
metric() {
  curl -s --max-time 5 "$1" 2>/dev/null |
    awk -v n="$2" '$1 == n { v = $2 } END { printf "%.0f\n", v + 0 }'
}
now_s() { date +%s.%N; }
# cpu_s PID: the CPU seconds (user + system) PID has used so far (0 if gone).
cpu_s() {
  awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.2f\n", ($12 + $13) / hz }' \
    "/proc/$1/stat" 2>/dev/null || echo 0
}

# Recovery: 100,000 transactions registered durably and left in TRYING, in
# one of two ways ($1):
#   unsent      tccd runs with failpoint driver.before_try_send=error: no
#               Try leaves (as if it crashed right after each registration
#               was durable); after the restart each branch is asked (Query:
#               nothing there), then tried, then confirmed;
#   unanswered  tccd runs with failpoint driver.drop_try_reply=error: every
#               Try runs at its bank and its answer is lost (as if tccd
#               crashed with the Trys in flight); after the restart each
#               branch is asked (Query: TRIED), then confirmed.
# tccd also runs with limits.max_in_flight raised; tcc-bench --register
# submits them with wait_for ACCEPTED (try-deadline 10 minutes, so recovery
# has time to send them); for "unanswered" the script waits until tccd has
# had every Try's answer (and dropped it); then tccd is killed (SIGKILL) and
# restarted without the failpoint, and the time from its start until all of
# them are final (its tccd_transactions_total{event=confirmed|cancelled}
# reach the count) gives transactions/s. Sets recovery_tps (0 if it could not
# be measured) and appends to recovery_note; details in
# $run_dir/recovery-$1.log.
measure_recovery() {
  local mode=$1
  local rlog=$run_dir/recovery-$mode.log
  local failpoint="driver.before_try_send=error"
  local how="registered durably, no Try sent"
  if [[ $mode == unanswered ]]; then
    failpoint="driver.drop_try_reply=error"
    how="registered durably, every Try run by its bank and its answer lost"
  fi
  recovery_tps=0
  start_tccd_stack normal || return 0
  local tccd_pid=${tccd_pids%%,*}
  local banks=${tccd_pids#*,}
  local config=$run_dir/tccd-recovery.yaml
  sed 's/^\(  max_in_flight:\) *[0-9]*/\1 1000000/' "$tccd_config" >"$config"
  # Restart this stack's tccd with the failpoint and the raised limit.
  stop_pids "$tccd_pid"
  rm -rf "$tccd_data"
  TCC_FAILPOINTS=$failpoint start_server "tccd-fill-$mode" \
    "$tccd_bin" --config "$config" --data-dir "$tccd_data" \
    --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 "${tccd_participants[@]}"
  tccd_pid=$server_pid
  local fill_url
  fill_url=$(sed -n 's/^metrics: \(http:[^ ]*\)$/\1/p' \
             "$run_dir/tccd-fill-$mode.log" | head -n1)
  local rc=0
  timeout --kill-after=5 300 "$bin/tcc-bench" --target "127.0.0.1:$server_port" \
    --register "$recovery_count" --concurrency 64 --try-timeout-ms 600000 \
    --payload-format bank --payload-bytes 100 --participants bank-a,bank-b \
    --accounts 10000 >"$rlog" 2>&1 || rc=$?
  if [[ $rc == 0 && $mode == unanswered ]]; then
    # Every Try answered (and the answer dropped): 2 per transaction.
    local answered
    answered=$("$bin/tcc-metric-wait" --url "$fill_url" \
      --prefix 'tccd_branch_calls_total{' --contains 'phase="try"' \
      --at-least $(( 2 * recovery_count )) --timeout-s 300 --interval-ms 200 |
      sed -n 's/^value=\([0-9]*\).*/\1/p') || true  # short: checked below
    answered=${answered:-0}
    echo "Try answers dropped before the kill: $answered" >>"$rlog"
    (( answered >= 2 * recovery_count )) || rc=1
  fi
  echo "load average after registering: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$rlog"
  kill -KILL "$tccd_pid" 2>/dev/null || true
  wait "$tccd_pid" 2>/dev/null || true
  if [[ $rc != 0 ]]; then
    echo "bench.sh: recovery ($mode): registering failed (exit $rc)" >&2
    cat "$rlog" >&2
    total_errors=$((total_errors + 1))
    return 0
  fi
  local t0 t1 done_count=0 bank_pid bank_cpu0=0 bank_cpu1=0
  for bank_pid in ${banks//,/ }; do
    bank_cpu0=$(awk -v a="$bank_cpu0" -v b="$(cpu_s "$bank_pid")" 'BEGIN { print a + b }')
  done
  t0=$(now_s)
  start_server "tccd-recover-$mode" "$tccd_bin" --config "$config" \
    --data-dir "$tccd_data" --listen 127.0.0.1:0 \
    --metrics-listen 127.0.0.1:0 "${tccd_participants[@]}"
  local recover_pid=$server_pid
  local url
  url=$(sed -n 's/^metrics: \(http:[^ ]*\)$/\1/p' \
        "$run_dir/tccd-recover-$mode.log" | head -n1)
  # One poller every 20 ms (a curl and an awk per poll took a tenth of the
  # machine from the processes being timed).
  done_count=$("$bin/tcc-metric-wait" --url "$url" \
    --prefix 'tccd_transactions_total{event="c' \
    --at-least "$recovery_count" --timeout-s 300 |
    sed -n 's/^value=\([0-9]*\).*/\1/p') || true  # short: reported below
  t1=$(now_s)
  done_count=${done_count:-0}
  local tccd_cpu
  tccd_cpu=$(cpu_s "$recover_pid")
  for bank_pid in ${banks//,/ }; do
    bank_cpu1=$(awk -v a="$bank_cpu1" -v b="$(cpu_s "$bank_pid")" 'BEGIN { print a + b }')
  done
  local secs bank_cpu
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  bank_cpu=$(awk -v a="$bank_cpu0" -v b="$bank_cpu1" 'BEGIN { printf "%.2f", b - a }')
  {
    echo "recovered ($mode): $done_count of $recovery_count final in $secs s (from tccd start)"
    echo "recovery CPU: tccd $tccd_cpu s, the two banks $bank_cpu s"
    curl -s --max-time 5 "$url" |
      grep -E '^tccd_(transactions_total|recovery|wal_sync|lookups|unknown_resolved)' || true
    echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  } >>"$rlog"
  cat "$rlog" >&2
  if (( done_count < recovery_count )); then
    echo "bench.sh: recovery ($mode): only $done_count of $recovery_count final in time" >&2
    recovery_note+="Recovery ($how): only $done_count of $recovery_count transactions left in TRYING were final $secs s after tccd restarted (not counted as a rate). "
    total_errors=$((total_errors + 1))
    return 0
  fi
  recovery_tps=$(awk -v n="$recovery_count" -v a="$t0" -v b="$t1" \
    'BEGIN { printf "%.0f", n / (b - a) }')
  recovery_note+="Recovery ($how): $recovery_count transactions left in TRYING were all final $secs s after tccd restarted: $recovery_tps tx/s; CPU used meanwhile: tccd $tccd_cpu s, the two banks $bank_cpu s (load average $(cut -d' ' -f1 /proc/loadavg)). "
}

table_rows=()
wal_note=""
recovery_note=""
total_errors=0
# Per-run results, set by run_bench.
# r_cpu is "ROLE CPU_S_PER_1K, ..." (tcc-bench last); r_cpu_first is the
# first role's figure alone (tccd's in a tccd stack: its CPU ms per
# transaction).
r_tps=0 r_p50=0 r_p99=0 r_p999=0 r_max=0 r_errors=0 r_cpu="" r_cpu_first=""

# cpu_ticks: "STEAL TOTAL", the machine's CPU ticks stolen by the hypervisor
# and in all, from /proc/stat (0 0 where there is none).
cpu_ticks() {
  awk '$1 == "cpu" { t = 0; for (i = 2; i <= NF; i++) t += $i;
                     print $9 + 0, t; found = 1 }
       END { if (!found) print 0, 0 }' /proc/stat 2>/dev/null || echo 0 0
}
# steal_pct BEFORE AFTER: percent of the CPU time between the two stolen.
steal_pct() {
  awk -v b="$1" -v a="$2" 'BEGIN { split(b, x, " "); split(a, y, " ");
    t = y[2] - x[2]; printf "%.1f", (t > 0 ? 100 * (y[1] - x[1]) / t : 0) }'
}

# Thread hand-offs (issue 20): while a run measures, `perf stat` counts each
# process's context switches, futex calls (syscalls:sys_enter_futex) and all
# its syscalls (raw_syscalls:sys_enter: on a paravirtualized guest every
# kernel entry traps to the hypervisor, and that, more than the switches,
# is what a transaction's CPU goes to at C=1; README, session 30);
# handoff_counts NAME:PID,... starts it for the measured window (after the
# warm-up) and handoff_report LABEL TPS adds "per transaction" figures to
# handoff_note. Without perf (or its tracepoints) it says so instead.
# Which threads switch: each process's threads are read from /proc at both
# ends of the same window (thread_switches), and the report gives the
# switches (voluntary + involuntary) and CPU per transaction of each group
# of threads by name (gRPC's nexting_thread, the process's own, RocksDB's).
handoff_note=""
handoff_jobs=()
handoff_counts() {
  handoff_jobs=()
  local entry name pid have_perf=0
  command -v perf >/dev/null 2>&1 && have_perf=1
  IFS=, read -r -a entries <<<"$1"
  for entry in "${entries[@]}"; do
    name=${entry%%:*} pid=${entry#*:}
    local base=$run_dir/handoffs-$name-${#table_rows[@]}
    (sleep "$warmup_s"
     thread_switches "$pid" >"$base.threads-before"
     if [[ $have_perf == 1 ]]; then
       perf stat -x, \
         -e context-switches,syscalls:sys_enter_futex,raw_syscalls:sys_enter \
         -p "$pid" -- sleep "$duration_s" 2>"$base.csv" >/dev/null
     else
       sleep "$duration_s"
     fi
     thread_switches "$pid" >"$base.threads-after") >/dev/null 2>&1 &
    handoff_jobs+=("$name:$!")
  done
}
# thread_switches PID: "TID NAME SWITCHES CPU_TICKS" for each of its threads,
# in one pass (it runs inside the measured window): grep names each line's
# file and skips a thread that exits meanwhile.
thread_switches() {
  { grep -H -E '^(Name|(non)?voluntary_ctxt_switches):' \
      /proc/"$1"/task/*/status
    grep -H '' /proc/"$1"/task/*/stat
  } 2>/dev/null | awk '
    { split($0, p, "/"); tid = p[5] }
    p[6] ~ /^status:Name:/ { s = $0; sub(/^[^\t]*\t/, "", s); gsub(/ /, "_", s)
                             name[tid] = s; next }
    p[6] ~ /^status:/ { sw[tid] += $2; next }
    { s = $0; sub(/.*\) /, "", s); split(s, f, " "); cpu[tid] = f[12] + f[13] }
    END { for (t in name) print t, name[t], sw[t] + 0, cpu[t] + 0 }'
}
# thread_groups BEFORE AFTER TRANSACTIONS: the three groups of threads (by
# name) that switched most, with switches and CPU ms per transaction.
thread_groups() {
  awk -v n="$3" -v hz="$(getconf CLK_TCK)" '
    FNR == NR { s0[$1] = $3; c0[$1] = $4; next }
    { sw[$2] += $3 - s0[$1]; cpu[$2] += $4 - c0[$1] }
    END {
      if (n <= 0) { print "?"; exit }
      for (k = 0; k < 3; k++) {
        best = ""
        for (g in sw) if (!(g in done) && (best == "" || sw[g] > sw[best])) best = g
        if (best == "" || sw[best] <= 0) break
        done[best] = 1
        printf "%s%s %.1f (%.3f ms CPU)", (k ? ", " : ""), best, sw[best] / n,
          1000 * cpu[best] / hz / n
      }
    }' "$1" "$2"
}
handoff_report() {
  local label=$1 tps=$2 entry name pid cs fx sc out=""
  local n groups
  n=$(awk -v t="$tps" -v d="$duration_s" 'BEGIN { print t * d }')
  for entry in "${handoff_jobs[@]}"; do
    name=${entry%%:*} pid=${entry#*:}
    wait "$pid" 2>/dev/null || true
    local base=$run_dir/handoffs-$name-$((${#table_rows[@]} - 1))
    local csv=$base.csv
    cs=$(awk -F, '$3 == "context-switches" { print $1 }' "$csv" 2>/dev/null)
    fx=$(awk -F, '$3 == "syscalls:sys_enter_futex" { print $1 }' "$csv" 2>/dev/null)
    sc=$(awk -F, '$3 == "raw_syscalls:sys_enter" { print $1 }' "$csv" 2>/dev/null)
    groups=$(thread_groups "$base.threads-before" "$base.threads-after" "$n" \
             2>/dev/null)
    out+="${out:+; }$name $(awk -v c="${cs:-}" -v f="${fx:-}" -v s="${sc:-}" \
      -v n="$n" 'BEGIN { if (n <= 0 || c == "" || f == "") { print "? (no perf)"; exit }
        printf "%.1f context switches, %.1f futex calls", c / n, f / n
        if (s ~ /^[0-9]+$/) printf ", %.1f syscalls", s / n }')"
    out+=" [by thread: ${groups:-?}]"
  done
  handoff_note+="$label, per transaction (perf stat over the measured ${duration_s} s; by thread from /proc, switches voluntary and not): $out. "
  echo "bench.sh: hand-offs $label: $out" >&2
}

# field KEY LINE: the value of KEY=VALUE in LINE.
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }

# run_bench LABEL TARGET PIDS ROLES TCC-BENCH-ARGS...: one tcc-bench run (in
# bounded time), its row added to the table, its figures in r_*.
run_bench() {
  local label=$1 target=$2 pids=$3 roles=$4
  shift 4
  local log=$run_dir/bench-${#table_rows[@]}.log
  local limit
  limit=$(awk -v d="$duration_s" -v w="$warmup_s" 'BEGIN { print int(d + w + 60) }')
  echo "bench.sh: $label ..." >&2
  local rc=0 ticks_before
  ticks_before=$(cpu_ticks)
  timeout --kill-after=5 "$limit" "$bin/tcc-bench" --target "$target" \
    --duration-s "$duration_s" --warmup-s "$warmup_s" \
    --participants bank-a,bank-b --accounts 10000 --payload-format bank \
    --pids "$pids" "$@" \
    >"$log" 2>&1 || rc=$?
  local steal
  steal=$(steal_pct "$ticks_before" "$(cpu_ticks)")
  local line
  line=$(grep '^bench: ' "$log" | tail -n1 || true)
  if [[ -z $line ]]; then
    echo "bench.sh: $label failed (exit $rc); its output:" >&2
    cat "$log" >&2
    r_tps=0 r_p50=0 r_p99=0 r_p999=0 r_max=0 r_errors=1 r_cpu="" r_cpu_first=""
    total_errors=$((total_errors + 1))
    table_rows+=("| $label | failed (exit $rc) | | | | | | | | |")
    return 0
  fi
  r_tps=$(field tps "$line") r_p50=$(field p50_ms "$line")
  r_p99=$(field p99_ms "$line") r_p999=$(field p999_ms "$line")
  r_max=$(field max_ms "$line") r_errors=$(field errors "$line")
  total_errors=$((total_errors + r_errors))
  # CPU per 1,000 transactions, by role (pids are in the order of roles).
  local cpu="" i=0 role pid per_1k
  IFS=, read -r -a role_list <<<"$roles,tcc-bench"
  IFS=, read -r -a pid_list <<<"$pids"
  for role in "${role_list[@]}"; do
    pid=${pid_list[$i]:-}
    if [[ -n $pid ]]; then
      per_1k=$(sed -n "s/^bench-cpu: pid=$pid .*cpu_s_per_1k=\([^ ]*\).*/\1/p" "$log")
    else  # tcc-bench itself is the last bench-cpu line
      per_1k=$(grep '^bench-cpu: ' "$log" | tail -n1 |
               sed -n 's/.*cpu_s_per_1k=\([^ ]*\).*/\1/p')
    fi
    cpu+="${cpu:+, }$role ${per_1k:-?}"
    [[ $i == 0 ]] && r_cpu_first=${per_1k:-?}
    i=$((i + 1))
  done
  r_cpu=$cpu
  table_rows+=("| $label | $r_tps | $r_p50 | $r_p99 | $r_p999 | $r_max | $r_errors | $cpu | $(cut -d' ' -f1 /proc/loadavg) | $steal |")
}

# The set of runs against one target. Sets headline_tps, headline_p50,
# headline_p99, single_p50, half_load_p99.
run_set() {
  local name=$1 target=$2 pids=$3 roles=$4
  local metrics_url=${5:-} s0=0 a0=0 t0=0
  if [[ -n $metrics_url ]]; then
    s0=$(metric "$metrics_url" tccd_wal_syncs)
    a0=$(metric "$metrics_url" tccd_wal_synced_appends)
    t0=$(now_s)
  fi
  [[ -n ${handoff_pids:-} ]] && handoff_counts "$handoff_pids"
  run_bench "$name: C=64, 2 branches, 100 B" "$target" "$pids" "$roles" \
    --concurrency 64 --branches 2 --payload-bytes 100
  headline_tps=$r_tps headline_p50=$r_p50 headline_p99=$r_p99
  [[ -n ${handoff_pids:-} ]] && handoff_report "$name C=64" "$r_tps"
  if [[ -n $metrics_url ]]; then
    local s1 a1 t1
    s1=$(metric "$metrics_url" tccd_wal_syncs)
    a1=$(metric "$metrics_url" tccd_wal_synced_appends)
    t1=$(now_s)
    wal_note=$(awk -v s="$((s1 - s0))" -v a="$((a1 - a0))" -v t0="$t0" \
      -v t1="$t1" 'BEGIN { printf "tccd WAL during the headline run (warm-up included): %.0f fsyncs/s, mean group %.2f durable appends per fsync (%d fsyncs, %d appends in %.1f s)", s / (t1 - t0), (s > 0 ? a / s : 0), s, a, t1 - t0 }')
    echo "bench.sh: $wal_note" >&2
  fi
  [[ -n ${handoff_pids:-} ]] && handoff_counts "$handoff_pids"
  run_bench "$name: C=1" "$target" "$pids" "$roles" \
    --concurrency 1 --branches 2 --payload-bytes 100
  single_p50=$r_p50
  [[ -n ${handoff_pids:-} ]] && handoff_report "$name C=1" "$r_tps"
  local half
  half=$(awk -v t="$headline_tps" 'BEGIN { printf "%.1f", t / 2 }')
  half_load_p99=0
  if awk -v h="$half" 'BEGIN { exit !(h > 0) }'; then
    run_bench "$name: open loop at $half/s (half of C=64)" "$target" "$pids" \
      "$roles" --rate "$half" --branches 2 --payload-bytes 100
    half_load_p99=$r_p99
  fi
  if [[ $quick == 0 ]]; then
    local c b
    for c in 16 256; do
      run_bench "$name: C=$c" "$target" "$pids" "$roles" \
        --concurrency "$c" --branches 2 --payload-bytes 100
    done
    for b in 1 4 8; do
      run_bench "$name: C=64, $b branches" "$target" "$pids" "$roles" \
        --concurrency 64 --branches "$b" --payload-bytes 100
    done
    run_bench "$name: C=64, 16 KiB payloads" "$target" "$pids" "$roles" \
      --concurrency 64 --branches 2 --payload-bytes 16384
  fi
}

# start_etcd MEMBERS: a loopback etcd of MEMBERS members (scripts/etcd.sh,
# stopped at exit whatever happens, and by etcd.sh itself once this script is
# gone); sets etcd_env, etcd_endpoints and etcd_pids (comma-separated, m1
# first).
start_etcd() {
  etcd_env=$run_dir/etcd.env
  if ! scripts/etcd.sh start --members "$1" --owner-pid $$ "$etcd_env" \
      >"$run_dir/etcd-start.log" 2>&1; then
    echo "bench.sh: etcd did not start; scripts/etcd.sh said:" >&2
    cat "$run_dir/etcd-start.log" >&2
    exit 1
  fi
  etcd_endpoints=$(sed -n 's/^export TCC_ETCD_ENDPOINTS=//p' "$etcd_env")
  etcd_pids=$(scripts/etcd.sh pids "$etcd_env" | paste -sd, -)
}
# Which member leads (etcd-N in the tables is member mN; tccd's client
# talks to the first endpoint, m1, while it answers).
etcd_leader() {
  ETCDCTL_API=3 /usr/bin/etcdctl --endpoints "$etcd_endpoints" \
    --command-timeout 5s endpoint status -w json 2>/dev/null |
    python3 -c 'import json, sys
s = json.load(sys.stdin)
print(next((f"m{i + 1}" for i, e in enumerate(s)
            if e["Status"]["header"]["member_id"] == e["Status"]["leader"]), "?"))' \
    2>/dev/null || echo "?"
}
# metric_sum NAME URL...: the sum over the pages of every sample of NAME,
# whatever its labels (0 if absent).
metric_sum() {
  local name=$1 url total=0 v
  shift
  for url in "$@"; do
    v=$(curl -s --max-time 5 "$url" 2>/dev/null |
      awk -v n="$name" '$1 == n || index($1, n "{") == 1 { v += $2 }
                        END { printf "%.0f\n", v + 0 }')
    total=$((total + ${v:-0}))
  done
  echo "$total"
}
# etcd_counts URL...: "TXNS APPENDS CLIENT_TXNS ACCEPTED FORWARDED" now,
# summed over the nodes (the etcd counters are sampled by tccd every 250 ms:
# read after a pause; a transaction is accepted by its shard's owner only).
etcd_counts() {
  sleep 0.5
  echo "$(metric_sum tccd_etcd_txns_total "$@") $(metric_sum tccd_etcd_appends_total "$@")" \
    "$(metric_sum tccd_etcd_client_txns_total "$@")" \
    "$(metric_sum 'tccd_transactions_total{event="accepted"}' "$@")" \
    "$(metric_sum tccd_cluster_forwarded_calls_total "$@")"
}
# etcd_ratios BEFORE AFTER: "TXNS_PER_TX APPENDS_PER_TXN CLIENT_TXNS_PER_TX
# TXNS APPENDS TRANSACTIONS FORWARDED_PER_TX".
etcd_ratios() {
  awk -v b="$1" -v a="$2" 'BEGIN { split(b, x, " "); split(a, y, " ");
    t = y[1] - x[1]; n = y[2] - x[2]; c = y[3] - x[3]; tx = y[4] - x[4];
    f = y[5] - x[5];
    printf "%.3f %.2f %.3f %d %d %d %.3f\n", (tx > 0 ? t / tx : 0),
      (t > 0 ? n / t : 0), (tx > 0 ? c / tx : 0), t, n, tx,
      (tx > 0 ? f / tx : 0) }'
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
ticks_start=$(cpu_ticks)

# median V...: the median of the values.
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# The same to three decimals (ratios, calls per transaction).
# table_lines: the Markdown table of every run so far (header and rows).
table_lines() {
  echo "| run | tx/s | p50 ms | p99 ms | p99.9 ms | max ms | errors | CPU s per 1,000 tx | load avg (1 min) after | CPU stolen % |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${table_rows[@]}"
}
# machine_line [CORES]: the machine, its load before and now, CPU stolen.
machine_line() {
  echo "Machine: ${1:-$(nproc)} cores ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)), load average before $load_before, after $(cut -d' ' -f1-3 /proc/loadavg); CPU time stolen by the hypervisor over the whole set: $(steal_pct "$ticks_start" "$(cpu_ticks)")%."
}

median3() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

if [[ $python_banks == 1 ]]; then
  py_path="$build_dir/participant-sdk/python/gen:$PWD/participant-sdk/python/src:$PWD/participant-sdk/python/examples/bank"
  if [[ ! -f $build_dir/participant-sdk/python/gen/tcc/v1/participant_pb2.py ]]; then
    echo "bench.sh: the Python stubs are missing in $build_dir (build first)" >&2
    exit 1
  fi
  if [[ $python_store == postgres ]]; then
    pg_env=$run_dir/postgres.env
    scripts/pg.sh start "$pg_env" >/dev/null
    pg_url=$(sed -n 's/^export TCC_PG_URL=//p' "$pg_env")
  fi
  headline=(--concurrency 64 --branches 2 --payload-bytes 100)
  cpp_tps=0
  if start_tccd_stack normal; then
    run_bench "C++ banks (gRPC, RocksDB): C=64, 2 branches, 100 B" "$tccd_target" \
      "$tccd_pids" "$tccd_roles" "${headline[@]}"
    cpp_tps=$r_tps
    cleanup
  fi
  http_tps=() grpc_tps=() http_p50=() grpc_p50=() http_p99=() grpc_p99=()
  for round in $(seq "$python_rounds"); do
    for protocol in http grpc; do
      start_python_stack "$protocol"
      over=$protocol
      if [[ $protocol == http ]]; then over="http, batch $python_http_batch"; fi
      run_bench "Python banks over $over ($python_store), round $round: C=64, 2 branches, 100 B" \
        "$tccd_target" "$tccd_pids" "$tccd_roles" "${headline[@]}"
      if [[ $protocol == http ]]; then
        http_tps+=("$r_tps") http_p50+=("$r_p50") http_p99+=("$r_p99")
      else
        grpc_tps+=("$r_tps") grpc_p50+=("$r_p50") grpc_p99+=("$r_p99")
      fi
      cleanup
    done
  done
  h=$(median "${http_tps[@]}") g=$(median "${grpc_tps[@]}")
  ratio=$(awk -v h="$h" -v g="$g" 'BEGIN { if (h > 0 && g > 0) printf "%.3f", h / g; else print 0 }')
  mkdir -p "$(dirname "$out")"
  {
    table_lines
    echo
    echo "Medians of $python_rounds alternating rounds: Python banks over HTTP (batch $python_http_batch) $h tx/s (p50 $(median "${http_p50[@]}") ms, p99 $(median "${http_p99[@]}") ms), over gRPC $g tx/s (p50 $(median "${grpc_p50[@]}") ms, p99 $(median "${grpc_p99[@]}") ms): HTTP/gRPC $ratio. C++ banks: $cpp_tps tx/s."
    machine_line
    echo "Runs: ${duration_s} s measured after ${warmup_s} s warm-up each, loopback; tccd with $tccd_config."
  } | tee "$out"
  echo "bench.sh: table written to $out; logs in $run_dir" >&2
  echo "tcc-bench-python: http_tps=$h grpc_tps=$g ratio=$ratio" \
       "http_p50_ms=$(median "${http_p50[@]}") http_p99_ms=$(median "${http_p99[@]}")" \
       "grpc_p50_ms=$(median "${grpc_p50[@]}") grpc_p99_ms=$(median "${grpc_p99[@]}")" \
       "cpp_tps=$cpp_tps store=$python_store http_batch=$python_http_batch errors=$total_errors"
  exit 0
fi

if [[ $soak_s -gt 0 ]]; then
  # One etcd stack under the headline load for soak_s seconds, sampled.
  start_etcd 3
  start_tccd_stack etcd || { echo "bench.sh: tccd or tcc-bank is missing" >&2; exit 1; }
  samples=$run_dir/soak-samples.txt
  : >"$samples"
  # sample: "SECONDS FINISHED DB_MAX IN_USE_MAX KEYS NOSPACE" (the largest
  # over the members).
  sample() {
    local t=$1 ep m db=0 use=0 keys=0 nospace=0
    for ep in ${etcd_endpoints//,/ }; do
      m=$(curl -s --max-time 5 "http://$ep/metrics" 2>/dev/null || true)
      read -r d u k <<<"$(awk '$1 == "etcd_mvcc_db_total_size_in_bytes" { d = $2 }
        $1 == "etcd_mvcc_db_total_size_in_use_in_bytes" { u = $2 }
        $1 == "etcd_debugging_mvcc_keys_total" { k = $2 }
        END { printf "%.0f %.0f %.0f\n", d, u, k }' <<<"$m")"
      ((d > db)) && db=$d
      ((u > use)) && use=$u
      ((k > keys)) && keys=$k
    done
    if ETCDCTL_API=3 /usr/bin/etcdctl --endpoints "$etcd_endpoints" \
        --command-timeout 5s alarm list 2>/dev/null | grep -q NOSPACE; then
      nospace=1
    fi
    local done_tx
    done_tx=$(($(metric_sum 'tccd_transactions_total{event="confirmed"}' "$tccd_metrics") +
               $(metric_sum 'tccd_transactions_total{event="cancelled"}' "$tccd_metrics")))
    echo "$t $done_tx $db $use $keys $nospace" >>"$samples"
  }
  # Samples from the load's start (tcc-bench's, give or take its set-up),
  # on one clock: the parent's.
  soak_start=$SECONDS
  (
    nap=""
    trap 'kill ${nap:-} 2>/dev/null; exit 0' TERM
    while true; do
      sample $((SECONDS - soak_start))
      sleep 15 &
      nap=$!
      wait "$nap"
    done
  ) &
  sampler=$!
  duration_s=$soak_s warmup_s=0
  run_bench "tccd on etcd (3 members): C=64, 2 branches, 100 B, for $soak_s s" \
    "$tccd_target" "$tccd_pids,$etcd_pids" "$tccd_roles,etcd-1,etcd-2,etcd-3" \
    --concurrency 64 --branches 2 --payload-bytes 100
  kill "$sampler" 2>/dev/null || true
  wait "$sampler" 2>/dev/null || true
  sample $((SECONDS - soak_start))
  cleanup
  read -r tps_first tps_last db_max use_last kb_per_tx nospace <<<"$(awk '
    { t[NR] = $1; f[NR] = $2; d[NR] = $3; u[NR] = $4; n[NR] = $6 }
    END {
      # the first and the last minute (the samples nearest 60 s apart)
      a = 1; for (i = 1; i <= NR; i++) if (t[i] <= 60) a = i
      b = NR; for (i = NR; i >= 1; i--) if (t[NR] - t[i] <= 60) b = i
      first = (t[a] > t[1]) ? (f[a] - f[1]) / (t[a] - t[1]) : 0
      last = (t[NR] > t[b]) ? (f[NR] - f[b]) / (t[NR] - t[b]) : 0
      dm = 0; ns = 0
      for (i = 1; i <= NR; i++) { if (d[i] > dm) dm = d[i]; if (n[i]) ns = 1 }
      kb = (f[a] > f[1]) ? (d[a] - d[1]) / (f[a] - f[1]) / 1024 : 0
      printf "%.1f %.1f %.0f %.0f %.2f %d\n", first, last, dm / 1048576,
        u[NR] / 1048576, kb, ns
    }' "$samples")"
  mkdir -p "$(dirname "$out")"
  {
    table_lines
    echo
    echo "Samples (seconds, transactions finished, the largest member's database MB and MB in use, keys, NOSPACE alarm):"
    echo
    awk '{ printf "- %d s: %d finished, db %.0f MB (in use %.0f MB), %d keys%s\n",
      $1, $2, $3 / 1048576, $4 / 1048576, $5, $6 ? ", NOSPACE" : "" }' "$samples"
    echo
    machine_line
    echo "Run: ${soak_s} s, no warm-up, loopback; tccd with $tccd_config (fsync on; its cluster section replaced: one node, 64 shards), banks on the RocksDB barrier (synced), etcd $(/usr/bin/etcd --version 2>/dev/null | sed -n 's/^etcd Version: //p') with 3 members on this machine (scripts/etcd.sh's flags: $(grep -o -- '--auto-compaction-retention [^ ]*' "$(sed -n 's/^export TCC_ETCD_DIR=//p' "$etcd_env")/m1.cmd" 2>/dev/null || echo '?'))."
  } | tee "$out"
  echo "tcc-bench-soak: seconds=$soak_s tps=$r_tps tps_first_min=$tps_first" \
       "tps_last_min=$tps_last db_mb_max=$db_max db_in_use_mb_last=$use_last" \
       "kb_per_tx=$kb_per_tx nospace=$nospace errors=$total_errors"
  exit 0
fi

if [[ $etcd_mode == 1 ]]; then
  # The same two cases on each store, each stack stopped before the next
  # starts; etcd runs from the start (its members idle during the
  # RocksDB runs) and is stopped at exit whatever happens.
  start_etcd "$etcd_members"
  headline=(--concurrency 64 --branches 2 --payload-bytes 100)
  single=(--concurrency 1 --branches 2 --payload-bytes 100)
  rocksdb_single_p50=0 rocksdb_single_p99=0 rocksdb_single_tps=0
  etcd_single_tps=0 etcd_single_p50=0 etcd_single_p99=0 etcd_note=""
  etcd_roles=""
  r_tps_all=() r_p50_all=() r_p99_all=() e_tps_all=() e_p50_all=()
  e_p99_all=() ratio_all=() txns_all=() appends_all=()
  for round in $(seq "$etcd_rounds"); do
    last=0
    [[ $round == "$etcd_rounds" ]] && last=1
    of=""
    [[ $etcd_rounds -gt 1 ]] && of=" (round $round of $etcd_rounds)"
    if start_tccd_stack normal; then
      run_bench "tccd on RocksDB: C=64, 2 branches, 100 B$of" \
        "$tccd_target" "$tccd_pids" "$tccd_roles" "${headline[@]}"
      r_tps_all+=("$r_tps") r_p50_all+=("$r_p50") r_p99_all+=("$r_p99")
      round_rocksdb=$r_tps
      if [[ $last == 1 ]]; then
        run_bench "tccd on RocksDB: C=1" "$tccd_target" "$tccd_pids" \
          "$tccd_roles" "${single[@]}"
        rocksdb_single_tps=$r_tps rocksdb_single_p50=$r_p50
        rocksdb_single_p99=$r_p99
      fi
      cleanup
    else
      echo "bench.sh: tccd or tcc-bank is missing in $build_dir" >&2
      exit 1
    fi
    if start_tccd_stack etcd; then
      etcd_roles=$tccd_roles
      for m in $(seq "$etcd_members"); do etcd_roles+=",etcd-$m"; done
      etcd_all_pids="$tccd_pids,$etcd_pids"
      before=$(etcd_counts "$tccd_metrics")
      run_bench "tccd on etcd ($etcd_members members): C=64, 2 branches, 100 B$of" \
        "$tccd_target" "$etcd_all_pids" "$etcd_roles" "${headline[@]}"
      e_tps_all+=("$r_tps") e_p50_all+=("$r_p50") e_p99_all+=("$r_p99")
      ratio_all+=("$(awk -v e="$r_tps" -v r="$round_rocksdb" \
        'BEGIN { if (e > 0 && r > 0) printf "%.3f", e / r; else print 0 }')")
      after=$(etcd_counts "$tccd_metrics")
      read -r per_tx per_txn client_per_tx t n tx _ \
        <<<"$(etcd_ratios "$before" "$after")"
      txns_all+=("$per_tx") appends_all+=("$per_txn")
      etcd_note+="Leader during the C=64 run$of: $(etcd_leader). C=64$of: $t group-commit etcd Txns for $tx transactions ($per_tx per transaction), $n appends committed ($per_txn per Txn); every etcd Txn of the node's client (reads included): $client_per_tx per transaction. "
      if [[ $last == 1 ]]; then
        before=$after
        run_bench "tccd on etcd ($etcd_members members): C=1" "$tccd_target" \
          "$etcd_all_pids" "$etcd_roles" "${single[@]}"
        etcd_single_tps=$r_tps etcd_single_p50=$r_p50 etcd_single_p99=$r_p99
        after=$(etcd_counts "$tccd_metrics")
        read -r s_per_tx s_appends s_client t n tx _ \
          <<<"$(etcd_ratios "$before" "$after")"
        etcd_note+="C=1: $t group-commit etcd Txns for $tx transactions ($s_per_tx per transaction), $n appends committed ($s_appends per Txn); every etcd Txn of the client: $s_client per transaction. "
      fi
      cleanup
    else
      e_tps_all+=(0) ratio_all+=(0)
    fi
  done
  echo "bench.sh: etcd: $etcd_note" >&2
  # One round: its figures; several: the medians (the ratio: of the
  # rounds' own ratios).
  rocksdb_tps=$(median "${r_tps_all[@]}") rocksdb_p50=$(median "${r_p50_all[@]}")
  rocksdb_p99=$(median "${r_p99_all[@]}")
  etcd_tps=$(median "${e_tps_all[@]}") etcd_p50=$(median "${e_p50_all[@]}")
  etcd_p99=$(median "${e_p99_all[@]}")
  etcd_ratio=$(median3 "${ratio_all[@]}")
  etcd_txns_per_tx=$(median3 "${txns_all[@]}")
  appends_per_txn=$(median "${appends_all[@]}")
  if [[ $etcd_rounds -gt 1 ]]; then
    etcd_note+="Rounds (etcd / RocksDB tx/s at C=64, ratio): "
    for i in "${!e_tps_all[@]}"; do
      etcd_note+="${e_tps_all[$i]} / ${r_tps_all[$i]:-0} = ${ratio_all[$i]}; "
    done
    etcd_note+="the C=64 figures above are the medians. "
  fi
  mkdir -p "$(dirname "$out")"
  {
    table_lines
    echo
    echo "tccd on etcd against tccd on RocksDB at C=64: $etcd_tps / $rocksdb_tps tx/s = $etcd_ratio (p50 $etcd_p50 / $rocksdb_p50 ms, p99 $etcd_p99 / $rocksdb_p99 ms); at C=1: $etcd_single_tps / $rocksdb_single_tps tx/s (p50 $etcd_single_p50 / $rocksdb_single_p50 ms, p99 $etcd_single_p99 / $rocksdb_single_p99 ms). etcd's group commit (counted from tccd's /metrics, warm-up included): $etcd_note"
    machine_line
    echo "Runs: ${duration_s} s measured after ${warmup_s} s warm-up each, loopback; tccd with $tccd_config (fsync on; on etcd with its cluster section replaced: one node, 64 shards), banks on the RocksDB barrier (synced), etcd $(/usr/bin/etcd --version 2>/dev/null | sed -n 's/^etcd Version: //p') with $etcd_members members on this machine (scripts/etcd.sh: fsync on)."
  } | tee "$out"
  echo "bench.sh: table written to $out; logs in $run_dir" >&2
  echo "tcc-bench: etcd_tps=$etcd_tps rocksdb_tps=$rocksdb_tps" \
       "etcd_ratio=$etcd_ratio etcd_txns_per_tx=$etcd_txns_per_tx" \
       "appends_per_etcd_txn=$appends_per_txn" \
       "etcd_single_p50_ms=$etcd_single_p50 errors=$total_errors"
  exit 0
fi

if [[ $cluster_mode == 1 ]]; then
  # The RocksDB single node first, then 1, 2 and 3 nodes on one 3-member
  # etcd (started first, idle during the RocksDB runs, stopped at exit
  # whatever happens), each stack stopped before the next starts.
  start_etcd 3
  headline=(--concurrency 64 --branches 2 --payload-bytes 100)
  single=(--concurrency 1 --branches 2 --payload-bytes 100)
  rocksdb_tps=0 rocksdb_p50=0 rocksdb_p99=0 rocksdb_cpu=""
  rocksdb_single_tps=0 rocksdb_single_p50=0 rocksdb_single_p99=0
  if start_tccd_stack normal; then
    run_bench "tccd on RocksDB, 1 node: C=64, 2 branches, 100 B" \
      "$tccd_target" "$tccd_pids" "$tccd_roles" "${headline[@]}"
    rocksdb_tps=$r_tps rocksdb_p50=$r_p50 rocksdb_p99=$r_p99 rocksdb_cpu=$r_cpu
    run_bench "tccd on RocksDB, 1 node: C=1" "$tccd_target" "$tccd_pids" \
      "$tccd_roles" "${single[@]}"
    rocksdb_single_tps=$r_tps rocksdb_single_p50=$r_p50
    rocksdb_single_p99=$r_p99
    cleanup
  else
    echo "bench.sh: tccd, tccctl or tcc-bank is missing in $build_dir" >&2
    exit 1
  fi
  etcd_roles=",etcd-1,etcd-2,etcd-3"
  summary_rows=("| tccd on RocksDB, 1 node | $rocksdb_tps | $rocksdb_p50 | $rocksdb_p99 | $rocksdb_single_tps | $rocksdb_single_p50 | $rocksdb_single_p99 | - | - | - | - | $rocksdb_cpu |")
  declare -A c_tps c_cpu
  cluster_note=""
  for nodes in 1 2 3; do
    c_tps[$nodes]=0 c_cpu[$nodes]=""
    what="$nodes nodes"
    [[ $nodes == 1 ]] && what="1 node"
    start_cluster_stack "$nodes"
    all_pids="$cluster_pids,$etcd_pids" all_roles="$cluster_roles$etcd_roles"
    # shellcheck disable=SC2086  # cluster_metrics is a list of URLs
    before=$(etcd_counts $cluster_metrics)
    leader=$(etcd_leader)
    run_bench "cluster, $what on etcd (3 members): C=64, 2 branches, 100 B" \
      "$cluster_targets" "$all_pids" "$all_roles" "${headline[@]}"
    h_tps=$r_tps h_p50=$r_p50 h_p99=$r_p99 h_cpu=$r_cpu
    # shellcheck disable=SC2086
    after=$(etcd_counts $cluster_metrics)
    read -r per_tx per_txn client_per_tx t n tx fwd_per_tx \
      <<<"$(etcd_ratios "$before" "$after")"
    before=$after
    run_bench "cluster, $what on etcd (3 members): C=1" \
      "$cluster_targets" "$all_pids" "$all_roles" "${single[@]}"
    s_tps=$r_tps s_p50=$r_p50 s_p99=$r_p99
    # shellcheck disable=SC2086
    after=$(etcd_counts $cluster_metrics)
    read -r s_per_tx s_per_txn s_client s_t s_n s_tx s_fwd \
      <<<"$(etcd_ratios "$before" "$after")"
    c_tps[$nodes]=$h_tps c_cpu[$nodes]=$h_cpu
    [[ $nodes == 3 ]] && etcd_txns_per_tx_3=$per_tx
    summary_rows+=("| $what on etcd | $h_tps | $h_p50 | $h_p99 | $s_tps | $s_p50 | $s_p99 | $per_tx / $s_per_tx | $client_per_tx / $s_client | $per_txn / $s_per_txn | $fwd_per_tx / $s_fwd | $h_cpu |")
    cluster_note+="$what: settled $cluster_settle_s s after the first node started; etcd leader $leader; C=64: $t group-commit Txns, $n appends, $tx transactions; C=1: $s_t Txns, $s_n appends, $s_tx transactions. "
    echo "bench.sh: $what: $per_tx group-commit etcd Txns/tx, $client_per_tx client Txns/tx, $fwd_per_tx forwarded calls/tx at C=64" >&2
    cleanup
  done
  # On paper, from the 3-node C=64 run: 3 machines of $(nproc) cores each,
  # machine i running node i and etcd member i (the participants and the
  # load elsewhere). A machine is busy for its node's plus its member's CPU
  # seconds per transaction; the busiest node beside the busiest member
  # (m1: every node's client talks to the first endpoint, so m1 also serves
  # every call and forwards writes to the leader) bounds the cluster. Also:
  # etcd's work spread evenly (each node's client on its own machine's
  # member), etcd on machines of its own (its busiest member alone), the
  # nodes alone, a bank alone.
  cores=$(nproc)
  paper=$(awk -v c="${c_cpu[3]}" -v cores="$cores" 'BEGIN {
    k = split(c, parts, ", "); node = 0; member = 0; bank = 0; who = "?"
    for (i = 1; i <= k; i++) {
      split(parts[i], f, " "); v = f[2] + 0
      if (f[1] ~ /^node-/) { nsum += v; if (v > node) node = v }
      else if (f[1] ~ /^etcd-/) { esum += v; if (v > member) { member = v; who = f[1] } }
      else if (f[1] ~ /^bank-/) { if (v > bank) bank = v }
    }
    if (node <= 0 || member <= 0) { print "0 0 0 0 0 0 0 0 ? 0"; exit }
    printf "%.0f %.0f %.0f %.4f %.4f %.4f %.4f %.0f %s %.0f\n",
      cores * 1000 / (node + member), cores * 1000 / member,
      cores * 1000 / node, node, member, nsum, esum,
      (bank > 0 ? cores * 1000 / bank : 0), who,
      cores * 1000 / (nsum / 3 + esum / 3) }')
  read -r paper_tps paper_etcd_tps paper_node_tps paper_node paper_member \
    paper_nsum paper_esum paper_bank_tps paper_who paper_even_tps <<<"$paper"
  paper_note="On paper, 3 nodes on 3 machines of $cores cores each, machine i running node i and etcd member i, the banks and the load generator elsewhere, from the 3-node C=64 CPU figures (all 3 nodes $paper_nsum, all 3 members $paper_esum CPU-s per 1,000 tx; the busiest node $paper_node, the busiest member $paper_who $paper_member: every node's client talks to the first endpoint, m1, which serves every call and forwards writes to the leader): the machine with the busiest node and member saturates at $cores / ($paper_node + $paper_member) x 1,000 = $paper_tps tx/s; with each node's client on its own machine's member (etcd's work spread evenly) $cores / (($paper_nsum + $paper_esum) / 3) x 1,000 = $paper_even_tps tx/s. etcd on 3 machines of its own would bound it at $paper_etcd_tps tx/s (its busiest member's CPU), the 3 nodes on theirs at $paper_node_tps tx/s, a bank on a machine of its own at $paper_bank_tps tx/s. CPU ceilings only: a closed loop of 64 callers also needs 64 / p50 tx/s of latency, and each member would fsync its own disk."
  mkdir -p "$(dirname "$out")"
  {
    table_lines
    echo
    echo "| configuration | C=64 tx/s | p50 ms | p99 ms | C=1 tx/s | p50 ms | p99 ms | group-commit etcd Txns per tx (C=64 / C=1) | all client etcd Txns per tx | appends per group-commit Txn | forwarded calls per tx | CPU s per 1,000 tx at C=64, per process |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${summary_rows[@]}"
    echo
    echo "etcd and forwarding counted from the nodes' /metrics (summed over the nodes, warm-up included; a transaction is counted by its shard's owner, a forwarded call by the node that forwarded it). $cluster_note"
    echo
    echo "$paper_note"
    echo
    machine_line "$cores"
    echo "Runs: ${duration_s} s measured after ${warmup_s} s warm-up each, loopback; tccd with $tccd_config (fsync on; in cluster mode with its cluster section replaced: 64 shards, lease TTL 5 s, a fresh key prefix per node count), tcc-bench spreading the transactions round-robin over the nodes (one connection each), banks on the RocksDB barrier (synced), etcd $(/usr/bin/etcd --version 2>/dev/null | sed -n 's/^etcd Version: //p') with 3 members on this machine (scripts/etcd.sh: fsync on)."
  } | tee "$out"
  echo "bench.sh: table written to $out; logs in $run_dir" >&2
  echo "tcc-bench: cluster_tps_1=${c_tps[1]} cluster_tps_2=${c_tps[2]}" \
       "cluster_tps_3=${c_tps[3]} rocksdb_tps=$rocksdb_tps" \
       "etcd_txns_per_tx_3=${etcd_txns_per_tx_3:-0} errors=$total_errors"
  exit 0
fi

if [[ $payload_rounds -gt 0 ]]; then
  # One tccd stack for all its rounds, so that its WAL ages as a
  # coordinator's does (the later rounds flush and compact what the earlier
  # ones wrote, as in the full set, whose 16 KiB run comes after eight
  # others); then one baseline stack for as many rounds.
  pt_all=() pb_all=() pr_all=() pc_all=()
  if ! start_tccd_stack normal; then
    echo "bench.sh: tccd and the bank participants are not available" >&2
    exit 1
  fi
  for round in $(seq "$payload_rounds"); do
    run_bench "tccd: C=64, 16 KiB payloads (round $round of $payload_rounds)" \
      "$tccd_target" "$tccd_pids" "$tccd_roles" --concurrency 64 \
      --branches 2 --payload-bytes 16384
    pt_all+=("$r_tps")
    pc_all+=("${r_cpu_first:-0}")
  done
  cleanup
  start_baseline
  for round in $(seq "$payload_rounds"); do
    run_bench "baseline: C=64, 16 KiB payloads (round $round of $payload_rounds)" \
      "$baseline_target" "$baseline_pids" "$baseline_roles" \
      --concurrency 64 --branches 2 --payload-bytes 16384
    pb_all+=("$r_tps")
    pr_all+=("$(awk -v t="${pt_all[$((round - 1))]}" -v b="$r_tps" \
      'BEGIN { if (t > 0 && b > 0) printf "%.3f", t / b; else print 0 }')")
  done
  cleanup
  p_tps=$(median3 "${pt_all[@]}") p_base=$(median3 "${pb_all[@]}")
  p_ratio=$(median3 "${pr_all[@]}") p_cpu=$(median3 "${pc_all[@]}")
  rounds_note=""
  for i in "${!pt_all[@]}"; do
    rounds_note+="${pt_all[$i]} / ${pb_all[$i]} = ${pr_all[$i]}; "
  done
  mkdir -p "$(dirname "$out")"
  {
    table_lines
    echo
    echo "Rounds (tccd / baseline tx/s at C=64, 2 branches of 16 KiB): ${rounds_note}medians: $p_tps / $p_base tx/s, ratio $p_ratio; tccd's CPU per transaction $p_cpu ms (median)."
    machine_line
    echo "Runs: ${duration_s} s measured after ${warmup_s} s warm-up each, loopback; tccd with $tccd_config (fsync on), banks on the RocksDB barrier (synced)."
  } | tee "$out"
  echo "bench.sh: table written to $out; logs in $run_dir" >&2
  echo "tcc-bench-payload: tccd_tps=$p_tps baseline_tps=$p_base" \
       "ratio=$p_ratio tccd_cpu_ms_per_tx=$p_cpu errors=$total_errors"
  exit 0
fi

if [[ -n $against_bin ]]; then
  if [[ ! -x $against_bin ]]; then
    echo "bench.sh: --against $against_bin is not an executable" >&2
    exit 2
  fi
  new_bin=$tccd_bin
  declare -A a_tps=() a_cpu=() a_p50=() a_p99=()
  for round in $(seq "$against_rounds"); do
    # The order turns each round (new first, then old first, ...): the one
    # that runs second in a round ran slower in every round of a test
    # whose two tccds differed only in a hash at 16 KiB (its banks too,
    # which were the same binary), so a fixed order would bias the medians.
    sides="new old"
    (( round % 2 == 0 )) && sides="old new"
    for side in $sides; do
      tccd_bin=$new_bin
      [[ $side == old ]] && tccd_bin=$against_bin
      if ! start_tccd_stack normal; then
        echo "bench.sh: the $side tccd stack did not start" >&2
        exit 1
      fi
      tccd_pid=${tccd_pids%%,*}
      label="$side (round $round of $against_rounds)"
      handoff_counts "tccd:$tccd_pid"
      run_bench "$label: C=64, 2 branches, $against_payload B" \
        "$tccd_target" "$tccd_pids" "$tccd_roles" --concurrency 64 \
        --branches 2 --payload-bytes "$against_payload"
      handoff_report "$label C=64" "$r_tps"
      a_tps[$side]+="$r_tps "
      a_cpu[$side]+="${r_cpu_first:-0} "
      handoff_counts "tccd:$tccd_pid"
      run_bench "$label: C=1" "$tccd_target" "$tccd_pids" "$tccd_roles" \
        --concurrency 1 --branches 2 --payload-bytes 100
      handoff_report "$label C=1" "$r_tps"
      a_p50[$side]+="$r_p50 "
      if awk -v r="$against_rate" 'BEGIN { exit !(r > 0) }'; then
        run_bench "$label: open loop at $against_rate/s" "$tccd_target" \
          "$tccd_pids" "$tccd_roles" --rate "$against_rate" --branches 2 \
          --payload-bytes 100
        a_p99[$side]+="$r_p99 "
      fi
      cleanup
    done
  done
  tccd_bin=$new_bin
  # Word splitting of the lists below is meant: one value per run.
  # shellcheck disable=SC2086
  {
    nt=$(median ${a_tps[new]}) ot=$(median ${a_tps[old]})
    nc=$(median3 ${a_cpu[new]}) oc=$(median3 ${a_cpu[old]})
    np=$(median3 ${a_p50[new]}) op=$(median3 ${a_p50[old]})
    n99=$(median3 ${a_p99[new]:-}) o99=$(median3 ${a_p99[old]:-})
  }
  rate_note="" rate_fields=""
  if [[ -n ${a_p99[new]:-} ]]; then
    rate_note=" p99 ms of the open loop at $against_rate/s, new: ${a_p99[new]}(median $n99); old: ${a_p99[old]}(median $o99)."
    rate_fields=" new_p99_at_rate_ms=$n99 old_p99_at_rate_ms=$o99"
  fi
  mkdir -p "$(dirname "$out")"
  {
    table_lines
    echo
    echo "new: $new_bin; old: $against_bin. C=64 tx/s, new: ${a_tps[new]}(median $nt); old: ${a_tps[old]}(median $ot). tccd CPU ms per transaction at C=64, new: ${a_cpu[new]}(median $nc); old: ${a_cpu[old]}(median $oc). C=1 p50 ms, new: ${a_p50[new]}(median $np); old: ${a_p50[old]}(median $op).$rate_note"
    echo
    echo "$handoff_note"
    machine_line
    echo "Runs: ${duration_s} s measured after ${warmup_s} s warm-up each, loopback; tccd with $tccd_config (fsync on), banks on the RocksDB barrier (synced); a fresh stack for every (side, round)."
  } | tee "$out"
  echo "bench.sh: table written to $out; logs in $run_dir" >&2
  echo "tcc-bench-against: new_tps=$nt old_tps=$ot new_cpu_ms_per_tx=$nc" \
       "old_cpu_ms_per_tx=$oc new_single_p50_ms=$np old_single_p50_ms=$op" \
       "errors=$total_errors$rate_fields"
  exit 0
fi

if [[ $only_recovery == 1 ]]; then
  measure_recovery unanswered
  cleanup
  recovery_query_tps=$recovery_tps
  measure_recovery unsent
  cleanup
  echo "$recovery_note"
  echo "tcc-bench: recovery_tps=$recovery_tps recovery_unanswered_tps=$recovery_query_tps"
  exit 0
fi

# The tccd set first (when it exists), then the baseline, each stack stopped
# before the next starts so they do not share the machine.
tccd_tps=0 tccd_p50=0 tccd_p99=0 tccd_single_p50=0 tccd_half_p99=0
slow_fsync_tps=0 recovery_tps=0
if start_tccd_stack normal; then
  IFS=, read -r tccd_pid bank_a_pid _ <<<"$tccd_pids"
  handoff_pids="tccd:$tccd_pid,bank-a:$bank_a_pid"
  run_set tccd "$tccd_target" "$tccd_pids" "$tccd_roles" "$tccd_metrics"
  handoff_pids=""
  tccd_tps=$headline_tps tccd_p50=$headline_p50 tccd_p99=$headline_p99
  tccd_single_p50=$single_p50 tccd_half_p99=$half_load_p99
  cleanup
  if [[ $quick == 0 ]] && start_tccd_stack slow-fsync; then
    run_bench "tccd: C=64, 1 ms fsyncs" "$tccd_target" "$tccd_pids" \
      "$tccd_roles" --concurrency 64 --branches 2 --payload-bytes 100
    slow_fsync_tps=$r_tps
    cleanup
  fi
  if [[ $quick == 0 ]]; then
    echo "bench.sh: recovery of $recovery_count transactions (Trys unanswered) ..." >&2
    measure_recovery unanswered
    cleanup
    echo "bench.sh: recovery of $recovery_count transactions (no Try sent) ..." >&2
    measure_recovery unsent
    cleanup
  fi
else
  echo "bench.sh: tccd and the bank participants are not available yet;" \
       "measuring the baseline only" >&2
fi

start_baseline
run_set baseline "$baseline_target" "$baseline_pids" "$baseline_roles"
baseline_tps=$headline_tps
baseline_half_p99=$half_load_p99 baseline_single_p50=$single_p50
cleanup

load_after=$(cut -d' ' -f1-3 /proc/loadavg)
steal_all=$(steal_pct "$ticks_start" "$(cpu_ticks)")
ratio=$(awk -v t="$tccd_tps" -v b="$baseline_tps" \
  'BEGIN { if (t > 0 && b > 0) printf "%.3f", t / b; else print 0 }')

mkdir -p "$(dirname "$out")"
{
  table_lines
  echo
  [[ -n $wal_note ]] && echo "$wal_note." && echo
  [[ -n $handoff_note ]] && echo "Thread hand-offs: $handoff_note(a bank handles 2 calls per transaction: its Try and its Confirm)." && echo
  [[ -n $recovery_note ]] && echo "$recovery_note" && echo
  echo "Machine: $(nproc) cores ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)), load average before $load_before, after $load_after; CPU time stolen by the hypervisor over the whole set: $steal_all%."
  echo "Runs: ${duration_s} s measured after ${warmup_s} s warm-up each, loopback, $( [[ $quick == 1 ]] && echo quick || echo full ) set."
} | tee "$out"
echo "bench.sh: table written to $out; logs in $run_dir" >&2
echo "tcc-bench: tps=$tccd_tps baseline_tps=$baseline_tps ratio=$ratio" \
     "p50_ms=$tccd_p50 p99_ms=$tccd_p99 p99_half_load_ms=$tccd_half_p99" \
     "single_p50_ms=$tccd_single_p50 slow_fsync_tps=$slow_fsync_tps" \
     "recovery_tps=$recovery_tps errors=$total_errors" \
     "baseline_p99_half_load_ms=$baseline_half_p99" \
     "baseline_single_p50_ms=$baseline_single_p50"
