#!/usr/bin/env bash
# The checkout's throwaway PostgreSQL, from the system's binaries.
#   scripts/pg.sh start   starts it if needed (creating it the first time), prints its DATABASE_URL
#   scripts/pg.sh url     prints its DATABASE_URL (exit 1 if it was never created)
#   scripts/pg.sh stop    stops it
#   scripts/pg.sh clean   stops and deletes it (its data, wherever it lives)
#
# Where: ./.data/pg. PostgreSQL refuses to run as root, so as root the cluster
# belongs to and runs as the `postgres` user; when that user cannot reach
# ./.data (a checkout under a mode-700 directory such as /root), the cluster
# lives in a folder of its own under the system's temporary directory, named
# after the checkout, and ./.data/pg-dir records where.
# Port: every checkout's cluster has its own, chosen free on first start and
# kept in ./.data/pg-port, so several checkouts run side by side. If another
# program took it meanwhile, start picks a new one and says so.
# ESCROW_PG_PORT asks for a port (when the cluster is created or moved).
set -euo pipefail
cd "$(dirname "$0")/.."
CHECKOUT="$PWD"
DATA="$CHECKOUT/.data"
PORTFILE="$DATA/pg-port"
DIRFILE="$DATA/pg-dir"
BIN="${PG_BIN:-}"
if [ -z "$BIN" ]; then
  BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
fi

say() { echo "pg.sh: $*" >&2; }

as_pg() {
  if [ "$(id -u)" = 0 ]; then
    # From /: the postgres user may not be allowed into the checkout.
    (cd / && runuser -u postgres -- "$@")
  else
    "$@"
  fi
}

# base is the folder holding the cluster (pg/) and its socket (pgsock/).
base() {
  if [ -s "$DIRFILE" ]; then cat "$DIRFILE"; else echo "$DATA"; fi
}

# relocated_base is this checkout's folder under the temporary directory:
# named after the checkout, and after a digest of its path, since two
# checkouts may share a name.
relocated_base() {
  local tmp="${TMPDIR:-/tmp}" name digest
  name=$(basename "$CHECKOUT" | tr -c 'A-Za-z0-9._\n-' '_')
  digest=$(printf %s "$CHECKOUT" | sha256sum | cut -c1-8)
  echo "${tmp%/}/escrowd-pg-$name-$digest"
}

# port_in_use: something answers on 127.0.0.1:$1.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# ephemeral_low is the lowest port the kernel hands out as the local port
# of outgoing connections. A port there can be taken by any connection (a
# test's pool to another cluster) without anything listening on it, so
# clusters are put below it.
ephemeral_low() {
  local lo
  lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null)
  case "$lo" in '' | *[!0-9]*) lo=32768 ;; esac
  echo "$lo"
}

# free_port picks a port nobody listens on, starting at $1, at
# ESCROW_PG_PORT, or at one derived from the checkout's path (so checkouts
# rarely pick the same port even while one of them is stopped), within the
# 10,000 ports below the kernel's outgoing ones.
free_port() {
  local lo first p
  lo=$(ephemeral_low)
  first=$((lo > 11000 ? lo - 10000 : 1024))
  p="${1:-${ESCROW_PG_PORT:-$((first + $(printf %s "$CHECKOUT" | cksum | cut -d' ' -f1) % 1000))}}"
  for _ in $(seq 1 2000); do
    if ! port_in_use "$p"; then echo "$p"; return; fi
    p=$((p + 1))
    if [ "$p" -ge "$lo" ] && [ "$p" -lt 61000 ]; then p=$first; fi
    if [ "$p" -gt 65000 ]; then p=$first; fi
  done
  say "no free port found"
  exit 1
}

# kept_port is the cluster's port: ./.data/pg-port, or for a cluster made
# before that file existed, the port its configuration names.
kept_port() {
  if [ -s "$PORTFILE" ]; then cat "$PORTFILE"; return; fi
  local conf
  conf="$(base)/pg/postgresql.conf"
  if [ -f "$conf" ]; then
    sed -n 's/^port = \([0-9]*\).*/\1/p' "$conf" | tail -n 1
  fi
}

url_for() { echo "postgres://postgres@127.0.0.1:$1/postgres?sslmode=disable"; }

running() { [ -s "$1/PG_VERSION" ] && as_pg "$BIN/pg_ctl" -D "$1" status >/dev/null 2>&1; }

# claim makes $1, in the shared temporary directory, the postgres user's
# own folder, refusing one that someone else made or that is a link (root
# would otherwise hand over whatever it points to).
claim() {
  if [ -L "$1" ] || { [ -e "$1" ] && [ "$(stat -c %U "$1")" != postgres ]; }; then
    say "$1 is a link or does not belong to postgres; remove it or set DATABASE_URL"
    exit 1
  fi
  mkdir -p "$1"
  chown postgres "$1"
  chmod 700 "$1"
}

need_bin() {
  if [ -z "$BIN" ] || [ ! -x "$BIN/initdb" ]; then
    say "PostgreSQL server binaries not found (install postgresql, or set DATABASE_URL)"
    exit 1
  fi
}

start() {
  need_bin
  mkdir -p "$DATA"
  # Checkouts choosing ports at once would otherwise choose the same one.
  exec 9>>"${TMPDIR:-/tmp}/escrowd-pg-ports-$(id -u).lock"
  flock 9
  local b
  b=$(base)
  if [ ! -s "$b/pg/PG_VERSION" ] && [ "$(id -u)" = 0 ] && [ ! -s "$DIRFILE" ]; then
    chown postgres "$DATA"
    if ! runuser -u postgres -- test -w "$DATA" -a -x "$DATA"; then
      b=$(relocated_base)
      claim "$b"
      if ! runuser -u postgres -- test -w "$b"; then
        say "the postgres user can reach neither $DATA nor $b; set TMPDIR to a folder it can reach, or set DATABASE_URL"
        exit 1
      fi
      echo "$b" >"$DIRFILE"
      say "the postgres user cannot reach $DATA (a parent folder is closed to it),"
      say "so this checkout's throwaway PostgreSQL lives in $b (scripts/pg.sh clean removes it)"
    fi
  fi
  # A relocated folder found again (or re-made after the temporary
  # directory was emptied) is checked the same way.
  if [ "$b" != "$DATA" ] && [ "$(id -u)" = 0 ]; then claim "$b"; fi
  local pgdata="$b/pg" sock="$b/pgsock"
  mkdir -p "$sock"
  if [ "$(id -u)" = 0 ]; then chown postgres "$b" "$sock"; fi
  if [ ! -s "$pgdata/PG_VERSION" ]; then
    as_pg "$BIN/initdb" -D "$pgdata" -U postgres -A trust -E UTF8 --no-locale >/dev/null 9>&-
    cat >>"$pgdata/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$sock'
max_connections = 400
shared_buffers = 256MB
fsync = on
synchronous_commit = on
CONF
  fi
  local port
  port=$(kept_port)
  if ! running "$pgdata"; then
    if [ -z "$port" ]; then
      port=$(free_port)
    elif port_in_use "$port"; then
      local taken="$port"
      port=$(free_port)
      say "port $taken is taken by another program; this checkout's PostgreSQL now uses $port"
    fi
    # The port is given at start (not in postgresql.conf), so moving it
    # needs no edit of the cluster's files. A port nothing listens on can
    # still be bound (the local end of a connection): the server then
    # cannot bind it, and the next free port is tried.
    # 9>&-: the server must not inherit (and hold forever) the ports lock.
    local attempt logged
    for attempt in 1 2 3 4 5; do
      echo "$port" >"$PORTFILE"
      logged=$(stat -c %s "$pgdata/server.log" 2>/dev/null || echo 0)
      if as_pg "$BIN/pg_ctl" -D "$pgdata" -l "$pgdata/server.log" -o "-p $port" -w -t 60 start >/dev/null 9>&-; then
        break
      fi
      if [ "$attempt" -lt 5 ] && tail -c +$((logged + 1)) "$pgdata/server.log" | grep -q "Address already in use"; then
        local taken="$port"
        port=$(free_port $((port + 1)))
        say "port $taken is bound by another program; this checkout's PostgreSQL now uses $port"
        continue
      fi
      say "PostgreSQL did not start on port $port; the end of $pgdata/server.log:"
      tail -n 20 "$pgdata/server.log" >&2
      exit 1
    done
  fi
  url_for "$port"
}

case "${1:-start}" in
start) start ;;
url)
  port=$(kept_port)
  if [ -z "$port" ]; then
    say "this checkout has no throwaway PostgreSQL yet (scripts/pg.sh start, or make run, creates it)"
    exit 1
  fi
  url_for "$port"
  ;;
stop)
  if [ -s "$(base)/pg/PG_VERSION" ]; then
    need_bin
    as_pg "$BIN/pg_ctl" -D "$(base)/pg" -m fast -w stop >/dev/null 2>&1 || true
  fi
  ;;
clean)
  b=$(base)
  if [ -s "$b/pg/PG_VERSION" ]; then
    need_bin
    as_pg "$BIN/pg_ctl" -D "$b/pg" -m fast -w stop >/dev/null 2>&1 || true
  fi
  if [ "$b" != "$DATA" ]; then rm -rf "$b"; fi
  rm -rf "$DATA/pg" "$DATA/pgsock" "$PORTFILE" "$DIRFILE"
  ;;
*) echo "usage: $0 start|url|stop|clean" >&2; exit 2 ;;
esac
