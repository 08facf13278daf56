#!/usr/bin/env bash
# Installs and runs the S3-compatible server the object-storage tests use: s3s-fs 0.14.1
# (Rust, from crates.io, built with its `binary` feature; later versions need a newer Rust).
# It serves buckets as directories under target/tools/s3s/data, on 127.0.0.1 only.
#
#   scripts/s3-server.sh install   build it into target/tools/s3s (idempotent)
#   scripts/s3-server.sh start     start it unless it runs; prints shell exports:
#                                  eval "$(scripts/s3-server.sh start)"
#   scripts/s3-server.sh stop      stop the server this script started (by PID)
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS="target/tools/s3s"
BIN="$TOOLS/bin/s3s-fs"
DATA="$TOOLS/data"
PID_FILE="$TOOLS/server.pid"
PORT_FILE="$TOOLS/server.port"
LOG_FILE="$TOOLS/server.log"
BUCKET="weir-test"
ACCESS_KEY="weir-test-access"
SECRET_KEY="weir-test-secret"

# shellcheck source=lib/service.sh
. scripts/lib/service.sh

install() {
    if [ -x "$BIN" ]; then
        return
    fi
    log "building s3s-fs 0.14.1 from crates.io (about two minutes on two cores)"
    cargo install s3s-fs --version 0.14.1 --features binary --locked --root "$TOOLS" >&2
}

running() { pid_running "$PID_FILE"; }

exports() {
    echo "export WEIR_S3_URL=s3://$BUCKET"
    echo "export AWS_ENDPOINT=http://127.0.0.1:$1"
    echo "export AWS_ALLOW_HTTP=true"
    echo "export AWS_ACCESS_KEY_ID=$ACCESS_KEY"
    echo "export AWS_SECRET_ACCESS_KEY=$SECRET_KEY"
    echo "export AWS_REGION=us-east-1"
}

start() {
    install
    if running && listening "$(cat "$PORT_FILE")"; then
        exports "$(cat "$PORT_FILE")"
        return
    fi
    # A bucket is a directory of the server's root.
    mkdir -p "$DATA/$BUCKET"
    local port
    port=$(free_port)
    nohup "$BIN" --host 127.0.0.1 --port "$port" \
        --access-key "$ACCESS_KEY" --secret-key "$SECRET_KEY" "$DATA" >"$LOG_FILE" 2>&1 &
    echo $! >"$PID_FILE"
    echo "$port" >"$PORT_FILE"
    for _ in $(seq 1 100); do
        if listening "$port"; then
            log "s3s-fs on 127.0.0.1:$port (pid $(cat "$PID_FILE"), data $DATA, log $LOG_FILE)"
            exports "$port"
            echo "export WEIR_S3_SERVER_STARTED=1"
            return
        fi
        sleep 0.1
    done
    log "error: s3s-fs did not start listening on 127.0.0.1:$port; its log:"
    cat "$LOG_FILE" >&2
    exit 1
}

stop() {
    if running; then
        kill "$(cat "$PID_FILE")"
        log "stopped s3s-fs (pid $(cat "$PID_FILE"))"
    fi
    rm -f "$PID_FILE" "$PORT_FILE"
}

case "${1:-}" in
    install) install ;;
    start) start ;;
    stop) stop ;;
    *) log "usage: $0 install|start|stop"; exit 2 ;;
esac
