#!/usr/bin/env bash
# A throwaway PostgreSQL server for the store's PostgreSQL tests.
#
#   eval "$(bash .ci/postgres.sh)"          # start one; exports LEDGER_TEST_POSTGRES_URL (and _DATA)
#   bash .ci/postgres.sh --stop "$LEDGER_TEST_POSTGRES_DATA"   # stop it and remove its files
#
# Installs the Debian `postgresql` package first if no initdb is found (as root, which CI
# is). The cluster lives in a fresh temporary folder, listens on 127.0.0.1 on a free port
# with trust authentication (superuser `postgres`, no password), and holds an empty
# database `ledger_test`; the tests create (and drop) one database of their own per test
# through it. On stdout only `export NAME=value` lines, so `eval` takes them; the rest goes
# to stderr.
set -euo pipefail

log() { echo "postgres.sh: $*" >&2; }

find_bin() {
    local found
    found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    if [[ -n "$found" && -x "$found/initdb" ]]; then
        echo "$found"
    elif command -v initdb >/dev/null 2>&1; then
        dirname "$(command -v initdb)"
    fi
}

# Run a server binary as the cluster's owner: the `postgres` user when we are root
# (the server refuses to run as root), else ourselves.
as_owner() {
    if [[ $(id -u) -eq 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

if [[ "${1:-}" == "--stop" ]]; then
    data=${2:?usage: postgres.sh --stop DATA_DIR}
    bin=$(find_bin)
    as_owner "$bin/pg_ctl" -D "$data" -m fast -w stop >&2 || true
    rm -rf "$(dirname "$data")"
    exit 0
fi

bin=$(find_bin)
if [[ -z "$bin" ]]; then
    if [[ $(id -u) -ne 0 ]]; then
        log "no initdb found: install PostgreSQL (apt-get install postgresql) or run this as root"
        exit 1
    fi
    log "installing the postgresql package"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends postgresql >&2
    bin=$(find_bin)
    [[ -n "$bin" ]] || { log "postgresql installed but no initdb found"; exit 1; }
fi

if [[ $(id -u) -eq 0 ]] && ! id postgres >/dev/null 2>&1; then
    useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
fi

root=$(mktemp -d "${TMPDIR:-/tmp}/ledger-postgres.XXXXXX")
chmod 755 "$root"
[[ $(id -u) -eq 0 ]] && chown postgres: "$root"
data="$root/data"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')

as_owner "$bin/initdb" -D "$data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 --no-sync >"$root/initdb.log" 2>&1 || {
    cat "$root/initdb.log" >&2
    exit 1
}
# A test server: durability off (a crash loses nothing the tests need), sockets in the
# cluster's own folder, enough connections for two xdist workers and their subprocesses.
as_owner "$bin/pg_ctl" -D "$data" -l "$root/server.log" -w -t 60 start -o \
    "-c listen_addresses=127.0.0.1 -p $port -k $root -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
    >&2 || {
    cat "$root/server.log" >&2
    exit 1
}
as_owner "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres ledger_test

log "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port, data in $data"
echo "export LEDGER_TEST_POSTGRES_URL=postgresql+psycopg://postgres@127.0.0.1:$port/ledger_test"
echo "export LEDGER_TEST_POSTGRES_DATA=$data"
