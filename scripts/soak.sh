#!/usr/bin/env bash
# The long kill campaign: N seeded rounds (default 1000) over the exactly-once pipelines —
# the census job with the two-phase-commit and the write-ahead-log file sinks (and with
# malformed rows routed to an exactly-once dead-letter sink), Kafka → count
# → Kafka, and Kafka-style word counts into PostgreSQL (append and upsert), each in one
# process and in cluster mode (a JobManager and three TaskManager processes). Each round runs
# one pipeline's SIGKILL test (examples/tests/process_kill.rs, crates/weir-kafka/tests/
# process_kill.rs, crates/weir-postgres/tests/process_kill.rs, and the tests/cluster.rs of
# the same three packages) with its own seed: the job (or a TaskManager) is killed at random
# moments, at its sink's commit point (weighted up here: WEIR_COMMIT_KILL_WEIGHT, default 4
# in 6 of the census kills after the first; in cluster mode a TaskManager always kills
# itself right before its first commit) and while it restores, resumed (or replaced) each
# time, and its committed output checked against the oracle.
#
#   scripts/soak.sh [--rounds N] [--first-seed S] [--commit-weight W]
#
# It starts the Kafka broker and PostgreSQL servers it needs (and stops what it started), and
# reports rounds, kills, the crash windows they hit (mid-run, mid-snapshot, between a
# checkpoint's completion and its commit, during restore), and each failed round — a
# violation of the oracle, or an error of the harness, with the first panic line saying
# which — with the command that replays it. Exit status 1 when any round failed.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=1000
first_seed=1
commit_weight=4
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds="$2"; shift 2 ;;
        --first-seed) first_seed="$2"; shift 2 ;;
        --commit-weight) commit_weight="$2"; shift 2 ;;
        *) echo "usage: $0 [--rounds N] [--first-seed S] [--commit-weight W]" >&2; exit 2 ;;
    esac
done

log() { printf '==> %s\n' "$*" >&2; }

if [ -z "${ROCKSDB_LIB_DIR:-}" ] && dpkg -s librocksdb-dev >/dev/null 2>&1; then
    export ROCKSDB_LIB_DIR
    ROCKSDB_LIB_DIR=$(dirname "$(dpkg -L librocksdb-dev | grep '/librocksdb\.so$' | head -n 1)")
    export ROCKSDB_INCLUDE_DIR=/usr/include
fi

# shellcheck source=lib/stop-services.sh
. scripts/lib/stop-services.sh
# Only what this run starts is stopped: a caller's services (the test script's) stay up.
unset WEIR_KAFKA_BROKER_STARTED WEIR_KAFKA_TLS_STARTED WEIR_KAFKA_SASL_STARTED WEIR_POSTGRES_MAIN_STARTED \
    WEIR_POSTGRES_NO2PC_STARTED WEIR_POSTGRES_TLS_STARTED WEIR_S3_SERVER_STARTED
trap stop_started_services EXIT
# (a failed start must stop the campaign: `eval "$(…)"` alone would hide it)
exports=$(scripts/kafka-broker.sh start)
eval "$exports"
exports=$(scripts/postgres.sh start)
eval "$exports"

# The pipelines: package, test binary, test name. A round's seed picks one.
pipelines=(
    "weir-examples process_kill two_phase_commit_file_sink_survives_sigkill"
    "weir-examples process_kill write_ahead_log_sink_survives_sigkill"
    "weir-examples process_kill dead_letters_are_committed_exactly_once_through_sigkill"
    "weir-kafka process_kill exactly_once_output_survives_sigkill_at_any_moment"
    "weir-postgres process_kill exactly_once_rows_survive_sigkill_at_any_moment"
    "weir-postgres process_kill exactly_once_upserts_survive_sigkill_at_any_moment"
    "weir-examples cluster taskmanager_kills_with_replacements_are_exactly_once"
    "weir-kafka cluster taskmanagers_dying_before_and_after_commits_lose_and_duplicate_nothing"
    "weir-postgres cluster exactly_once_table_survives_taskmanager_kills"
)

log "building the test binaries"
binaries=()
for p in "${pipelines[@]}"; do
    read -r package test _ <<<"$p"
    binary=$(cargo test --locked -q -p "$package" --test "$test" --no-run --message-format=json |
        python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])' | tail -n 1)
    if [ -z "$binary" ]; then
        log "error: no test binary for $package --test $test"
        exit 1
    fi
    binaries+=("$binary")
done

# Binaries run from their package's directory, as cargo test runs them.
package_dir() {
    cargo metadata --format-version 1 --no-deps 2>/dev/null | python3 -c 'import json,sys
m = json.load(sys.stdin)
for p in m["packages"]:
    if p["name"] == sys.argv[1]:
        import os; print(os.path.dirname(p["manifest_path"]))' "$1"
}

out_dir="target/soak"
mkdir -p "$out_dir"
report="$out_dir/report.txt"
: >"$report"
declare -A windows=()
kills=0
missed=0
mid_snapshot=0
violations=()
start=$(date +%s)
for ((round = 0; round < rounds; round++)); do
    seed=$((first_seed + round))
    index=$((seed % ${#pipelines[@]}))
    read -r package test name <<<"${pipelines[$index]}"
    round_log="$out_dir/round-$seed.log"
    set +e
    (cd "$(package_dir "$package")" &&
        WEIR_SEED="$seed" WEIR_COMMIT_KILL_WEIGHT="$commit_weight" RUST_BACKTRACE=0 \
            "${binaries[$index]}" --exact "$name" --nocapture --test-threads 1) >"$round_log" 2>&1
    status=$?
    set -e
    while read -r line; do
        window=$(sed -n 's/.*window=\([^ ]*\).*/\1/p' <<<"$line")
        if grep -q "killed=true" <<<"$line"; then
            kills=$((kills + 1))
            windows[$window]=$(( ${windows[$window]:-0} + 1 ))
            if grep -q "snapshot-in-progress=true" <<<"$line"; then
                mid_snapshot=$((mid_snapshot + 1))
            fi
        else
            missed=$((missed + 1))
        fi
    done < <(grep '^soak-kill:' "$round_log" || true)
    if [ "$status" -ne 0 ]; then
        # A failed round is a violation of the oracle or an error of the harness (a broker
        # gone, a kill that missed its window); its first panic line says which.
        reason=$(grep -m1 -A1 "panicked at" "$round_log" | tail -n 1 | cut -c1-300)
        replay="WEIR_SEED=$seed WEIR_COMMIT_KILL_WEIGHT=$commit_weight cargo test -p $package --test $test $name -- --exact --nocapture"
        violations+=("seed $seed ($name): ${reason:-exit $status}; replay: $replay  [log: $round_log]")
        echo "round $seed: FAILED in $name: ${reason:-exit $status}; replay: $replay" | tee -a "$report" >&2
    else
        rm -f "$round_log"
    fi
    if (((round + 1) % 10 == 0)); then
        log "$((round + 1))/$rounds rounds, $kills kills, ${#violations[@]} failed, $(($(date +%s) - start)) s"
    fi
done

{
    echo "soak campaign: $rounds rounds (seeds $first_seed..$((first_seed + rounds - 1))), commit weight $commit_weight, $(($(date +%s) - start)) s"
    echo "kills: $kills (and $missed aimed kills that found the process already ended)"
    echo "crash windows hit:"
    for w in mid-run between-completion-and-commit during-restore; do
        echo "  $w: ${windows[$w]:-0}"
    done
    echo "  mid-snapshot (a checkpoint being written at the kill, any of the above): $mid_snapshot"
    echo "failed rounds (violations, or harness errors: see each reason): ${#violations[@]}"
    for v in "${violations[@]}"; do echo "  $v"; done
} | tee -a "$report"
[ "${#violations[@]}" -eq 0 ]
