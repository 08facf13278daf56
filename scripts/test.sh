#!/usr/bin/env bash
# Runs Weir's whole test suite on a fresh machine: checks the toolchain, installs what the
# tests need (headless Chromium for the dashboard's test, RocksDB for the disk state backend;
# Kafka-protocol brokers, PostgreSQL servers and an S3-compatible server, started on
# 127.0.0.1 before the tests and stopped again at the end), then formatting, lints, smoke runs
# of the main example and of the benchmarks (the Weir-vs-Flink one installs Apache Flink,
# about 850 MB from PyPI, into its own virtual environment, and Java 17 with apt if missing),
# every test, and a short kill campaign.
# Safe to run again: every step is idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n==> %s\n' "$*"; }

if ! command -v cargo >/dev/null 2>&1; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    else
        echo "error: cargo not found; install the Rust toolchain (rustup) first" >&2
        exit 1
    fi
fi
if ! cargo nextest --version >/dev/null 2>&1; then
    log "installing cargo-nextest"
    cargo install cargo-nextest --locked
fi
for component in rustfmt clippy; do
    if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
        log "installing rust component $component"
        rustup component add "$component"
    fi
done

# A clean clone builds everything once: incremental-compilation caches would only take disk
# (several GB over the workspace's test binaries) on machines where disk can be short.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
log "toolchain: $(cargo --version)"
log "disk free before the build: $(df -h --output=avail . | tail -n 1 | tr -d ' ')"
# Debian's packages the tests need: headless Chromium for the dashboard's browser test;
# RocksDB and libclang for the RocksDB state backend (linked, not built from its C++
# sources, which would take about 14 minutes here).
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium fonts-dejavu-core)
for package in librocksdb-dev libclang-dev; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
rocksdb_lib=$(dpkg -L librocksdb-dev | grep '/librocksdb\.so$' | head -n 1)
export ROCKSDB_LIB_DIR="${ROCKSDB_LIB_DIR:-$(dirname "$rocksdb_lib")}"
export ROCKSDB_INCLUDE_DIR="${ROCKSDB_INCLUDE_DIR:-/usr/include}"
log "installing the test services: Kafka-protocol brokers (tansu: plaintext, TLS, SASL), PostgreSQL, an S3-compatible server (s3s-fs)"
# Installed outside `eval "$(…)"`, so that a failed download or build stops the run with its
# own error.
scripts/kafka-broker.sh install-plain
scripts/postgres.sh install
scripts/s3-server.sh install
# The SASL brokers' tansu is built from source once (about 13 minutes, most of it on both
# cores but the last few on one): in the background, beside the lints and smoke runs, which
# need no service. Its own process group, so that a failed or interrupted run stops it.
mkdir -p target/tools
sasl_build_log=target/tools/sasl-broker-build.log
setsid scripts/kafka-broker.sh install-sasl >"$sasl_build_log" 2>&1 &
sasl_build_pid=$!
# shellcheck source=lib/stop-services.sh
. scripts/lib/stop-services.sh
on_exit() {
    if kill -0 "$sasl_build_pid" 2>/dev/null; then
        kill -- "-$sasl_build_pid" 2>/dev/null || true
    fi
    stop_started_services
}
trap on_exit EXIT
log "format check"
cargo fmt --all -- --check
log "clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings
log "smoke run of the main example (census, with its injected failure and recovery)"
cargo run --locked -q -p weir-examples --bin census -- --quiet --work-dir target/census-smoke \
    --rate 40000 --checkpoint-interval-ms 200 2>/dev/null
cargo run --locked -q -p weir-examples --bin page_view_count -- --records 200000 --pages 500 | tail -n 1
log "smoke run of the Weir-vs-Flink benchmark on small inputs (installs Flink into target/tools/flink/venv once; fails if the engines' outputs disagree)"
cargo run --locked -q -p weir-bench --bin weir-vs-flink -- --rows 20000 --events 20000 \
    --parallelism 2 --workloads keyed,q2 --runs 1 --data-dir target/bench-smoke \
    --json target/bench-smoke/results.json | tail -n 2
log "smoke run of the state benchmark (heap, RocksDB and Flink's RocksDB backend, string keys, a recovery)"
cargo run --locked -q -p weir-bench --bin weir-state-bench -- --keys 20000 \
    --backends heap,rocksdb,flink-rocksdb --checkpoints 1 --interval-ms 1000 --recovery \
    --string-keys --dir target/state-bench-smoke
log "smoke run of the backpressure benchmark (Weir's checkpoints under a throttled stage, aligned and unaligned)"
cargo run --locked -q -p weir-bench --bin weir-backpressure-bench -- \
    --engines weir-aligned,weir-unaligned --seconds 5 --warmup-seconds 1 --interval-ms 500 \
    --dir target/backpressure-bench-smoke
log "deployment files: Kubernetes manifests (kubernetes-validate) and the Dockerfile (hadolint)"
scripts/validate-manifests.sh
log "waiting for the SASL brokers' build (log: $sasl_build_log)"
if ! wait "$sasl_build_pid"; then
    cat "$sasl_build_log" >&2
    echo "error: building the SASL brokers' tansu failed (log above: $sasl_build_log)" >&2
    exit 1
fi
cat "$sasl_build_log"
# Each start's exports go through a variable: a failed start stops the run here (an
# `eval "$(…)"` would hide it).
log "starting the Kafka-protocol brokers (127.0.0.1 only)"
exports=$(scripts/kafka-broker.sh start)
eval "$exports"
log "starting the PostgreSQL servers (127.0.0.1 only)"
exports=$(scripts/postgres.sh start)
eval "$exports"
log "starting the S3-compatible server for the object-storage checkpoint tests (127.0.0.1 only)"
exports=$(scripts/s3-server.sh start)
eval "$exports"
log "documentation tests"
cargo test --workspace --locked --doc
log "tests (nextest: every test in its own process, hung tests killed)"
cargo nextest run --workspace --locked
log "disk used by target/: $(du -sh target | cut -f1); free: $(df -h --output=avail . | tail -n 1 | tr -d ' ')"
log "a short kill campaign (scripts/soak.sh: 20 seeded rounds over the file, Kafka and PostgreSQL pipelines)"
scripts/soak.sh --rounds 20
