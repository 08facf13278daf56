#!/usr/bin/env bash
# The storage-fault campaign (crates/weir/tests/storage_faults.rs): checkpoint storage that
# refuses writes for lack of space, leaves files truncated, fails fsyncs and renames, and
# errors on listings, reads and deletions — at chosen calls and at random, seeded. CI runs
# the same tests with 4 random seeds; this runs many more, and checks that the tests catch
# the bugs they were built for.
#
#   scripts/storage-faults.sh                 200 random seeds (WEIR_SEEDS)
#   scripts/storage-faults.sh --seeds N       N seeds instead
#   scripts/storage-faults.sh --mutations     also: each patch in scripts/storage-faults/mutations
#                                             is applied to a scratch worktree of HEAD, where
#                                             the tests must fail
#   scripts/storage-faults.sh --mutations-only  only that check
# A failing seed prints `replay with WEIR_SEED=s`.
set -euo pipefail
cd "$(dirname "$0")/.."

seeds=200
mutations=0
campaign=1
while [ $# -gt 0 ]; do
    case "$1" in
        --seeds) seeds="$2"; shift 2 ;;
        --mutations) mutations=1; shift ;;
        --mutations-only) mutations=1; campaign=0; shift ;;
        *) echo "usage: $0 [--seeds N] [--mutations | --mutations-only]" >&2; exit 2 ;;
    esac
done

# Runs the storage-fault tests in tree $1 with $2 random seeds.
faults() {
    (cd "$1" && WEIR_SEEDS="$2" cargo test --locked -p weir --test storage_faults -- --test-threads 1)
}

if [ $campaign = 1 ]; then
    started=$(date +%s)
    echo "==> storage faults ($seeds random seeds)"
    faults . "$seeds"
    echo "==> done in $(( $(date +%s) - started )) s"
fi

if [ $mutations = 1 ]; then
    mutants_target="$PWD/target/mutants-target"
    for patch in scripts/storage-faults/mutations/*.patch; do
        name="$(basename "$patch" .patch)"
        tree="$PWD/target/mutants/$name"
        echo "==> mutation $name: the storage-fault tests must fail"
        rm -rf "$tree"
        git worktree prune
        git worktree add --detach -q "$tree" HEAD
        patch_path="$PWD/$patch"
        if ! (cd "$tree" && git apply "$patch_path"); then
            echo "mutation $name: the patch no longer applies; update it" >&2
            git worktree remove --force "$tree"
            exit 1
        fi
        if CARGO_TARGET_DIR="$mutants_target" faults "$tree" 4 >"$tree.log" 2>&1; then
            echo "mutation $name: NOT caught — the tests passed with the bug in place" >&2
            git worktree remove --force "$tree"
            exit 1
        fi
        grep -E "^thread '[a-z_]+' .*panicked at crates/weir/tests/storage_faults.rs" -A1 "$tree.log" \
            | head -n 4 || true
        echo "mutation $name: caught"
        git worktree remove --force "$tree"
    done
fi
