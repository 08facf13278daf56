#!/usr/bin/env bash
# Installs (apt) and runs the PostgreSQL servers the PostgreSQL tests use, on 127.0.0.1 only:
# "main" with max_prepared_transactions = 20 (for the exactly-once sink), "no2pc" with
# max_prepared_transactions = 0 (to check the sink refuses it clearly at start), and "tls",
# which takes only TLS connections (ssl = on; plaintext rejected in pg_hba.conf) with
# scram-sha-256 passwords, its certificate signed by a test CA this script generates (and a
# second, untrusted CA, for the tests that a certificate from elsewhere is refused).
#
#   scripts/postgres.sh start   start them unless they run; prints shell exports:
#                               eval "$(scripts/postgres.sh start)"
#   scripts/postgres.sh stop    stop the servers this script started (by PID)
set -euo pipefail
cd "$(dirname "$0")/.."

# Data directories live outside the work tree: the server runs as the `postgres` user, which
# may not be able to enter it.
BASE="${TMPDIR:-/tmp}/weir-postgres-$(id -u)-$(pwd | cksum | cut -d' ' -f1)"
USER_NAME=weir

# shellcheck source=lib/service.sh
. scripts/lib/service.sh

pg_bin() {
    ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

install() {
    local missing=()
    if [ -z "$(pg_bin)" ] || [ ! -x "$(pg_bin)/initdb" ]; then missing+=(postgresql); fi
    command -v openssl >/dev/null 2>&1 || missing+=(openssl)
    if [ "${#missing[@]}" -eq 0 ]; then
        return
    fi
    log "installing ${missing[*]} (apt)"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
}

# The test CAs and the TLS server's certificate (for 127.0.0.1 and localhost), made once.
make_certificates() {
    make_test_certificates "$1"
    if [ "$(id -u)" = 0 ]; then chown postgres "$1/server.key" "$1/server.crt"; fi
}

# The TLS server's data directory: scram-sha-256 for user weir with a generated password;
# over TCP only TLS connections are accepted.
init_tls() {
    local data="$1" bin="$2" certs="$3"
    make_certificates "$certs"
    if [ ! -f "$BASE/tls.password" ]; then
        python3 -c 'import secrets; print(secrets.token_hex(12))' >"$BASE/tls.password"
        chmod 644 "$BASE/tls.password"
    fi
    if [ ! -f "$data/PG_VERSION" ]; then
        as_server_user "$bin/initdb" -D "$data" -U "$USER_NAME" --auth=scram-sha-256 \
            --pwfile="$BASE/tls.password" -E UTF8 --locale=C >/dev/null
        {
            echo "local all all scram-sha-256"
            echo "hostssl all all 127.0.0.1/32 scram-sha-256"
            echo "hostnossl all all 127.0.0.1/32 reject"
        } | as_server_user tee "$data/pg_hba.conf" >/dev/null
    fi
}

# Runs a server command as the postgres user when we are root (initdb refuses root).
as_server_user() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

running() {
    local data="$1"
    [ -f "$data/postmaster.pid" ] && kill -0 "$(head -n 1 "$data/postmaster.pid")" 2>/dev/null
}

start_one() {
    local name="$1" prepared="$2" var="$3"
    local data="$BASE/$name" bin certs="$BASE/certs" options=""
    bin="$(pg_bin)"
    mkdir -p "$BASE"
    if [ "$(id -u)" = 0 ]; then chown postgres "$BASE"; fi
    if [ "$name" = tls ]; then
        init_tls "$data" "$bin" "$certs"
        options="-c ssl=on -c ssl_cert_file=$certs/server.crt -c ssl_key_file=$certs/server.key -c password_encryption=scram-sha-256"
    elif [ ! -f "$data/PG_VERSION" ]; then
        as_server_user "$bin/initdb" -D "$data" -U "$USER_NAME" --auth=trust -E UTF8 \
            --locale=C >/dev/null
    fi
    if ! running "$data"; then
        local port
        port=$(free_port)
        echo "$port" >"$BASE/$name.port"
        if [ "$(id -u)" = 0 ]; then chown postgres "$BASE/$name.port"; fi
        as_server_user "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w -s \
            -o "-c listen_addresses=127.0.0.1 -p $port -k $data -c max_prepared_transactions=$prepared -c fsync=off $options" \
            start >&2
        echo "export WEIR_POSTGRES_${name^^}_STARTED=1"
        log "PostgreSQL ($name, max_prepared_transactions=$prepared) on 127.0.0.1:$port (pid $(head -n 1 "$data/postmaster.pid"))"
    fi
    local port
    port=$(cat "$BASE/$name.port")
    if [ "$name" = tls ]; then
        echo "export $var='postgresql://$USER_NAME:$(cat "$BASE/tls.password")@127.0.0.1:$port/postgres?sslmode=verify-full&sslrootcert=$certs/ca.crt'"
        echo "export WEIR_POSTGRES_TLS_PASSWORD=$(cat "$BASE/tls.password")"
        echo "export WEIR_POSTGRES_TLS_CA=$certs/ca.crt"
        echo "export WEIR_POSTGRES_TLS_UNTRUSTED_CA=$certs/untrusted-ca.crt"
    else
        echo "export $var=postgresql://$USER_NAME@127.0.0.1:$port/postgres"
    fi
}

start() {
    install
    start_one main 20 WEIR_POSTGRES_URL
    start_one no2pc 0 WEIR_POSTGRES_NO_2PC_URL
    start_one tls 20 WEIR_POSTGRES_TLS_URL
}

stop() {
    for name in main no2pc tls; do
        local data="$BASE/$name"
        if running "$data"; then
            local pid
            pid=$(head -n 1 "$data/postmaster.pid")
            # SIGINT: PostgreSQL's fast shutdown.
            kill -INT "$pid"
            for _ in $(seq 1 100); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
            done
            log "stopped PostgreSQL ($name, pid $pid)"
        fi
    done
}

case "${1:-}" in
    install) install ;;
    start) start ;;
    stop) stop ;;
    *) log "usage: $0 install|start|stop"; exit 2 ;;
esac
