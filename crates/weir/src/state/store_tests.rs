//! The state handles' behaviour on every kind of store: the heap backend, and typed state
//! over a byte-level backend. The same operations must read the same values, snapshots of
//! one kind must restore into the other (that is the canonical format), also rescaled, and
//! timers and time-to-live must behave alike.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

use crate::api::functions::{AggregateFunction, KeyedContext, RuntimeContext};
use crate::error::StateError;
use crate::runtime::task::OperatorSetup;
use crate::state::backend::SnapshotOutput;
use crate::state::key_group::KeyGroupRange;
use crate::state::keyed_state_snapshot::{decode_key_group_block, KeyGroupBlock};
use crate::state::memory_backend::MemoryBackend;
use crate::state::serialized_keyed_state::SerializedKeyedState;
use crate::state::timers::{InternalTimerService, TimeDomain};
use crate::state::ttl::{StateTtlConfig, TtlClock};
use crate::state::{
    AggregatingState, HeapKeyedStateBackend, KeyedState, KeyedStateStore, ListState, MapState,
    ReducingState, ValueState,
};

const MAX_PARALLELISM: u32 = 16;
const FULL: KeyGroupRange = KeyGroupRange { start: 0, end: 15 };

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Heap,
    Serialized,
}

const KINDS: [Kind; 2] = [Kind::Heap, Kind::Serialized];

fn store(
    kind: Kind,
    range: KeyGroupRange,
    restored: Vec<KeyGroupBlock>,
) -> KeyedStateStore<String> {
    match kind {
        Kind::Heap => {
            let mut heap = HeapKeyedStateBackend::new(MAX_PARALLELISM, range);
            heap.restore(restored).unwrap();
            KeyedStateStore::Heap(heap)
        }
        Kind::Serialized => KeyedStateStore::Serialized(SerializedKeyedState::new(
            Box::new(MemoryBackend::new(range, restored)),
            MAX_PARALLELISM,
        )),
    }
}

/// Keeps the files a snapshot writes.
#[derive(Default)]
struct Files(BTreeMap<String, Vec<u8>>);

impl SnapshotOutput for Files {
    fn write_file(&mut self, name: &str, bytes: &[u8]) -> Result<(), StateError> {
        self.0.insert(name.to_string(), bytes.to_vec());
        Ok(())
    }
    fn file_name(&self, suffix: &str) -> String {
        format!("op-0{suffix}")
    }
}

/// A store with timers and a hand-set TTL clock, scoping handles to one key at a time.
struct Harness {
    store: KeyedStateStore<String>,
    timers: InternalTimerService<String>,
    runtime: RuntimeContext,
    clock: Arc<AtomicI64>,
}

impl Harness {
    fn new(kind: Kind, range: KeyGroupRange, restored: Vec<KeyGroupBlock>) -> Self {
        let clock = Arc::new(AtomicI64::new(0));
        let mut store = store(kind, range, restored);
        store.set_ttl_clock(TtlClock::Manual(clock.clone()));
        let timers = InternalTimerService::open(&mut store).unwrap();
        Self {
            store,
            timers,
            runtime: RuntimeContext::of(&OperatorSetup::for_test(0, "store")),
            clock,
        }
    }

    fn at(&self, millis: i64) {
        self.clock.store(millis, Ordering::Relaxed);
    }

    fn with<R>(&mut self, key: &str, f: impl FnOnce(&mut KeyedContext<'_, String>) -> R) -> R {
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

    /// Snapshots the store and decodes its key-group blocks.
    fn snapshot(&mut self) -> Vec<KeyGroupBlock> {
        let snapshot = self.store.snapshot(1).unwrap();
        let mut files = Files::default();
        let Some(handle) = snapshot.write(&mut files).unwrap() else {
            return Vec::new();
        };
        let bytes = &files.0[&handle.file];
        handle
            .key_groups
            .iter()
            .map(|e| {
                let block = &bytes[e.offset as usize..(e.offset + e.length) as usize];
                decode_key_group_block(e, block, &handle.file).unwrap()
            })
            .collect()
    }
}

#[derive(Clone)]
struct Sum;

impl AggregateFunction<u64, (u64, u64), (u64, u64)> for Sum {
    fn create_accumulator(&self) -> (u64, u64) {
        (0, 0)
    }
    fn add(&self, value: u64, acc: &mut (u64, u64)) {
        acc.0 += value;
        acc.1 += 1;
    }
    fn get_result(&self, acc: &(u64, u64)) -> (u64, u64) {
        *acc
    }
    fn merge(&self, a: (u64, u64), b: (u64, u64)) -> (u64, u64) {
        (a.0 + b.0, a.1 + b.1)
    }
}

fn add(a: u64, b: u64) -> u64 {
    a + b
}

/// One of each kind of state handle.
struct Handles {
    value: ValueState<u64>,
    list: ListState<String>,
    map: MapState<String, u64>,
    reducing: ReducingState<u64, fn(u64, u64) -> u64>,
    aggregating: AggregatingState<u64, (u64, u64), (u64, u64), Sum>,
}

impl Handles {
    fn new() -> Self {
        Self {
            value: ValueState::new("value"),
            list: ListState::new("list"),
            map: MapState::new("map"),
            reducing: ReducingState::new("reducing", add as fn(u64, u64) -> u64),
            aggregating: AggregatingState::new("aggregating", Sum),
        }
    }

    /// Everything the handles hold for `key`, as one comparable value.
    fn read(&self, h: &mut Harness, key: &str) -> String {
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

    /// Every key that has state, per handle.
    fn keys(&self, h: &mut Harness) -> Vec<Vec<String>> {
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
enum Op {
    Update(u64),
    ClearValue,
    Modify(u64),
    Append(String),
    ReplaceList(Vec<String>),
    ClearList,
    Put(String, u64),
    Remove(String),
    ClearMap,
    Reduce(u64),
    Aggregate(u64),
    ClearAggregate,
}

fn apply(handles: &Handles, h: &mut Harness, key: &str, op: &Op) -> String {
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

fn op() -> impl Strategy<Value = Op> {
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

fn keys() -> Vec<String> {
    (0..12).map(|i| format!("k{i}")).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random operations read the same values on both stores, list the same keys, and a
    /// snapshot of either restores into either, cut into two halves.
    #[test]
    fn both_stores_agree_and_restore_into_each_other(
        ops in proptest::collection::vec((0usize..12, op()), 1..120),
    ) {
        let handles = Handles::new();
        let mut stores: Vec<Harness> = KINDS.iter().map(|k| Harness::new(*k, FULL, Vec::new())).collect();
        let keys = keys();
        for (key, op) in &ops {
            let results: Vec<String> = stores.iter_mut().map(|h| apply(&handles, h, &keys[*key], op)).collect();
            prop_assert_eq!(&results[0], &results[1], "{:?} on {}", op, keys[*key]);
        }
        let expected: Vec<String> = keys.iter().map(|k| handles.read(&mut stores[0], k)).collect();
        for h in &mut stores {
            let read: Vec<String> = keys.iter().map(|k| handles.read(h, k)).collect();
            prop_assert_eq!(&read, &expected);
        }
        let expected_keys = handles.keys(&mut stores[0]);
        prop_assert_eq!(handles.keys(&mut stores[1]), expected_keys.clone());
        for (from, source) in stores.iter_mut().enumerate() {
            let blocks = source.snapshot();
            for kind in KINDS {
                let halves = [KeyGroupRange { start: 0, end: 6 }, KeyGroupRange { start: 7, end: 15 }];
                let mut restored_keys = vec![Vec::new(); 5];
                for range in halves {
                    let mut restored = Harness::new(kind, range, blocks.clone());
                    let restored_handles = Handles::new();
                    for (i, key) in keys.iter().enumerate() {
                        if restored.store.resolve_key(key).is_ok() {
                            prop_assert_eq!(&restored_handles.read(&mut restored, key), &expected[i], "{:?} from {}", kind, from);
                        }
                    }
                    for (all, part) in restored_keys.iter_mut().zip(restored_handles.keys(&mut restored)) {
                        all.extend(part);
                    }
                }
                for keys in &mut restored_keys {
                    keys.sort();
                }
                prop_assert_eq!(&restored_keys, &expected_keys);
            }
        }
    }
}

#[test]
fn a_state_not_registered_yet_is_carried_through_snapshots() {
    for from in KINDS {
        let handles = Handles::new();
        let mut h = Harness::new(from, FULL, Vec::new());
        for key in keys() {
            h.with(&key, |ctx| handles.map.put(ctx, key.clone(), 7))
                .unwrap();
        }
        let blocks = h.snapshot();
        for through in KINDS {
            // Restored, snapshotted again before anything registers the state, restored again.
            let mut middle = Harness::new(through, FULL, blocks.clone());
            let again = middle.snapshot();
            let mut last = Harness::new(from, FULL, again);
            let fresh = Handles::new();
            for key in keys() {
                let value = last.with(&key, |ctx| fresh.map.get(ctx, &key)).unwrap();
                assert_eq!(value, Some(7), "{from:?} through {through:?}");
            }
        }
    }
}

#[test]
fn expired_entries_are_never_read_and_left_out_of_snapshots_on_both_stores() {
    let ttl = StateTtlConfig::new(Duration::from_millis(100));
    for kind in KINDS {
        let value = ValueState::<u64>::new("v").with_ttl(ttl.clone());
        let list = ListState::<u64>::new("l").with_ttl(ttl.clone());
        let map = MapState::<String, u64>::new("m").with_ttl(ttl.clone());
        let mut h = Harness::new(kind, FULL, Vec::new());
        h.with("old", |ctx| {
            value.update(ctx, 1)?;
            list.add(ctx, 1)?;
            map.put(ctx, "x".into(), 1)
        })
        .unwrap();
        h.at(60);
        h.with("new", |ctx| {
            value.update(ctx, 2)?;
            list.add(ctx, 2)?;
            map.put(ctx, "y".into(), 2)
        })
        .unwrap();
        h.at(120);
        let blocks = h.snapshot();
        let (old, new) = (
            h.with("old", |ctx| -> Result<_, StateError> {
                Ok((
                    value.value(ctx)?,
                    list.get(ctx)?,
                    map.get(ctx, &"x".to_string())?,
                ))
            })
            .unwrap(),
            h.with("new", |ctx| -> Result<_, StateError> {
                Ok((
                    value.value(ctx)?,
                    list.get(ctx)?,
                    map.get(ctx, &"y".to_string())?,
                ))
            })
            .unwrap(),
        );
        assert_eq!(old, (None, vec![], None), "{kind:?}");
        assert_eq!(new, (Some(2), vec![2], Some(2)), "{kind:?}");
        // The snapshot holds only the live key of each state, with its time.
        for state in ["v", "l", "m"] {
            let entries: u64 = blocks
                .iter()
                .flat_map(|b| b.states.iter().filter(|(name, _)| name == state))
                .map(|(_, bytes)| crate::state::backend::read_varint(bytes).unwrap().0)
                .sum();
            assert_eq!(
                entries, 1,
                "{kind:?}: state {state} snapshotted an expired entry"
            );
        }
        // Restored at 170, the live one expires too.
        for into in KINDS {
            let mut restored = Harness::new(into, FULL, blocks.clone());
            restored.at(150);
            let live = restored
                .with("new", |ctx| {
                    ValueState::<u64>::new("v").with_ttl(ttl.clone()).value(ctx)
                })
                .unwrap();
            assert_eq!(live, Some(2), "{kind:?} into {into:?}");
            let keys = ValueState::<u64>::new("v")
                .with_ttl(ttl.clone())
                .keys(&mut restored.store)
                .unwrap();
            assert_eq!(
                keys.len(),
                1,
                "{kind:?} into {into:?}: the expired key was snapshotted"
            );
            restored.at(170);
            let gone = restored
                .with("new", |ctx| {
                    ValueState::<u64>::new("v").with_ttl(ttl.clone()).value(ctx)
                })
                .unwrap();
            assert_eq!(gone, None, "{kind:?} into {into:?}");
        }
    }
}

#[test]
fn timers_fire_once_in_order_and_survive_a_restore_into_either_store() {
    for kind in KINDS {
        let mut h = Harness::new(kind, FULL, Vec::new());
        for (i, key) in keys().iter().enumerate() {
            h.with(key, |ctx| {
                let mut timers = ctx.timer_service();
                timers.register_event_time_timer(100 - i as i64)?;
                timers.register_event_time_timer(100 - i as i64)?;
                timers.register_processing_time_timer(5)
            })
            .unwrap();
        }
        let blocks = h.snapshot();
        for into in KINDS {
            let mut fired = Vec::new();
            for range in [
                KeyGroupRange { start: 0, end: 9 },
                KeyGroupRange { start: 10, end: 15 },
            ] {
                let mut restored = Harness::new(into, range, blocks.clone());
                assert!(restored.timers.len(TimeDomain::ProcessingTime) > 0);
                while let Some((at, key)) = restored
                    .timers
                    .pop_due(&mut restored.store, TimeDomain::EventTime, 95)
                    .unwrap()
                {
                    fired.push((at, key));
                }
            }
            fired.sort();
            let expected: Vec<(i64, String)> = (5..12)
                .rev()
                .map(|i| (100 - i as i64, format!("k{i}")))
                .collect::<Vec<_>>();
            let mut expected = expected;
            expected.sort();
            assert_eq!(fired, expected, "{kind:?} into {into:?}");
        }
    }
}

/// Registers the in-memory byte backend as `state.backend.type: memory-test`.
struct MemoryFactory;

impl crate::state::backend_factory::StateBackendFactory for MemoryFactory {
    fn name(&self) -> &'static str {
        "memory-test"
    }
    fn validate(
        &self,
        _config: &crate::state::backend_factory::StateBackendConfig,
    ) -> Result<(), StateError> {
        Ok(())
    }
    fn create(
        &self,
        context: crate::state::backend_factory::BackendContext<'_>,
    ) -> Result<Box<dyn crate::state::backend::KeyedStateBackend>, StateError> {
        Ok(Box::new(MemoryBackend::new(
            context.key_groups,
            context.restored,
        )))
    }
}

/// Counts each key's records and emits the count one event-time unit after its first.
#[derive(Clone)]
struct CountUntilTimer {
    count: ValueState<u64>,
    seen: ListState<i64>,
}

impl crate::api::functions::KeyedProcessFunction<u64, i64, (u64, u64, usize)> for CountUntilTimer {
    fn process_element(
        &mut self,
        value: i64,
        ctx: &mut KeyedContext<'_, u64>,
        _out: &mut crate::runtime::output::Collector<'_, (u64, u64, usize)>,
    ) -> Result<(), crate::error::BoxError> {
        let count = self.count.value(ctx)?.unwrap_or(0);
        if count == 0 {
            ctx.timer_service().register_event_time_timer(value + 1)?;
        }
        self.seen.add(ctx, value)?;
        Ok(self.count.update(ctx, count + 1)?)
    }
    fn on_timer(
        &mut self,
        _timestamp: i64,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut crate::runtime::output::Collector<'_, (u64, u64, usize)>,
    ) -> Result<(), crate::error::BoxError> {
        let count = self.count.value(ctx)?.unwrap_or(0);
        let seen = self.seen.get(ctx)?.len();
        out.collect((*ctx.current_key(), count, seen));
        self.seen.clear(ctx)?;
        Ok(self.count.clear(ctx)?)
    }
}

#[test]
fn a_keyed_job_computes_the_same_on_the_heap_and_on_a_registered_byte_backend() {
    use crate::prelude::*;
    use crate::state::backend_factory::{register_state_backend, StateBackendConfig};
    use crate::windowing::TumblingEventTimeWindows;

    register_state_backend(Arc::new(MemoryFactory));
    let run = |backend: &str| -> JobOutputs {
        let config = ExecutionConfig::default()
            .with_parallelism(2)
            .with_max_parallelism(16)
            .with_state_backend(StateBackendConfig {
                backend_type: backend.to_string(),
                ..StateBackendConfig::default()
            });
        let env = StreamExecutionEnvironment::new(config).unwrap();
        let events: Vec<i64> = (0..3_000).map(|i| (i * 7) % 1_000).collect();
        let strategy = WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(0))
            .with_timestamp_assigner(|t: &i64, _| *t);
        let stream = env.from_source(CollectionSource::new(events), strategy, "events");
        let sums = stream
            .key_by(|t: &i64| (*t % 13) as u64)
            .sum(|t: &i64| *t)
            .collect();
        let windows = stream
            .key_by(|t: &i64| (*t % 5) as u64)
            .window(TumblingEventTimeWindows::of(Duration::from_millis(100)))
            .aggregate(CountAll)
            .collect();
        let timers = stream
            .key_by(|t: &i64| (*t % 17) as u64)
            .process(CountUntilTimer {
                count: ValueState::new("count"),
                seen: ListState::new("seen"),
            })
            .collect();
        env.execute(backend).unwrap();
        let (mut sums, mut windows, mut timers) = (sums.take(), windows.take(), timers.take());
        sums.sort();
        windows.sort();
        timers.sort();
        (sums, windows, timers)
    };
    let heap = run("heap");
    assert!(!heap.0.is_empty() && !heap.1.is_empty() && !heap.2.is_empty());
    assert_eq!(run("memory-test"), heap);
    let err = std::panic::catch_unwind(|| run("no-such-backend"));
    assert!(err.is_err(), "an unknown backend fails the job");
}

/// The sorted outputs of the job: running sums, window counts, timer reports.
type JobOutputs = (Vec<(u64, i64)>, Vec<u64>, Vec<(u64, u64, usize)>);

#[derive(Clone)]
struct CountAll;

impl AggregateFunction<i64, u64, u64> for CountAll {
    fn create_accumulator(&self) -> u64 {
        0
    }
    fn add(&self, _: i64, acc: &mut u64) {
        *acc += 1;
    }
    fn get_result(&self, acc: &u64) -> u64 {
        *acc
    }
    fn merge(&self, a: u64, b: u64) -> u64 {
        a + b
    }
}
