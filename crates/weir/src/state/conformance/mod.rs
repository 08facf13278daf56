//! What every keyed state backend must do, as tests any backend runs against itself (one in
//! another crate, on disk, included): the same operations read what they read on the heap
//! backend, savepoints restore into either backend, also rescaled, the backend's own
//! checkpoints hold exactly the state at their barrier and restore at any parallelism, and
//! timers and time-to-live behave alike.
//!
//! A backend crate runs the whole suite with one line in its tests (with `weir`'s `testing`
//! feature):
//!
//! ```ignore
//! weir::keyed_state_backend_conformance!(my_backend::conformance_subject());
//! ```
//!
//! where the expression gives a [`StoreKind::Backend`]. Random operations come from
//! proptest; a failure prints the operations it found (and `PROPTEST_RNG_SEED` replays one).

pub mod scenarios;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use proptest::prelude::*;

use crate::api::functions::{AggregateFunction, KeyedContext, RuntimeContext};
use crate::checkpoint::metadata::KeyedStateHandle;
use crate::error::StateError;
use crate::runtime::stream_element::{CheckpointBarrier, SnapshotType};
use crate::runtime::task::OperatorSetup;
use crate::state::backend::SnapshotOutput;
use crate::state::backend_factory::{
    BackendContext, RestoredStateFiles, StateBackendConfig, StateBackendFactory,
};
use crate::state::key_group::KeyGroupRange;
use crate::state::keyed_state_snapshot::{decode_key_group_block, KeyGroupBlock};
use crate::state::serialized_keyed_state::SerializedKeyedState;
use crate::state::timers::InternalTimerService;
use crate::state::ttl::TtlClock;
use crate::state::{
    AggregatingState, HeapKeyedStateBackend, KeyedState, KeyedStateStore, ListState, MapState,
    ReducingState, ValueState,
};

/// Runs every scenario of the suite as a `#[test]` against the backend the expression
/// gives (a [`StoreKind`]; evaluated once per test).
#[macro_export]
macro_rules! keyed_state_backend_conformance {
    ($kind:expr) => {
        /// Counts and sums: the suite's aggregate function.
        #[derive(Clone)]
        struct ConformanceCountAndSum;

        impl $crate::AggregateFunction<u64, (u64, u64), (u64, u64)> for ConformanceCountAndSum {
            fn create_accumulator(&self) -> (u64, u64) {
                (0, 0)
            }
            fn add(&self, value: u64, acc: &mut (u64, u64)) {
                acc.0 += 1;
                acc.1 += value;
            }
            fn get_result(&self, acc: &(u64, u64)) -> (u64, u64) {
                *acc
            }
            fn merge(&self, a: (u64, u64), b: (u64, u64)) -> (u64, u64) {
                (a.0 + b.0, a.1 + b.1)
            }
        }

        #[test]
        fn conformance_operations_agree_with_the_heap_and_savepoints_restore_anywhere() {
            $crate::state::conformance::scenarios::operations_agree_with_the_heap(
                $kind,
                ConformanceCountAndSum,
                48,
            );
        }
        #[test]
        fn conformance_checkpoints_hold_the_state_at_their_barrier_and_restore_rescaled() {
            $crate::state::conformance::scenarios::checkpoints_hold_their_barrier_state(
                $kind,
                ConformanceCountAndSum,
                24,
            );
        }
        #[test]
        fn conformance_a_state_not_registered_yet_is_carried_through_snapshots() {
            $crate::state::conformance::scenarios::unregistered_state_is_carried($kind);
        }
        #[test]
        fn conformance_expired_entries_are_never_read_and_left_out_of_snapshots() {
            $crate::state::conformance::scenarios::expired_entries_are_left_out($kind);
        }
        #[test]
        fn conformance_timers_fire_once_in_order_and_survive_a_restore() {
            $crate::state::conformance::scenarios::timers_survive_a_restore($kind);
        }
    };
}

/// The number of key groups of the suite's stores.
pub const MAX_PARALLELISM: u32 = 16;
/// Every key group.
pub const FULL: KeyGroupRange = KeyGroupRange { start: 0, end: 15 };

/// Which store a harness uses.
#[derive(Clone)]
pub enum StoreKind {
    /// The heap backend (the reference).
    Heap,
    /// A byte-level backend, created by its factory with this configuration.
    Backend(Arc<dyn StateBackendFactory>, StateBackendConfig),
}

impl std::fmt::Debug for StoreKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreKind::Heap => write!(f, "heap"),
            StoreKind::Backend(factory, config) => write!(
                f,
                "{}{}",
                factory.name(),
                if config.incremental {
                    " (incremental)"
                } else {
                    ""
                }
            ),
        }
    }
}

/// The barrier of savepoint `id`, whose snapshots are canonical with every backend.
pub fn savepoint(id: u64) -> CheckpointBarrier {
    CheckpointBarrier {
        checkpoint_id: id,
        timestamp_millis: 0,
        snapshot_type: SnapshotType::Savepoint,
        is_final: false,
        unaligned: false,
        stop: None,
    }
}

/// The barrier of checkpoint `id`, which a backend writes in its own format.
pub fn checkpoint(id: u64) -> CheckpointBarrier {
    CheckpointBarrier {
        snapshot_type: SnapshotType::Checkpoint,
        ..savepoint(id)
    }
}

/// A scratch directory, removed when dropped.
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// A new empty directory under the system's temporary directory.
    pub fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "weir-conformance-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        Self(dir)
    }

    /// A path for something new inside it.
    pub fn fresh(&self, stem: &str) -> PathBuf {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        self.0
            .join(format!("{stem}-{}", NEXT.fetch_add(1, Ordering::Relaxed)))
    }
}

impl Default for ScratchDir {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Files written by snapshots, as checkpoint storage would keep them: each checkpoint's own,
/// and the shared ones that later checkpoints refer to again.
#[derive(Debug, Default)]
pub struct StoredFiles {
    private: BTreeMap<(u64, String), Vec<u8>>,
    shared: BTreeMap<String, Vec<u8>>,
}

impl StoredFiles {
    /// The number of shared files kept.
    pub fn shared_count(&self) -> usize {
        self.shared.len()
    }
}

/// Where one snapshot of the suite writes.
pub struct StoredOutput<'a> {
    /// The files kept.
    pub files: &'a mut StoredFiles,
    /// The checkpoint written.
    pub checkpoint_id: u64,
    /// What starts this subtask's file names.
    pub stem: String,
}

fn read_local(name: &str, source: &Path) -> Result<Vec<u8>, StateError> {
    std::fs::read(source).map_err(|e| StateError::Storage {
        file: name.to_string(),
        reason: e.to_string(),
    })
}

impl SnapshotOutput for StoredOutput<'_> {
    fn checkpoint_id(&self) -> u64 {
        self.checkpoint_id
    }
    fn write_file(&mut self, name: &str, bytes: &[u8]) -> Result<(), StateError> {
        self.files
            .private
            .insert((self.checkpoint_id, name.to_string()), bytes.to_vec());
        Ok(())
    }
    fn copy_file(&mut self, name: &str, source: &Path) -> Result<(), StateError> {
        let bytes = read_local(name, source)?;
        self.write_file(name, &bytes)
    }
    fn copy_shared_file(&mut self, name: &str, source: &Path) -> Result<(), StateError> {
        let bytes = read_local(name, source)?;
        if self.files.shared.insert(name.to_string(), bytes).is_some() {
            return Err(StateError::Storage {
                file: name.to_string(),
                reason: "a shared file of this name exists already".into(),
            });
        }
        Ok(())
    }
    fn file_name(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.stem)
    }
}

/// What restoring the handles of checkpoint `checkpoint_id` gives a store owning `range`:
/// canonical blocks, and a backend's own files copied into fresh directories under
/// `scratch` — each file checked against its length and checksum, as a deployment does.
pub fn restore_inputs(
    files: &StoredFiles,
    checkpoint_id: u64,
    handles: &[KeyedStateHandle],
    range: KeyGroupRange,
    scratch: &ScratchDir,
) -> (Vec<KeyGroupBlock>, Vec<RestoredStateFiles>) {
    let (mut blocks, mut restored) = (Vec::new(), Vec::new());
    for handle in handles {
        match handle {
            KeyedStateHandle::KeyGroups(h) => {
                let bytes = &files.private[&(checkpoint_id, h.file.clone())];
                for entry in h.key_groups.iter().filter(|e| range.contains(e.key_group)) {
                    let block =
                        &bytes[entry.offset as usize..(entry.offset + entry.length) as usize];
                    blocks.push(decode_key_group_block(entry, block, &h.file).unwrap());
                }
            }
            KeyedStateHandle::Incremental(h) if h.key_groups.overlaps(&range) => {
                let dir = scratch.fresh("restore");
                std::fs::create_dir_all(&dir).unwrap();
                let shared = h.shared.iter().map(|f| (&files.shared[&f.stored_name], f));
                let private = h
                    .private
                    .iter()
                    .map(|f| (&files.private[&(checkpoint_id, f.stored_name.clone())], f));
                for (bytes, file) in shared.chain(private) {
                    assert_eq!(bytes.len() as u64, file.size, "{} length", file.stored_name);
                    assert_eq!(
                        crc32fast::hash(bytes),
                        file.crc32,
                        "{} checksum",
                        file.stored_name
                    );
                    std::fs::write(dir.join(&file.local_name), bytes).unwrap();
                }
                restored.push(RestoredStateFiles::new(h.clone(), true, dir));
            }
            KeyedStateHandle::Incremental(_) => {}
        }
    }
    (blocks, restored)
}

/// A store with timers and a hand-set TTL clock, scoping handles to one key at a time.
pub struct Harness {
    /// The store.
    pub store: KeyedStateStore<String>,
    /// Its timers.
    pub timers: InternalTimerService<String>,
    runtime: RuntimeContext,
    clock: Arc<AtomicI64>,
    /// What the store was created as.
    pub kind: StoreKind,
    /// Where its working files are.
    pub scratch: Arc<ScratchDir>,
}

impl Harness {
    /// A store of `kind` owning `range`, with restored canonical blocks.
    pub fn new(kind: &StoreKind, range: KeyGroupRange, restored: Vec<KeyGroupBlock>) -> Self {
        Self::restored(kind, range, restored, &[], Arc::new(ScratchDir::new()))
    }

    /// A store of `kind` owning `range`, restored from canonical blocks and a backend's own
    /// files, with working files under `scratch`.
    pub fn restored(
        kind: &StoreKind,
        range: KeyGroupRange,
        blocks: Vec<KeyGroupBlock>,
        files: &[RestoredStateFiles],
        scratch: Arc<ScratchDir>,
    ) -> Self {
        let clock = Arc::new(AtomicI64::new(0));
        let mut store = match kind {
            StoreKind::Heap => {
                assert!(files.is_empty(), "the heap restores no backend's own files");
                let mut heap = HeapKeyedStateBackend::new(MAX_PARALLELISM, range);
                heap.restore(blocks).unwrap();
                KeyedStateStore::Heap(heap)
            }
            StoreKind::Backend(factory, config) => {
                let backend = factory
                    .create(BackendContext {
                        operator_uid: "conformance",
                        subtask: 0,
                        key_groups: range,
                        max_parallelism: MAX_PARALLELISM,
                        config,
                        working_dir: &scratch.fresh("store"),
                        restored: blocks,
                        restored_files: files,
                    })
                    .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
                KeyedStateStore::Serialized(SerializedKeyedState::new(backend, MAX_PARALLELISM))
            }
        };
        store.set_ttl_clock(TtlClock::Manual(clock.clone()));
        let timers = InternalTimerService::open(&mut store).unwrap();
        Self {
            store,
            timers,
            runtime: RuntimeContext::of(&OperatorSetup::for_test(0, "store")),
            clock,
            kind: kind.clone(),
            scratch,
        }
    }

    /// Sets the TTL clock.
    pub fn at(&self, millis: i64) {
        self.clock.store(millis, Ordering::Relaxed);
    }

    /// Runs `f` with the handles scoped to `key`.
    pub fn with<R>(&mut self, key: &str, f: impl FnOnce(&mut KeyedContext<'_, String>) -> R) -> R {
        let key = key.to_string();
        let slot = self.store.resolve_key(&key).unwrap();
        let mut ctx = KeyedContext {
            key: &key,
            slot,
            backend: &mut self.store,
            timers: &mut self.timers,
            runtime: &self.runtime,
            timestamp: None,
            time_domain: None,
            side: None,
        };
        f(&mut ctx)
    }

    /// Whether the store owns `key`'s key group.
    pub fn owns(&mut self, key: &str) -> bool {
        self.store.resolve_key(&key.to_string()).is_ok()
    }

    /// Takes a savepoint and decodes its key-group blocks.
    pub fn savepoint(&mut self) -> Vec<KeyGroupBlock> {
        let snapshot = self.store.snapshot(savepoint(1)).unwrap();
        let mut files = StoredFiles::default();
        let handle = snapshot
            .write(&mut StoredOutput {
                files: &mut files,
                checkpoint_id: 1,
                stem: "op-0".into(),
            })
            .unwrap();
        match handle {
            None => Vec::new(),
            Some(handle @ KeyedStateHandle::KeyGroups(_)) => {
                restore_inputs(&files, 1, &[handle], FULL, &ScratchDir::new()).0
            }
            Some(KeyedStateHandle::Incremental(_)) => {
                panic!("{:?}: a savepoint must be canonical", self.kind)
            }
        }
    }
}

/// The aggregate function of the suite's aggregating state: it counts and sums. The
/// [`keyed_state_backend_conformance!`](crate::keyed_state_backend_conformance) macro
/// defines one in the crate that runs the suite, so that `weir` itself holds no
/// implementation of [`AggregateFunction`] (its compiler messages list the ones there are).
pub trait CountAndSum: AggregateFunction<u64, (u64, u64), (u64, u64)> + Clone {}

impl<A: AggregateFunction<u64, (u64, u64), (u64, u64)> + Clone> CountAndSum for A {}

fn add(a: u64, b: u64) -> u64 {
    a + b
}

/// One handle of every state kind.
pub struct Handles<A> {
    value: ValueState<u64>,
    list: ListState<String>,
    map: MapState<String, u64>,
    reducing: ReducingState<u64, fn(u64, u64) -> u64>,
    aggregating: AggregatingState<u64, (u64, u64), (u64, u64), A>,
}

impl<A: CountAndSum> Handles<A> {
    /// Handles of states `value`, `list`, `map`, `reducing` and `aggregating`.
    pub fn new(aggregate: A) -> Self {
        Self {
            value: ValueState::new("value"),
            list: ListState::new("list"),
            map: MapState::new("map"),
            reducing: ReducingState::new("reducing", add as fn(u64, u64) -> u64),
            aggregating: AggregatingState::new("aggregating", aggregate),
        }
    }

    /// Everything the handles hold for `key`, as one comparable value.
    pub fn read(&self, h: &mut Harness, key: &str) -> String {
        h.with(key, |ctx| {
            let mut map = self.map.entries(ctx).unwrap();
            map.sort();
            format!(
                "{:?} {:?} {:?} {:?} {:?}",
                self.value.value(ctx).unwrap(),
                self.list.get(ctx).unwrap(),
                map,
                self.reducing.get(ctx).unwrap(),
                self.aggregating.get(ctx).unwrap(),
            )
        })
    }

    /// Every key that has state, per handle, sorted.
    pub fn keys(&self, h: &mut Harness) -> Vec<Vec<String>> {
        let store = &mut h.store;
        let mut all = vec![
            self.value.keys(store).unwrap(),
            self.list.keys(store).unwrap(),
            self.map.keys(store).unwrap(),
            self.reducing.keys(store).unwrap(),
            self.aggregating.keys(store).unwrap(),
        ]
        .into_iter()
        .map(|keys| keys.into_iter().map(|(k, _)| k).collect::<Vec<_>>())
        .collect::<Vec<_>>();
        for keys in &mut all {
            keys.sort();
        }
        all
    }
}

/// An operation on one key's state.
#[derive(Debug, Clone)]
pub enum Op {
    /// `value.update`.
    Update(u64),
    /// `value.clear`.
    ClearValue,
    /// `value.update_with` adding to the value.
    Modify(u64),
    /// `list.add`.
    Append(String),
    /// `list.update`.
    ReplaceList(Vec<String>),
    /// `list.clear`.
    ClearList,
    /// `map.put`.
    Put(String, u64),
    /// `map.remove` then `map.contains`.
    Remove(String),
    /// `map.clear`.
    ClearMap,
    /// `reducing.add`.
    Reduce(u64),
    /// `aggregating.add`.
    Aggregate(u64),
    /// `aggregating.clear`.
    ClearAggregate,
}

/// Applies `op` to `key`'s state; what it returned, as text.
pub fn apply<A: CountAndSum>(handles: &Handles<A>, h: &mut Harness, key: &str, op: &Op) -> String {
    h.with(key, |ctx| match op.clone() {
        Op::Update(v) => format!("{:?}", handles.value.update(ctx, v)),
        Op::ClearValue => format!("{:?}", handles.value.clear(ctx)),
        Op::Modify(v) => format!(
            "{:?}",
            handles.value.update_with(ctx, |current| current.map(|c| {
                *c += v;
                *c
            }))
        ),
        Op::Append(s) => format!("{:?}", handles.list.add(ctx, s)),
        Op::ReplaceList(l) => format!("{:?}", handles.list.update(ctx, l)),
        Op::ClearList => format!("{:?}", handles.list.clear(ctx)),
        Op::Put(k, v) => format!("{:?}", handles.map.put(ctx, k, v)),
        Op::Remove(k) => format!(
            "{:?} {:?}",
            handles.map.remove(ctx, &k),
            handles.map.contains(ctx, &k)
        ),
        Op::ClearMap => format!("{:?}", handles.map.clear(ctx)),
        Op::Reduce(v) => format!("{:?}", handles.reducing.add(ctx, v)),
        Op::Aggregate(v) => format!("{:?}", handles.aggregating.add(ctx, v)),
        Op::ClearAggregate => format!("{:?}", handles.aggregating.clear(ctx)),
    })
}

/// Random operations.
pub fn op() -> impl Strategy<Value = Op> {
    let word = "[a-c]{0,2}";
    prop_oneof![
        any::<u64>().prop_map(|v| Op::Update(v % 1000)),
        Just(Op::ClearValue),
        (0u64..10).prop_map(Op::Modify),
        word.prop_map(Op::Append),
        proptest::collection::vec(word, 0..3).prop_map(Op::ReplaceList),
        Just(Op::ClearList),
        (word, 0u64..100).prop_map(|(k, v)| Op::Put(k, v)),
        word.prop_map(Op::Remove),
        Just(Op::ClearMap),
        (0u64..100).prop_map(Op::Reduce),
        (0u64..100).prop_map(Op::Aggregate),
        Just(Op::ClearAggregate),
    ]
}

/// The keys the suite uses.
pub fn keys() -> Vec<String> {
    (0..12).map(|i| format!("k{i}")).collect()
}
