#!/usr/bin/env bash
# Runs the whole test suite (scripts/test.sh, README command 2) several times in a row while
# other processes keep every core busy — a laptop building something else, a shared CI
# machine on a bad day — to show that no test depends on how fast the machine or a job is.
# Stops at the first failed run, and names the tests that failed.
#
#   scripts/test-under-load.sh [--runs N] [--busy N] [--nice N] [--log-dir DIR]
#
#   --runs N     runs of the suite, one after the other (default 3)
#   --busy N     busy processes (`yes > /dev/null`) kept running meanwhile (default: one per
#                core, so that the suite gets about half of the machine)
#   --nice N     their niceness (default 0: the same priority as the suite; 19 would leave
#                the suite nearly the whole machine)
#   --log-dir D  where each run's output and the summary go (default target/under-load)
#
# The busy processes are stopped by PID when the script ends, however it ends.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=3
busy=$(nproc)
niceness=0
log_dir=target/under-load
while [ "$#" -gt 0 ]; do
    case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --busy) busy="$2"; shift 2 ;;
    --nice) niceness="$2"; shift 2 ;;
    --log-dir) log_dir="$2"; shift 2 ;;
    -h | --help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "error: unknown argument \`$1\` (see --help)" >&2; exit 2 ;;
    esac
done
for value in "$runs" "$busy" "$niceness"; do
    case "$value" in
    '' | *[!0-9]*) echo "error: \`$value\` is not a whole number (see --help)" >&2; exit 2 ;;
    esac
done

mkdir -p "$log_dir"
summary="$log_dir/summary.txt"
busy_pids=()
stop_load() {
    for pid in "${busy_pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
}
trap stop_load EXIT
for _ in $(seq "$busy"); do
    nice -n "$niceness" yes >/dev/null &
    busy_pids+=("$!")
done

{
    echo "$(date -u +%Y-%m-%dT%H:%M:%SZ): $runs run(s) of scripts/test.sh on $(nproc) core(s)," \
        "with $busy busy process(es) at niceness $niceness (PIDs ${busy_pids[*]:-none})"
    echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
} | tee -a "$summary"

for run in $(seq "$runs"); do
    log="$log_dir/run-$run.log"
    started=$(date +%s)
    if scripts/test.sh >"$log" 2>&1; then
        outcome=passed
    else
        outcome=failed
    fi
    took=$(($(date +%s) - started))
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    tests=$(grep -E '^ +Summary \[' "$log" | tail -n 1 | sed 's/^ *//' || true)
    printf 'run %d of %d: %s in %dm%02ds (load average %s); %s; log %s\n' \
        "$run" "$runs" "$outcome" $((took / 60)) $((took % 60)) "$load" \
        "${tests:-no test summary}" "$log" | tee -a "$summary"
    if [ "$outcome" = failed ]; then
        echo "failed tests (and the step that failed, if no test did):" | tee -a "$summary"
        grep -E '^ +(FAIL|TIMEOUT|SIGSEGV|SIGABRT) \[' "$log" | sed 's/^ */  /' | sort -u |
            tee -a "$summary" || true
        tail -n 5 "$log" | sed 's/^/  | /' | tee -a "$summary"
        exit 1
    fi
done
echo "all $runs run(s) passed under load" | tee -a "$summary"
