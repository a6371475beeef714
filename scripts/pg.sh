#!/usr/bin/env bash
# A throwaway PostgreSQL server for tests and scripts, on loopback only.
#
#   scripts/pg.sh start [ENV_FILE]   install PostgreSQL if missing, initdb a
#                                    temporary directory, start the server on a
#                                    free 127.0.0.1 port, create database tcc
#   scripts/pg.sh stop  [ENV_FILE]   stop that server quietly and remove its
#                                    directory
#
# `start` prints, and writes to ENV_FILE when given, two shell lines:
#
#   export TCC_PG_URL=postgresql://tcc@127.0.0.1:PORT/tcc
#   export TCC_PG_DIR=/tmp/tcc-pg.XXXXXX
#
# so `eval "$(scripts/pg.sh start)"` sets them in a shell. TCC_PG_URL is the
# libpq connection URL every tool and test of this repository reads;
# TCC_PG_DIR is what `stop` needs (from ENV_FILE or the environment).
# PostgreSQL refuses to run as root: as root the server runs as the
# `postgres` system user. Authentication is `trust`, on 127.0.0.1 only.
set -euo pipefail

die() { echo "pg.sh: $*" >&2; exit 1; }

pg_bin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    if [ -x "$d/pg_ctl" ]; then echo "$d"; return 0; fi
  done
  return 1
}

ensure_installed() {
  if pg_bin >/dev/null; then return 0; fi
  echo "pg.sh: installing postgresql" >&2
  local sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
    --no-install-recommends postgresql >/dev/null
  pg_bin >/dev/null || die "postgresql is still missing after apt-get"
}

# Runs a command as the server's user.
as_pg() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

free_port() {
  local port
  for _ in $(seq 1 50); do
    port=$((20000 + RANDOM % 40000))
    if [ -z "$(ss -ltnH "sport = :$port" 2>/dev/null)" ]; then
      echo "$port"
      return 0
    fi
  done
  die "no free port found"
}

start() {
  local env_file=${1:-}
  ensure_installed
  local bin dir port
  bin=$(pg_bin)
  dir=$(mktemp -d /tmp/tcc-pg.XXXXXX)
  chmod 700 "$dir"
  if [ "$(id -u)" = 0 ]; then chown postgres: "$dir"; fi
  as_pg "$bin/initdb" -D "$dir/data" -U tcc -A trust -E UTF8 --locale=C \
    --no-sync >"$dir/initdb.log" 2>&1 ||
    { cat "$dir/initdb.log" >&2; rm -rf "$dir"; die "initdb failed"; }
  local started=0
  for _ in 1 2 3 4 5; do
    port=$(free_port)
    if as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=200 -c synchronous_commit=on -c fsync=on" \
      start >/dev/null 2>&1; then
      started=1
      break
    fi
  done
  if [ $started = 0 ]; then
    cat "$dir/server.log" >&2 || true
    rm -rf "$dir"
    die "the server did not start"
  fi
  as_pg "$bin/createdb" -h 127.0.0.1 -p "$port" -U tcc tcc ||
    { stop_dir "$dir"; die "createdb failed"; }
  local lines
  lines=$(printf 'export TCC_PG_URL=postgresql://tcc@127.0.0.1:%s/tcc\nexport TCC_PG_DIR=%s\n' "$port" "$dir")
  if [ -n "$env_file" ]; then
    printf '%s\n' "$lines" >"$env_file"
  fi
  printf '%s\n' "$lines"
}

stop_dir() {
  local dir=$1 bin
  [ -d "$dir/data" ] || { rm -rf "$dir"; return 0; }
  if bin=$(pg_bin); then
    as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
}

stop() {
  local env_file=${1:-}
  local dir=${TCC_PG_DIR:-}
  if [ -n "$env_file" ] && [ -f "$env_file" ]; then
    dir=$(sed -n 's/^export TCC_PG_DIR=//p' "$env_file")
  fi
  if [ -z "$dir" ]; then return 0; fi
  case $dir in
    /tmp/tcc-pg.*) ;;
    *) die "refusing to remove '$dir' (not made by pg.sh start)" ;;
  esac
  stop_dir "$dir"
  if [ -n "$env_file" ]; then rm -f "$env_file"; fi
}

case ${1:-} in
  start) shift; start "$@" ;;
  stop) shift; stop "$@" ;;
  *) echo "usage: $0 start|stop [ENV_FILE]" >&2; exit 2 ;;
esac
