#!/usr/bin/env bash
# Runs the cargo-fuzz targets of fuzz/ (libFuzzer, nightly Rust, AddressSanitizer) — every
# decoder that reads bytes from outside (crates/weir-fuzz). Not part of CI, which replays the
# corpus and the regression inputs on stable (crates/weir-fuzz/tests/corpus.rs).
#
#   scripts/fuzz.sh [--seconds N] [--jobs J] [target ...]
#
# Each target runs N seconds (default 600), J at a time (default 2), starting from its seeds
# in fuzz/corpus/<target> (read only; what the fuzzer finds goes to fuzz/target/corpus/).
# Limits: 2 GiB resident, 512 MiB per allocation, 10 s per input — an allocation that follows
# a length field, or a loop, is a crash. A crash leaves its input in fuzz/artifacts/<target>/;
# after the fix it goes to fuzz/regressions/<target>/, which the stable test replays.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/service.sh

seconds=600
jobs=2
targets=()
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds="$2"; shift 2 ;;
        --jobs) jobs="$2"; shift 2 ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) targets+=("$1"); shift ;;
    esac
done

if ! rustup toolchain list | grep -q '^nightly'; then
    log "installing the nightly toolchain (cargo-fuzz needs it for libFuzzer and the sanitizer)"
    rustup toolchain install nightly --profile minimal
fi
if ! command -v cargo-fuzz >/dev/null 2>&1; then
    log "installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi
export ROCKSDB_LIB_DIR="${ROCKSDB_LIB_DIR:-/usr/lib/x86_64-linux-gnu}"
export ROCKSDB_INCLUDE_DIR="${ROCKSDB_INCLUDE_DIR:-/usr/include}"
cd fuzz
if [ "${#targets[@]}" -eq 0 ]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
log "building ${#targets[@]} targets (release, AddressSanitizer)"
cargo +nightly fuzz build -O

run_one() {
    local target="$1" work="target/corpus/$1" log="target/logs/$1.log"
    mkdir -p "$work" "target/logs" "artifacts/$target"
    if cargo +nightly fuzz run -O "$target" "$work" "corpus/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=512 -timeout=10 \
        -max_len=65536 -print_final_stats=1 >"$log" 2>&1; then
        echo "ok"
    else
        echo "CRASH"
    fi
}

mkdir -p target/logs
failed=0
running=0
for target in "${targets[@]}"; do
    (run_one "$target" >"target/logs/$target.result") &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
done
wait
printf '%-22s %8s %14s %8s %s\n' target result executions corpus "crash input"
for target in "${targets[@]}"; do
    result=$(cat "target/logs/$target.result" 2>/dev/null || echo "?")
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "target/logs/$target.log" 2>/dev/null | grep -o '[0-9]*$' || echo "?")
    corpus=$(find "target/corpus/$target" -type f 2>/dev/null | wc -l)
    artifact=""
    if [ "$result" != ok ]; then
        failed=1
        artifact=$(ls -t "artifacts/$target" 2>/dev/null | head -n 1)
    fi
    printf '%-22s %8s %14s %8s %s\n' "$target" "$result" "${runs:-?}" "$corpus" \
        "${artifact:+fuzz/artifacts/$target/$artifact}"
done
if [ "$failed" = 1 ]; then
    log "a target crashed: its log is fuzz/target/logs/<target>.log; replay with"
    log "  cd fuzz && cargo +nightly fuzz run -O <target> <crash input>"
    exit 1
fi
log "every target ran ${seconds}s without a crash"
