#!/usr/bin/env bash
# Builds and runs the state-engine comparison (not part of CI: RocksDB's bundled C++ build
# alone takes about 14 minutes on 2 cores). Figures go to stdout; see README.md.
# usage: bench/state-engines/run.sh [KEYS] [READS]
set -euo pipefail
cd "$(dirname "$0")"
keys="${1:-1000000}"
reads="${2:-200000}"
if [ "$(id -u)" = 0 ] && ! dpkg -s librocksdb-dev libclang-dev >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq librocksdb-dev libclang-dev
fi
# RocksDB 7.8.3 from Debian, linked (no C++ build).
ROCKSDB_LIB_DIR=/usr/lib/x86_64-linux-gnu ROCKSDB_INCLUDE_DIR=/usr/include \
    CARGO_TARGET_DIR=target/debian cargo build --release --locked --features rocksdb
# RocksDB 7.9.2 built from the crate's bundled sources.
CARGO_TARGET_DIR=target/bundled cargo build --release --locked --features rocksdb
CARGO_TARGET_DIR=target/fjall cargo build --release --locked --features fjall
for run in "debian rocksdb" "bundled rocksdb" "fjall fjall"; do
    set -- $run
    echo "== $2 ($1)"
    "target/$1/release/weir-state-engines" --engine "$2" --keys "$keys" --reads "$reads" \
        --dir "target/data-$1"
done
