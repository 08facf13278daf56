//! The fuzz targets on stable Rust, in CI: every input of the seed corpus
//! (`fuzz/corpus/<target>/`) and every regression input (`fuzz/regressions/<target>/`, one
//! per crash the fuzzer found, kept after the fix), then random and mutated inputs by
//! proptest (`PROPTEST_CASES` sets how many; a failure prints the input to replay). An
//! allocation above 512 MiB aborts the test binary, as it fails the fuzzer.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use weir_fuzz::TARGETS;

/// Refuses any single allocation above 512 MiB, as the fuzzer's `-malloc_limit_mb` does: an
/// allocation that follows a length field aborts the test instead of passing on a machine
/// that overcommits memory.
struct LimitedAllocator;

const ALLOCATION_LIMIT: usize = 512 << 20;

// SAFETY: every call is passed to the system allocator unchanged, or refused with null,
// which callers handle as an allocation failure.
unsafe impl GlobalAlloc for LimitedAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ALLOCATION_LIMIT {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout contract is passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > ALLOCATION_LIMIT {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract is passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: LimitedAllocator = LimitedAllocator;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn inputs(kind: &str, target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = root().join(kind).join(target);
    let mut found: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.path().is_file())
                .map(|e| (e.path(), std::fs::read(e.path()).unwrap()))
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

#[test]
fn every_target_has_seeds_and_a_fuzz_target_file() {
    for (name, _) in TARGETS {
        assert!(
            !inputs("corpus", name).is_empty(),
            "no seeds in fuzz/corpus/{name}: run `cargo run -p weir-fuzz --bin weir-fuzz-seeds`"
        );
        let file = root().join("fuzz_targets").join(format!("{name}.rs"));
        assert!(file.is_file(), "{} is missing", file.display());
    }
}

#[test]
fn the_seed_corpus_and_every_regression_input_pass() {
    let mut ran = 0;
    for (name, target) in TARGETS {
        for kind in ["corpus", "regressions"] {
            for (path, bytes) in inputs(kind, name) {
                let outcome = std::panic::catch_unwind(|| target(&bytes));
                assert!(outcome.is_ok(), "{name} panics on {}", path.display());
                ran += 1;
            }
        }
    }
    println!("{ran} inputs replayed");
}

/// The seeds of `target`, to mutate.
fn seeds_of(target: &str) -> Vec<Vec<u8>> {
    let mut seeds: Vec<Vec<u8>> = inputs("corpus", target)
        .into_iter()
        .map(|(_, b)| b)
        .collect();
    seeds.push(Vec::new());
    seeds
}

/// A seed with some bytes overwritten, some cut out and some inserted.
fn mutated(target: &'static str) -> impl Strategy<Value = Vec<u8>> {
    let seeds = seeds_of(target);
    (
        0..seeds.len(),
        proptest::collection::vec((any::<u16>(), any::<u8>(), 0u8..3), 0..8),
    )
        .prop_map(move |(seed, edits)| {
            let mut bytes = seeds[seed].clone();
            for (at, byte, kind) in edits {
                let at = usize::from(at) % (bytes.len() + 1);
                match kind {
                    0 if at < bytes.len() => bytes[at] = byte,
                    1 if at < bytes.len() => {
                        bytes.remove(at);
                    }
                    _ => bytes.insert(at, byte),
                }
            }
            bytes
        })
}

macro_rules! fuzzed {
    ($test:ident, $name:literal, $target:path) => {
        proptest! {
            #[test]
            fn $test(
                bytes in prop_oneof![
                    proptest::collection::vec(any::<u8>(), 0..512),
                    mutated($name),
                ]
            ) {
                $target(&bytes);
            }
        }
    };
}

fuzzed!(
    checkpoint_metadata,
    "checkpoint_metadata",
    weir_fuzz::checkpoint_metadata
);
fuzzed!(
    keyed_state_block,
    "keyed_state_block",
    weir_fuzz::keyed_state_block
);
fuzzed!(network_frames, "network_frames", weir_fuzz::network_frames);
fuzzed!(csv_fast_path, "csv_fast_path", weir_fuzz::csv_fast_path);
fuzzed!(json_value, "json_value", weir_fuzz::json_value);
fuzzed!(kafka_log, "kafka_log", weir_fuzz::kafka_log);
fuzzed!(
    kafka_compressed_batch,
    "kafka_compressed_batch",
    weir_fuzz::kafka_compressed_batch
);
fuzzed!(kafka_response, "kafka_response", weir_fuzz::kafka_response);
