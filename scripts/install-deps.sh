#!/usr/bin/env bash
# Installs exactly the Debian 12 packages tccd needs to build, run and test.
# The list below is the one place they are named.
#
#   scripts/install-deps.sh                   install what is missing (quick
#                                             when everything is there)
#   scripts/install-deps.sh --check [--build-dir DIR]
#                                             fail if the configured build
#                                             found a dependency whose Debian
#                                             package is not in the list (nor
#                                             pulled in by one that is)
#   scripts/install-deps.sh --unpack DIR      download the UNPACKED packages
#                                             and unpack them under DIR/root
#                                             (the build does this at
#                                             configure time)
set -euo pipefail

PACKAGES=(
  # toolchain
  g++ cmake ninja-build ccache pkg-config
  # wire contract and RPC
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev
  # storage, logging, metrics, config, flags
  librocksdb-dev libspdlog-dev prometheus-cpp-dev libboost-dev
  libyaml-cpp-dev libcli11-dev
  # hashing and TLS
  libssl-dev openssl
  # the SDK's SQL barrier store, and the server its tests run against
  libpqxx-dev postgresql
  # tests
  catch2
  # scripts: ports, process control
  iproute2 procps psmisc
  # crash drills: a failing fsync (strace -e inject), a jumped wall clock
  strace faketime libfaketime
  # benchmarks: thread hand-offs (perf stat: context switches, futex calls)
  linux-perf
  # operating tccd (deploy/): sd_notify for the systemd unit; the package
  # (CPack DEB: dpkg-shlibdeps, file) and its checks (lintian,
  # systemd-analyze); the alert rules and dashboard (promtool, prometheus)
  libsystemd-dev dpkg-dev file gzip lintian systemd prometheus
  # the web console's browser test (headless, over the DevTools protocol)
  chromium
  # the Python participant SDK, its bank example, the conformance suite
  # (tests run /usr/bin/python3; stubs come from protoc and
  # grpc_python_plugin, in protobuf-compiler-grpc) and its wheel, built
  # offline
  python3 python3-grpcio python3-protobuf python3-psycopg2
  python3-prometheus-client python3-build python3-setuptools python3-wheel
  # cluster mode: etcd for tests and demos (scripts/etcd.sh starts it; its
  # system service is kept from starting, see install()), and etcdctl
  etcd-server etcd-client
)

# Packages whose files the build needs but which are never installed: etcd's
# own .proto files, from which the build generates its etcd client
# (etcd-client/CMakeLists.txt). Installing them would pull about 140 Go
# packages, so `--unpack DIR` fetches them with `apt-get download` and
# unpacks them with `dpkg -x` into DIR/root, leaving DIR/<package>.stamp
# (package and version) for `--check`.
UNPACKED=(
  golang-etcd-server-dev          # rpc.proto, kv.proto, auth.proto
  golang-github-gogo-protobuf-dev # gogoproto/gogo.proto
  golang-github-gogo-googleapis-dev # google/api/annotations.proto
)

missing() {
  local out=()
  for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      out+=("$p")
    fi
  done
  echo "${out[@]:-}"
}

install() {
  local need
  need=$(missing)
  if [ -z "$need" ]; then
    return 0
  fi
  echo "install-deps: installing: $need"
  local sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  # etcd-server's package starts a system etcd on 127.0.0.1:2379 unless a
  # policy-rc.d says no: tests and scripts start their own (scripts/etcd.sh).
  local policy=/usr/sbin/policy-rc.d made_policy=0
  if [ ! -e $policy ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee $policy >/dev/null
    $sudo chmod 755 $policy
    made_policy=1
  fi
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $need >/dev/null ||
    { [ $made_policy = 1 ] && $sudo rm -f $policy; exit 1; }
  if [ $made_policy = 1 ]; then $sudo rm -f $policy; fi
  need=$(missing)
  if [ -n "$need" ]; then
    echo "install-deps: still missing after apt-get: $need" >&2
    exit 1
  fi
}

# The listed packages and everything they depend on (one dpkg-query for the
# whole installed set, then a walk in memory).
closure() {
  local -A deps=()
  local name rest
  while IFS='|' read -r name rest; do
    deps[$name]="${deps[$name]:-} $rest"
    # A virtual package (Provides) leads to its provider.
    local v
    for v in $(echo "${rest#*#}" | tr ',' ' ' | sed -E 's/\([^)]*\)//g'); do
      v=${v%%:*}
      [ -n "$v" ] && deps[$v]="${deps[$v]:-} $name"
    done
  done < <(dpkg-query -W -f='${Package}|${Depends},${Pre-Depends}#${Provides}\n' 2>/dev/null |
           sed -E 's/\([^)]*\)//g; s/:any//g')
  local -A seen=()
  local queue=("${PACKAGES[@]}")
  while [ ${#queue[@]} -gt 0 ]; do
    local p=${queue[-1]}
    unset 'queue[-1]'
    p=${p%%:*}
    [ -n "${seen[$p]:-}" ] && continue
    seen[$p]=1
    local d
    for d in $(echo "${deps[$p]:-}" | sed 's/#.*//' | tr ',|' '  '); do
      d=${d%%:*}
      [ -n "$d" ] && [ -z "${seen[$d]:-}" ] && queue+=("$d")
    done
  done
  printf '%s\n' "${!seen[@]}"
}

# Downloads and unpacks the UNPACKED packages into $1/root (once: a package
# whose stamp is there is not fetched again).
unpack() {
  local dir=$1
  mkdir -p "$dir/root"
  local p need=()
  for p in "${UNPACKED[@]}"; do
    [ -f "$dir/$p.stamp" ] || need+=("$p")
  done
  [ ${#need[@]} = 0 ] && return 0
  local sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  local tmp
  tmp=$(mktemp -d)
  chmod 777 "$tmp"  # apt-get download writes as the _apt user
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" RETURN
  if ! (cd "$tmp" && apt-get download -qq "${need[@]}" >/dev/null 2>&1); then
    $sudo apt-get update -qq
    (cd "$tmp" && apt-get download -qq "${need[@]}" >/dev/null) ||
      { echo "install-deps --unpack: apt-get download ${need[*]} failed" >&2; exit 1; }
  fi
  local deb
  for deb in "$tmp"/*.deb; do
    dpkg -x "$deb" "$dir/root"
    printf '%s %s\n' "$(dpkg-deb -f "$deb" Package)" "$(dpkg-deb -f "$deb" Version)" \
      >"$dir/$(dpkg-deb -f "$deb" Package).stamp"
  done
  for p in "${UNPACKED[@]}"; do
    [ -f "$dir/$p.stamp" ] ||
      { echo "install-deps --unpack: $p was not unpacked" >&2; exit 1; }
  done
}

check() {
  local build_dir=$1
  local cache=$build_dir/CMakeCache.txt
  if [ ! -f "$cache" ]; then
    echo "install-deps --check: no $cache; configure the build first" >&2
    exit 1
  fi
  local -A allowed=()
  while read -r p; do allowed[$p]=1; done < <(closure)

  # What the build found: package config dirs, libraries, headers, tools from
  # the CMake cache, and every absolute library path on a link line.
  local paths
  paths=$( {
    grep -E '^[A-Za-z0-9_+.-]+:(PATH|FILEPATH)=/' "$cache" |
      grep -vE '^CMAKE_[A-Z_]*:' | sed -E 's/^[^=]*=//'
    find "$build_dir" -name link.txt -print0 2>/dev/null | xargs -0 -r cat |
      tr ' ' '\n' | grep -E '^/usr/.*\.(so|a)(\.[0-9.]+)?$' || true
  } | while read -r f; do [ -e "$f" ] && readlink -f "$f"; done | sort -u)

  # One dpkg -S for all of them: "pkg1, pkg2: /path" per line.
  local -A owners=()
  local line
  while IFS= read -r line; do
    local path=${line#*: }
    local pkgs=${line%%: *}
    owners[$path]="${owners[$path]:-} $(echo "$pkgs" | tr ',' ' ' | sed -E 's/:[a-z0-9]+//g')"
  done < <(echo "$paths" | xargs -r dpkg -S 2>/dev/null || true)
  # Merged /usr: dpkg may know a file by its /lib, /bin or /sbin path only.
  while IFS= read -r line; do
    local path=/usr${line#*: }
    local pkgs=${line%%: *}
    owners[$path]="${owners[$path]:-} $(echo "$pkgs" | tr ',' ' ' | sed -E 's/:[a-z0-9]+//g')"
  done < <(echo "$paths" | grep -E '^/usr/(lib|bin|sbin)/' | sed 's|^/usr||' | xargs -r dpkg -S 2>/dev/null || true)

  local bad=0 checked=0 path
  # The unpacked packages (--unpack) own what is under the build's unpack
  # dirs: each of them must have its stamp there.
  local unpack_dirs=()
  local d
  for d in $(grep -E '^TCC_UNPACKED_DEBS_DIR:PATH=' "$cache" | sed -E 's/^[^=]*=//'); do
    d=$(readlink -f "$d")
    local p
    for p in "${UNPACKED[@]}"; do
      if [ ! -f "$d/$p.stamp" ]; then
        echo "install-deps --check: $d holds no $p.stamp (not unpacked by --unpack?)" >&2
        bad=1
      fi
    done
    unpack_dirs+=("$d")
  done
  while read -r path; do
    [ -z "$path" ] && continue
    local under=0
    for d in "${unpack_dirs[@]}"; do
      case $path in "$d"|"$d"/*) under=1 ;; esac
    done
    if [ $under = 1 ]; then
      checked=$((checked + 1))
      continue
    fi
    if [ -z "${owners[$path]:-}" ]; then
      echo "install-deps --check: $path belongs to no Debian package (installed by hand?)" >&2
      bad=1
      continue
    fi
    checked=$((checked + 1))
    local ok=0 o
    for o in ${owners[$path]}; do
      [ -n "${allowed[$o]:-}" ] && ok=1
    done
    if [ $ok = 0 ]; then
      echo "install-deps --check: the build uses $path from package(s)${owners[$path]}, which scripts/install-deps.sh does not install" >&2
      bad=1
    fi
  done <<< "$paths"
  if [ $bad != 0 ]; then exit 1; fi
  if [ $checked -lt 10 ]; then
    echo "install-deps --check: only $checked dependency paths found in $build_dir; expected more" >&2
    exit 1
  fi
  echo "install-deps --check: $checked dependency paths, all from listed packages"
}

mode=install
build_dir=build
while [ $# -gt 0 ]; do
  case "$1" in
    --check) mode=check ;;
    --build-dir) build_dir=$2; shift ;;
    --list) mode=list ;;
    --unpack) mode=unpack; unpack_dir=$2; shift ;;
    *) echo "usage: $0 [--check [--build-dir DIR]] [--list] [--unpack DIR]" >&2; exit 2 ;;
  esac
  shift
done

case $mode in
  install) install ;;
  check) check "$build_dir" ;;
  list) printf '%s\n' "${PACKAGES[@]}" ;;
  unpack) unpack "$unpack_dir" ;;
esac
