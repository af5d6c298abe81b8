#!/usr/bin/env bash
# Starts (or reuses) a throwaway PostgreSQL under ./.data/pg from the system's
# binaries and prints its DATABASE_URL. PostgreSQL refuses to run as root, so
# as root the cluster is owned by and started as the `postgres` user.
#   scripts/pg.sh start   -> starts if needed, prints the URL
#   scripts/pg.sh stop
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD/.data"
PGDATA="$ROOT/pg"
PORT="${ESCROW_PG_PORT:-54329}"
SOCKDIR="$ROOT/pgsock"
BIN="${PG_BIN:-}"
if [ -z "$BIN" ]; then
  BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
fi
if [ -z "$BIN" ] || [ ! -x "$BIN/initdb" ]; then
  echo "PostgreSQL server binaries not found (install postgresql, or set DATABASE_URL)" >&2
  exit 1
fi
as_pg() {
  if [ "$(id -u)" = 0 ]; then
    # -E keeps PATH-free, quoted arguments intact; runuser needs no password.
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}
url="postgres://postgres@127.0.0.1:$PORT/postgres?sslmode=disable"
case "${1:-start}" in
start)
  mkdir -p "$ROOT" "$SOCKDIR"
  if [ "$(id -u)" = 0 ]; then chown postgres "$ROOT" "$SOCKDIR"; chmod 755 "$ROOT"; fi
  if [ ! -s "$PGDATA/PG_VERSION" ]; then
    as_pg "$BIN/initdb" -D "$PGDATA" -U postgres -A trust -E UTF8 --no-locale >/dev/null
    cat >>"$PGDATA/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$SOCKDIR'
max_connections = 400
shared_buffers = 256MB
fsync = on
synchronous_commit = on
CONF
  fi
  if ! as_pg "$BIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; then
    as_pg "$BIN/pg_ctl" -D "$PGDATA" -l "$PGDATA/server.log" -w -t 60 start >/dev/null
  fi
  echo "$url"
  ;;
stop)
  if [ -s "$PGDATA/PG_VERSION" ]; then as_pg "$BIN/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null || true; fi
  ;;
url) echo "$url" ;;
*) echo "usage: $0 start|stop|url" >&2; exit 2 ;;
esac
