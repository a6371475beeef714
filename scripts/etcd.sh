#!/usr/bin/env bash
# A throwaway etcd cluster (1 or 3 members) for tests, demos and benchmarks,
# on loopback only, started with the flags tccd needs (DESIGN.md section 14,
# "Operating etcd for tccd"; README "Cluster mode").
#
#   scripts/etcd.sh start [options] [ENV_FILE]   start a cluster in a new
#                                                temporary directory
#   scripts/etcd.sh stop [ENV_FILE]              stop every member, remove
#                                                the directory
#   scripts/etcd.sh kill-member N [ENV_FILE]     SIGKILL member N (1-based)
#   scripts/etcd.sh stop-member N [ENV_FILE]     SIGTERM member N, wait
#   scripts/etcd.sh start-member N[,M] [ENV_FILE]
#                                                start member N (and M, all
#                                                started, then waited for)
#                                                again (same data, ports and
#                                                flags)
#   scripts/etcd.sh pids [ENV_FILE]              the running members' pids,
#                                                one a line
#   scripts/etcd.sh free-space PREFIX [ENV_FILE] the out-of-space procedure:
#                                                delete the keys under PREFIX,
#                                                compact, defragment every
#                                                member, disarm the alarm
#
# start options:
#   --members 1|3            (default 1)
#   --quota-backend-bytes N  the backend quota (default 2 GiB; a tiny one
#                            tests etcd out of space)
#   --max-txn-ops N          (default 1024; a small one tests groups at
#                            exactly etcd's limit)
#   --tls                    serve clients over mutual TLS: certificates are
#                            made in the directory (ca.pem, server.pem,
#                            client.pem (CN=tcc), nobody-client.pem
#                            (CN=nobody, no such etcd user) and their keys,
#                            and other-ca.pem / other-client.pem from an
#                            unrelated CA)
#   --auth                   enable etcd's authentication: users root and
#                            tcc (password tcc-password, read-write on every
#                            key), simple tokens
#   --auth-token-ttl S       simple tokens expire after S seconds (default 300)
#   --owner-pid PID          stop the cluster (as `stop` does) once process
#                            PID is gone, however it ended: a test's own
#                            cluster never outlives the test, even one
#                            killed by its timeout
#
# `start` prints, and writes to ENV_FILE when given, shell lines:
#
#   export TCC_ETCD_ENDPOINTS=127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
#   export TCC_ETCD_DIR=/tmp/tcc-etcd.XXXXXX
#   export TCC_ETCD_TLS=0|1   export TCC_ETCD_AUTH=0|1
#
# so `eval "$(scripts/etcd.sh start)"` sets them in a shell. Each member's
# data is in $TCC_ETCD_DIR/mN, its log in mN.log, its pid in mN.pid, its
# command line in mN.cmd. A member cannot advertise port 0, so the script
# picks free ports and starts again on new ones when one is taken meanwhile.
#
# The flags every member runs with, and why (deployment requirements):
#   --max-txn-ops 1024          tccd's group commit sizes its Txns by it
#                               (cluster.etcd_max_txn_ops must not exceed it)
#   --max-request-bytes 4 MiB   likewise (cluster.etcd_max_request_bytes)
#   --auto-compaction-mode periodic --auto-compaction-retention 1m
#                               old revisions go after a minute: tccd writes
#                               some 2.3 KB of them per transaction, and with
#                               10 minutes the history alone passed 1.4 GB
#                               at 1,000 tx/s (README "Sizing etcd"); a watch
#                               or a takeover's scan that finds its revision
#                               compacted reads again, a List or retention
#                               run paging across a compaction fails and is
#                               tried again (by its caller, the next run)
#   --quota-backend-bytes       a bound on etcd's disk, and its alarm
#   --grpc-keepalive-min-time 2s  below tccd's gRPC keepalive time (10 s):
#                               etcd closes connections that ping faster,
#                               leaving their Txns unknown
# and, because the members of a loopback cluster share one machine, each
# member's Go runtime gets its share of the cores (GOMAXPROCS = cores /
# members, at least 1; a GOMAXPROCS in the environment wins). With the
# default (every member using every core) three members on 2 cores spent
# a quarter more CPU per transaction, spinning for work (bench.sh --etcd,
# README "tccd on etcd"). A member alone on its machine keeps Go's default.
set -euo pipefail

die() { echo "etcd.sh: $*" >&2; exit 1; }

etcd_bin() {
  local b
  for b in "${TCC_ETCD_BIN:-}" /usr/bin/etcd; do
    if [ -n "$b" ] && [ -x "$b" ]; then echo "$b"; return 0; fi
  done
  return 1
}

etcdctl_bin() {
  local b
  for b in "${TCC_ETCDCTL_BIN:-}" /usr/bin/etcdctl; do
    if [ -n "$b" ] && [ -x "$b" ]; then echo "$b"; return 0; fi
  done
  return 1
}

ensure_installed() {
  if etcd_bin >/dev/null && etcdctl_bin >/dev/null; then return 0; fi
  echo "etcd.sh: installing etcd (scripts/install-deps.sh)" >&2
  "$(dirname "$0")/install-deps.sh" >&2
  etcd_bin >/dev/null || die "etcd is still missing after install-deps.sh"
}

# A port below the kernel's ephemeral range (ip_local_port_range): a member
# restarted on its ports (start-member) must find them free, and a port in
# that range may meanwhile be the source port of some outgoing connection
# (tccd's clients redial the dead member all the while).
free_port() {
  local port lo=32768 span
  read -r lo _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
  span=$((lo - 20000))
  [ "$span" -ge 1000 ] || die "the ephemeral port range starts at $lo: no room below it"
  for _ in $(seq 1 50); do
    port=$((20000 + RANDOM % span))
    if [ -z "$(ss -ltnH "sport = :$port" 2>/dev/null)" ]; then
      echo "$port"
      return 0
    fi
  done
  die "no free port found"
}

# Certificates for --tls: a CA, a server certificate for 127.0.0.1, a client
# certificate (CN=tcc), and a client certificate from another CA.
make_certs() {
  local d=$1
  (
    cd "$d"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=tcc-etcd-ca \
      -keyout ca-key.pem -out ca.pem 2>/dev/null
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=other-ca \
      -keyout other-ca-key.pem -out other-ca.pem 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' >server.ext
    printf 'extendedKeyUsage=clientAuth\n' >client.ext
    openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 \
      -keyout server-key.pem -out server.csr 2>/dev/null
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem \
      -CAcreateserial -days 2 -extfile server.ext -out server.pem 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj /CN=tcc \
      -keyout client-key.pem -out client.csr 2>/dev/null
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem \
      -CAcreateserial -days 2 -extfile client.ext -out client.pem 2>/dev/null
    # CN=nobody: no etcd user of that name (with --client-cert-auth etcd
    # takes a certificate's CN as the user when no token is given).
    openssl req -newkey rsa:2048 -nodes -subj /CN=nobody \
      -keyout nobody-client-key.pem -out nobody-client.csr 2>/dev/null
    openssl x509 -req -in nobody-client.csr -CA ca.pem -CAkey ca-key.pem \
      -CAcreateserial -days 2 -extfile client.ext -out nobody-client.pem \
      2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj /CN=tcc \
      -keyout other-client-key.pem -out other-client.csr 2>/dev/null
    openssl x509 -req -in other-client.csr -CA other-ca.pem \
      -CAkey other-ca-key.pem -CAcreateserial -days 2 -extfile client.ext \
      -out other-client.pem 2>/dev/null
    chmod 600 ./*-key.pem
  ) || die "openssl failed making test certificates"
}

env_dir() {
  local env_file=${1:-}
  local dir=${TCC_ETCD_DIR:-}
  if [ -n "$env_file" ] && [ -f "$env_file" ]; then
    dir=$(sed -n 's/^export TCC_ETCD_DIR=//p' "$env_file")
  fi
  echo "$dir"
}

check_dir() {
  case $1 in
    /tmp/tcc-etcd.*) ;;
    *) die "refusing to touch '$1' (not made by etcd.sh start)" ;;
  esac
  [ -d "$1" ] || die "$1 does not exist"
}

# etcdctl against the cluster in $1 (its TLS and auth settings).
ctl() {
  local dir=$1
  shift
  local args=(--endpoints "$(cat "$dir/endpoints")" --dial-timeout 2s
    --command-timeout 5s)
  if [ -f "$dir/tls" ]; then
    args+=(--cacert "$dir/ca.pem" --cert "$dir/client.pem"
      --key "$dir/client-key.pem")
  fi
  ETCDCTL_API=3 "$(etcdctl_bin)" "${args[@]}" "$@"
}

pid_alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }

# The pid in $1/mN.pid while that process is still member N (its command
# line names the member's data dir), else nothing: once a member is gone
# (kill-member, a crash) the kernel gives its pid to another process (pids
# wrap at pid_max, 32768 here, within minutes on a busy box), and signalling
# a stale pid file's pid would hit that stranger.
member_pid() {
  local dir=$1 n=$2 pid
  pid=$(cat "$dir/m$n.pid" 2>/dev/null || true)
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 0
  if { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null |
    grep -qF -- "--data-dir $dir/m$n "; then
    echo "$pid"
  fi
}

# N of a member's pid file ($dir/mN.pid).
pid_file_member() {
  local n=${1##*/m}
  echo "${n%.pid}"
}

start_member() {
  local dir=$1 n=$2
  local pid
  pid=$(member_pid "$dir" "$n")
  if pid_alive "$pid"; then return 0; fi
  # The members share this machine's cores (see the top).
  local members procs
  members=$(find "$dir" -maxdepth 1 -name 'm*.cmd' | wc -l)
  procs=$(($(nproc) / (members > 0 ? members : 1)))
  [ "$procs" -ge 1 ] || procs=1
  # shellcheck disable=SC2046
  GOMAXPROCS=${GOMAXPROCS:-$procs} setsid $(cat "$dir/m$n.cmd") \
    >>"$dir/m$n.log" 2>&1 </dev/null &
  echo $! >"$dir/m$n.pid"
}

# Whether process $1 listens on 127.0.0.1:$2 (not another process that took
# the port first: its status answer would be another cluster's).
listens_on() {
  ss -ltnpH "sport = :$2" 2>/dev/null | grep -q "pid=$1,"
}

# Waits until member N serves (its client port answers a status, and the
# member's own process holds its ports), up to 90 seconds in all, or until
# its process is gone (then false).
wait_member() {
  local dir=$1 n=$2 ep pid
  ep=$(sed -n "${n}p" "$dir/member-endpoints")
  local deadline=$((SECONDS + 90))
  # The process start_member just started: its own pid file's (not
  # member_pid's, which reads the command line, and a process that has not
  # yet exec'd etcd still shows the shell's: it would look gone).
  pid=$(cat "$dir/m$n.pid" 2>/dev/null || true)
  while [ $SECONDS -lt $deadline ]; do
    pid_alive "$pid" || return 1
    if listens_on "$pid" "${ep##*:}" &&
      listens_on "$pid" "$(sed -n "${n}p" "$dir/member-peer-ports")" &&
      ctl "$dir" --endpoints "$ep" --dial-timeout 1s --command-timeout 2s \
        endpoint status >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.2
  done
  return 1
}

kill_all() {
  local dir=$1 sig=${2:-TERM} f pid
  for f in "$dir"/m*.pid; do
    [ -f "$f" ] || continue
    pid=$(member_pid "$dir" "$(pid_file_member "$f")")
    # CONT too: a member a test paused (SIGSTOP) must see the signal.
    pid_alive "$pid" && { kill -"$sig" "$pid"; kill -CONT "$pid"; } 2>/dev/null || true
  done
}

wait_all_gone() {
  local dir=$1 f pid
  for _ in $(seq 1 100); do
    local alive=0
    for f in "$dir"/m*.pid; do
      [ -f "$f" ] || continue
      pid=$(member_pid "$dir" "$(pid_file_member "$f")")
      if pid_alive "$pid"; then alive=1; fi
    done
    [ $alive = 0 ] && return 0
    sleep 0.1
  done
  kill_all "$dir" KILL
  sleep 0.2
}

start() {
  local members=1 quota=$((2 * 1024 * 1024 * 1024)) tls=0 auth=0 ttl=300
  local max_txn_ops=1024
  local env_file="" owner=""
  while [ $# -gt 0 ]; do
    case $1 in
      --members) members=$2; shift ;;
      --quota-backend-bytes) quota=$2; shift ;;
      --max-txn-ops) max_txn_ops=$2; shift ;;
      --tls) tls=1 ;;
      --auth) auth=1 ;;
      --auth-token-ttl) ttl=$2; shift ;;
      --owner-pid) owner=$2; shift ;;
      -*) die "unknown option $1" ;;
      *) env_file=$1 ;;
    esac
    shift
  done
  case $members in 1|3) ;; *) die "--members must be 1 or 3" ;; esac
  ensure_installed
  local bin dir
  bin=$(etcd_bin)
  dir=$(mktemp -d /tmp/tcc-etcd.XXXXXX)
  chmod 700 "$dir"
  local scheme=http
  if [ $tls = 1 ]; then
    make_certs "$dir"
    touch "$dir/tls"
    scheme=https
  fi
  local token
  token=tcc-$(basename "$dir")
  local attempt started=0
  for attempt in 1 2 3 4 5; do
    local cports=() pports=() i
    for i in $(seq 1 "$members"); do
      cports+=("$(free_port)")
      pports+=("$(free_port)")
    done
    local initial=""
    for i in $(seq 1 "$members"); do
      initial+="${initial:+,}m$i=http://127.0.0.1:${pports[$((i - 1))]}"
    done
    : >"$dir/member-endpoints"
    : >"$dir/member-peer-ports"
    local endpoints=""
    for i in $(seq 1 "$members"); do
      local c=${cports[$((i - 1))]} p=${pports[$((i - 1))]}
      rm -rf "$dir/m$i" "$dir/m$i.log"
      local cmd="$bin --name m$i --data-dir $dir/m$i
        --listen-client-urls $scheme://127.0.0.1:$c
        --advertise-client-urls $scheme://127.0.0.1:$c
        --listen-peer-urls http://127.0.0.1:$p
        --initial-advertise-peer-urls http://127.0.0.1:$p
        --initial-cluster $initial --initial-cluster-state new
        --initial-cluster-token $token
        --max-txn-ops $max_txn_ops --max-request-bytes 4194304
        --auto-compaction-mode periodic --auto-compaction-retention 1m
        --quota-backend-bytes $quota --grpc-keepalive-min-time 2s
        --auth-token simple --auth-token-ttl $ttl
        --logger zap --log-outputs stderr --log-level warn"
      if [ $tls = 1 ]; then
        cmd+=" --cert-file $dir/server.pem --key-file $dir/server-key.pem
          --trusted-ca-file $dir/ca.pem --client-cert-auth"
      fi
      echo "$cmd" | tr '\n' ' ' | tr -s ' ' >"$dir/m$i.cmd"
      echo "127.0.0.1:$c" >>"$dir/member-endpoints"
      echo "$p" >>"$dir/member-peer-ports"
      endpoints+="${endpoints:+,}127.0.0.1:$c"
    done
    echo "$endpoints" >"$dir/endpoints"
    for i in $(seq 1 "$members"); do start_member "$dir" "$i"; done
    local ok=1
    for i in $(seq 1 "$members"); do
      wait_member "$dir" "$i" || { ok=0; break; }
    done
    if [ $ok = 1 ] && ctl "$dir" endpoint health >/dev/null 2>&1; then
      started=1
      break
    fi
    # A port taken meanwhile (or a slow start): again, on new ports.
    if grep -q 'address already in use' "$dir"/m*.log 2>/dev/null; then
      echo "etcd.sh: a port was taken; starting again on new ports" >&2
    else
      echo "etcd.sh: attempt $attempt failed; starting again" >&2
    fi
    kill_all "$dir" KILL
    wait_all_gone "$dir"
  done
  if [ $started = 0 ]; then
    tail -n 20 "$dir"/m*.log >&2 || true
    kill_all "$dir" KILL
    wait_all_gone "$dir"
    rm -rf "$dir"
    die "etcd did not start"
  fi
  if [ $auth = 1 ]; then
    {
      ctl "$dir" user add root:root-password &&
        ctl "$dir" role add root &&
        ctl "$dir" user grant-role root root &&
        ctl "$dir" user add tcc:tcc-password &&
        ctl "$dir" role add tcc &&
        ctl "$dir" role grant-permission tcc --prefix=true readwrite '' &&
        ctl "$dir" user grant-role tcc tcc &&
        ctl "$dir" auth enable
    } >/dev/null || { stop_dir "$dir"; die "enabling auth failed"; }
    touch "$dir/auth"
  fi
  if [ -n "$owner" ]; then
    # shellcheck disable=SC2016
    setsid bash "$0" watch-owner "$owner" "$dir" "$env_file" >/dev/null 2>&1 \
      </dev/null &
  fi
  local lines
  lines=$(printf 'export TCC_ETCD_ENDPOINTS=%s\nexport TCC_ETCD_DIR=%s\nexport TCC_ETCD_TLS=%s\nexport TCC_ETCD_AUTH=%s\n' \
    "$(cat "$dir/endpoints")" "$dir" "$tls" "$auth")
  if [ -n "$env_file" ]; then printf '%s\n' "$lines" >"$env_file"; fi
  printf '%s\n' "$lines"
}

stop_dir() {
  local dir=$1
  kill_all "$dir" TERM
  wait_all_gone "$dir"
  rm -rf "$dir"
}

stop() {
  local env_file=${1:-} dir
  dir=$(env_dir "$env_file")
  if [ -z "$dir" ]; then return 0; fi
  case $dir in
    /tmp/tcc-etcd.*) ;;
    *) die "refusing to remove '$dir' (not made by etcd.sh start)" ;;
  esac
  [ -d "$dir" ] && stop_dir "$dir"
  if [ -n "$env_file" ]; then rm -f "$env_file"; fi
}

member() {
  local what=$1 n=${2:-} env_file=${3:-} dir pid
  [ -n "$n" ] || die "$what needs a member number"
  dir=$(env_dir "$env_file")
  check_dir "$dir"
  if [ "$what" = start-member ]; then
    # N may be a list (2,1): all start before any is waited for, so that
    # members which need each other for a quorum come up together.
    local m
    for m in ${n//,/ }; do
      [ -f "$dir/m$m.cmd" ] || die "no member $m"
      start_member "$dir" "$m"
    done
    for m in ${n//,/ }; do
      if ! wait_member "$dir" "$m"; then
        tail -n 20 "$dir/m$m.log" >&2 || true
        die "member $m did not start"
      fi
    done
    return 0
  fi
  [ -f "$dir/m$n.cmd" ] || die "no member $n"
  pid=$(member_pid "$dir" "$n")
  case $what in
    kill-member)
      if pid_alive "$pid"; then kill -KILL "$pid"; fi
      for _ in $(seq 1 200); do pid_alive "$pid" || break; sleep 0.05; done
      ;;
    stop-member)
      if pid_alive "$pid"; then kill -TERM "$pid"; fi
      for _ in $(seq 1 100); do pid_alive "$pid" || break; sleep 0.1; done
      if pid_alive "$pid"; then kill -KILL "$pid"; fi
      ;;
  esac
}

# Stops the cluster in $2 once process $1 is gone (start --owner-pid), and
# removes its env file $3; ends by itself when the cluster was stopped
# meanwhile.
watch_owner() {
  local owner=$1 dir=$2 env_file=${3:-}
  check_dir "$dir"
  while kill -0 "$owner" 2>/dev/null && [ -d "$dir" ]; do sleep 1; done
  if [ -d "$dir" ]; then
    stop_dir "$dir"
    if [ -n "$env_file" ]; then rm -f "$env_file"; fi
  fi
}

# What an operator does when etcd is out of space (README "Cluster mode"):
# here, after deleting what filled it (the keys under $1).
free_space() {
  local prefix=${1:-} dir rev
  [ -n "$prefix" ] || die "free-space needs a key prefix to delete"
  dir=$(env_dir "${2:-}")
  check_dir "$dir"
  ctl "$dir" del --prefix "$prefix" >/dev/null || die "deleting $prefix failed"
  rev=$(ctl "$dir" endpoint status -w json |
    grep -o '"revision":[0-9]*' | head -n 1 | cut -d: -f2)
  [ -n "$rev" ] || die "no revision from endpoint status"
  ctl "$dir" compact "$rev" --physical >/dev/null || die "compact failed"
  ctl "$dir" defrag --cluster >/dev/null || die "defrag failed"
  ctl "$dir" alarm disarm >/dev/null || die "alarm disarm failed"
}

pids() {
  local dir f
  dir=$(env_dir "${1:-}")
  check_dir "$dir"
  for f in "$dir"/m*.pid; do
    [ -f "$f" ] && member_pid "$dir" "$(pid_file_member "$f")"
  done
  return 0
}

case ${1:-} in
  start) shift; start "$@" ;;
  stop) shift; stop "$@" ;;
  kill-member | stop-member | start-member) member "$@" ;;
  pids) shift; pids "$@" ;;
  watch-owner) shift; watch_owner "$@" ;;
  free-space) shift; free_space "$@" ;;
  *) echo "usage: $0 start [--members 1|3] [--tls] [--auth] [ENV_FILE] | stop [ENV_FILE] | kill-member|stop-member|start-member N [ENV_FILE] | pids [ENV_FILE] | free-space PREFIX [ENV_FILE]" >&2; exit 2 ;;
esac
