#!/usr/bin/env bash
# The full crash-point sweep of the census job (examples/tests/crash_sweep.rs): every durable
# file operation of every scenario — fresh, resumed, rescaled, stop-with-savepoint, the end of a
# bounded run, a second kill during recovery, for both exactly-once file sinks — is a crash
# point; each is tried, recovered and checked against the exactly-once oracle. Then the zombie
# sweep (examples/tests/zombie_sweep.rs): the job stopped (SIGSTOP) at each operation, its lock
# file removed, a replacement run to the end, the stopped process continued, the output
# checked — also with the checkpoints on the S3-compatible server, stopped at file operations
# and at object-storage writes — and the cluster zombie sweeps
# (examples/tests/cluster_zombies.rs: a stale JobManager at each of its object-storage
# writes, a stale TaskManager at each of its object-storage writes and file operations, a
# second cluster run to the end). Then the zombie sweeps into PostgreSQL and Kafka (crates/weir-postgres and
# crates/weir-kafka, tests/zombie_sweep.rs): stops at file operations, PREPARE TRANSACTION,
# COMMIT PREPARED and Kafka commits — in cluster mode on S3 too (tests/cluster_zombies.rs: a
# stale JobManager at its object-storage writes, a stale TaskManager at its prepares and
# commits) — against the servers scripts/postgres.sh and
# scripts/kafka-broker.sh start (and this script stops, with scripts/s3-server.sh's server). CI runs a sample of the same tests;
# this runs all of them (over an hour on 2 cores).
#
#   scripts/crash-sweep.sh              the full sweep
#   scripts/crash-sweep.sh --sample N   N points per scenario instead
#   scripts/crash-sweep.sh --mutations  also checks that the sweep catches the bugs it was
#                                       built for: each patch in scripts/crash-sweep/mutations
#                                       is applied to a scratch worktree of HEAD, and a sampled
#                                       sweep there must report violations
#   scripts/crash-sweep.sh --mutations-only   only that check
set -euo pipefail
cd "$(dirname "$0")/.."

sample=full
mutations=0
sweep_here=1
while [ $# -gt 0 ]; do
    case "$1" in
        --sample) sample="$2"; shift 2 ;;
        --mutations) mutations=1; shift ;;
        --mutations-only) mutations=1; sweep_here=0; shift ;;
        *) echo "usage: $0 [--sample N] [--mutations | --mutations-only]" >&2; exit 2 ;;
    esac
done

if ! cargo nextest --version >/dev/null 2>&1; then
    cargo install cargo-nextest --locked
fi

# Runs the sweep tests of weir-examples in tree $1 (with CARGO_TARGET_DIR as set by the
# caller), $2 points per scenario, the test targets after that; prints the per-scenario lines
# and leaves the exit status of the test run.
sweep() {
    local tree="$1" points="$2" log
    shift 2
    local tests=()
    for t in "$@"; do tests+=(--test "$t"); done
    log="$(mktemp)"
    set +e
    (cd "$tree" && WEIR_CRASH_SWEEP="$points" cargo nextest run --locked --profile sweep -p weir-examples \
        "${tests[@]}" --no-capture --no-fail-fast >"$log" 2>&1)
    local status=$?
    set -e
    grep -E '^((cluster )?zombie )?sweep |^  [0-9]+ zombies' "$log" || true
    if [ $status -ne 0 ] && ! grep -qE '^((cluster )?zombie )?sweep ' "$log"; then
        tail -n 40 "$log" >&2
    fi
    awk '/^((cluster )?zombie )?sweep /{ for (i = 1; i <= NF; i++) { if ($(i+1) == "trials") t += $i; if ($(i+1) == "violations") v += $i } }
         END { printf "total: %d trials, %d violations\n", t, v }' "$log"
    rm -f "$log"
    return $status
}

# The zombie sweeps on object storage need the S3-compatible server.
# shellcheck source=lib/stop-services.sh
. scripts/lib/stop-services.sh
trap stop_started_services EXIT
# Each start's exports go through a variable: a failed start stops the script here (an
# `eval "$(…)"` would hide it).
exports=$(scripts/s3-server.sh start)
eval "$exports"
if [ $sweep_here = 1 ]; then
    started=$(date +%s)
    echo "==> crash-point and zombie sweeps of the census job ($sample points per scenario)"
    sweep . "$sample" crash_sweep zombie_sweep cluster_zombies
    echo "==> done in $(( $(date +%s) - started )) s"
    started=$(date +%s)
    echo "==> zombie sweeps into PostgreSQL and Kafka ($sample points)"
    exports=$(scripts/postgres.sh start)
    eval "$exports"
    exports=$(scripts/kafka-broker.sh start)
    eval "$exports"
    log="$(mktemp)"
    set +e
    WEIR_CRASH_SWEEP="$sample" cargo nextest run --locked --profile sweep -p weir-postgres \
        -p weir-kafka --test zombie_sweep --test cluster_zombies --no-capture --no-fail-fast >"$log" 2>&1
    status=$?
    set -e
    grep -E '^((cluster )?zombie sweep |  )' "$log" || true
    [ $status -eq 0 ] || { tail -n 40 "$log" >&2; rm -f "$log"; exit $status; }
    rm -f "$log"
    echo "==> done in $(( $(date +%s) - started )) s"
fi

if [ $mutations = 1 ]; then
    mutants_target="$PWD/target/mutants-target"
    for patch in scripts/crash-sweep/mutations/*.patch; do
        name="$(basename "$patch" .patch)"
        tree="$PWD/target/mutants/$name"
        echo "==> mutation $name: the sweep must fail"
        rm -rf "$tree"
        git worktree prune
        git worktree add --detach -q "$tree" HEAD
        # The scratch tree is HEAD: commit what the mutations should be checked against.
        patch_path="$PWD/$patch"
        if ! (cd "$tree" && git apply "$patch_path"); then
            echo "mutation $name: the patch no longer applies; update it" >&2
            git worktree remove --force "$tree"
            exit 1
        fi
        if CARGO_TARGET_DIR="$mutants_target" sweep "$tree" 40 crash_sweep zombie_sweep; then
            echo "mutation $name: NOT caught — the sweep passed with the bug in place" >&2
            git worktree remove --force "$tree"
            exit 1
        fi
        echo "mutation $name: caught"
        git worktree remove --force "$tree"
    done
fi
