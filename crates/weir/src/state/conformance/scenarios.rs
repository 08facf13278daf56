//! The scenarios of the conformance suite, each a function of the backend under test; the
//! heap backend is the reference every result is compared with.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use super::{
    apply, checkpoint, keys, op, restore_inputs, CountAndSum, Handles, Harness, Op, ScratchDir,
    StoreKind, StoredFiles, StoredOutput, FULL,
};
use crate::checkpoint::metadata::KeyedStateHandle;
use crate::error::StateError;
use crate::state::key_group::KeyGroupRange;
use crate::state::timers::TimeDomain;
use crate::state::ttl::StateTtlConfig;
use crate::state::{KeyedState, ListState, MapState, ValueState};

/// Runs `test` on `cases` random values of `strategy`; panics with the smallest failing one.
fn run<S: Strategy>(cases: u32, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    if let Err(e) = runner.run(&strategy, test) {
        panic!("{e}");
    }
}

fn ops(max: usize) -> impl Strategy<Value = Vec<(usize, Op)>> {
    proptest::collection::vec((0usize..12, op()), 0..max)
}

/// Random operations read the same values on the heap and on `kind`, list the same keys,
/// and a savepoint of either restores into either, cut into two halves.
pub fn operations_agree_with_the_heap<A: CountAndSum>(kind: StoreKind, aggregate: A, cases: u32) {
    let kinds = [StoreKind::Heap, kind];
    run(cases, ops(120), |ops| {
        let handles = Handles::new(aggregate.clone());
        let mut stores: Vec<Harness> = kinds
            .iter()
            .map(|k| Harness::new(k, FULL, Vec::new()))
            .collect();
        let keys = keys();
        for (key, op) in &ops {
            let results: Vec<String> = stores
                .iter_mut()
                .map(|h| apply(&handles, h, &keys[*key], op))
                .collect();
            prop_assert_eq!(&results[0], &results[1], "{:?} on {}", op, keys[*key]);
        }
        let expected: Vec<String> = keys
            .iter()
            .map(|k| handles.read(&mut stores[0], k))
            .collect();
        for h in &mut stores {
            let read: Vec<String> = keys.iter().map(|k| handles.read(h, k)).collect();
            prop_assert_eq!(&read, &expected, "{:?}", h.kind);
        }
        let expected_keys = handles.keys(&mut stores[0]);
        prop_assert_eq!(handles.keys(&mut stores[1]), expected_keys.clone());
        for source in stores.iter_mut() {
            let blocks = source.savepoint();
            for into in &kinds {
                let halves = [
                    KeyGroupRange { start: 0, end: 6 },
                    KeyGroupRange { start: 7, end: 15 },
                ];
                let mut restored_keys = vec![Vec::new(); 5];
                for range in halves {
                    let mut restored = Harness::new(into, range, blocks.clone());
                    let restored_handles = Handles::new(aggregate.clone());
                    for (i, key) in keys.iter().enumerate() {
                        if restored.owns(key) {
                            prop_assert_eq!(
                                &restored_handles.read(&mut restored, key),
                                &expected[i],
                                "{:?} into {:?}",
                                source.kind,
                                into
                            );
                        }
                    }
                    for (all, part) in restored_keys
                        .iter_mut()
                        .zip(restored_handles.keys(&mut restored))
                    {
                        all.extend(part);
                    }
                }
                for keys in &mut restored_keys {
                    keys.sort();
                }
                prop_assert_eq!(&restored_keys, &expected_keys);
            }
        }
        Ok(())
    });
}

/// Applies `ops` to the heap and to whichever subtask owns each key; both must answer alike.
fn step<A: CountAndSum>(
    handles: &Handles<A>,
    heap: &mut Harness,
    subtasks: &mut [Harness],
    ops: &[(usize, Op)],
) -> Result<(), TestCaseError> {
    let keys = keys();
    for (key, op) in ops {
        let key = &keys[*key];
        let expected = apply(handles, heap, key, op);
        let mut owner = None;
        for subtask in subtasks.iter_mut() {
            if subtask.owns(key) {
                owner = Some(subtask);
                break;
            }
        }
        let Some(owner) = owner else {
            return Err(TestCaseError::fail(format!("no subtask owns {key}")));
        };
        prop_assert_eq!(
            apply(handles, owner, key, op),
            expected,
            "{:?} on {}",
            op,
            key
        );
    }
    Ok(())
}

/// Snapshots every subtask for checkpoint `id` and writes the snapshots only after `between`
/// ran (so the asynchronous part runs while the task writes on); returns the handles.
fn checkpoint_all(
    subtasks: &mut [Harness],
    files: &mut StoredFiles,
    id: u64,
    mut between: impl FnMut(&mut [Harness]) -> Result<(), TestCaseError>,
) -> Result<Vec<KeyedStateHandle>, TestCaseError> {
    let snapshots: Vec<_> = subtasks
        .iter_mut()
        .map(|s| s.store.snapshot(checkpoint(id)).unwrap())
        .collect();
    between(subtasks)?;
    let mut written = Vec::new();
    for (i, snapshot) in snapshots.into_iter().enumerate() {
        let mut output = StoredOutput {
            files,
            checkpoint_id: id,
            stem: format!("op-{i}"),
        };
        written.extend(snapshot.write(&mut output).unwrap());
    }
    for s in subtasks.iter_mut() {
        s.store.notify_checkpoint_complete(id).unwrap();
    }
    Ok(written)
}

/// The backend's own checkpoints (incremental, where it takes them so) hold exactly the
/// state at their barrier although the task kept writing while they were written, and
/// restore at the same parallelism, at half of it and at one and a half times it.
pub fn checkpoints_hold_their_barrier_state<A: CountAndSum>(
    kind: StoreKind,
    aggregate: A,
    cases: u32,
) {
    let halves = [
        KeyGroupRange { start: 0, end: 6 },
        KeyGroupRange { start: 7, end: 15 },
    ];
    let thirds = [
        KeyGroupRange { start: 0, end: 4 },
        KeyGroupRange { start: 5, end: 10 },
        KeyGroupRange { start: 11, end: 15 },
    ];
    run(
        cases,
        (ops(60), ops(60), ops(60)),
        |(first, second, third)| {
            let handles = Handles::new(aggregate.clone());
            let keys = keys();
            let scratch = Arc::new(ScratchDir::new());
            let mut heap = Harness::new(&StoreKind::Heap, FULL, Vec::new());
            let mut subtasks: Vec<Harness> = halves
                .iter()
                .map(|r| Harness::restored(&kind, *r, Vec::new(), &[], scratch.clone()))
                .collect();
            let mut files = StoredFiles::default();
            let read_all = |h: &mut Harness| {
                let reads = keys.iter().map(|k| handles.read(h, k)).collect::<Vec<_>>();
                (reads, handles.keys(h))
            };

            step(&handles, &mut heap, &mut subtasks, &first)?;
            let at_first = read_all(&mut heap);
            let first_handles = checkpoint_all(&mut subtasks, &mut files, 1, |subtasks| {
                step(&handles, &mut heap, subtasks, &second)
            })?;
            step(&handles, &mut heap, &mut subtasks, &third)?;
            let at_second = read_all(&mut heap);
            let second_handles = checkpoint_all(&mut subtasks, &mut files, 2, |_| Ok(()))?;
            for subtask in &mut subtasks {
                for (i, key) in keys.iter().enumerate() {
                    if subtask.owns(key) {
                        prop_assert_eq!(
                            &handles.read(subtask, key),
                            &at_second.0[i],
                            "live, after both"
                        );
                    }
                }
            }
            // Files a completed checkpoint uploaded are referred to again, not uploaded twice.
            for (one, two) in first_handles.iter().zip(&second_handles) {
                if let (KeyedStateHandle::Incremental(one), KeyedStateHandle::Incremental(two)) =
                    (one, two)
                {
                    let reused = two.shared.iter().filter(|f| f.uploaded_in == 1).count();
                    prop_assert!(
                        one.shared.is_empty() || reused > 0,
                        "checkpoint 2 uploaded everything again"
                    );
                    prop_assert!(two.shared.iter().all(|f| f.uploaded_in <= 2));
                }
            }
            for (id, written, (expected, expected_keys)) in [
                (1, &first_handles, &at_first),
                (2, &second_handles, &at_second),
            ] {
                for ranges in [&[FULL][..], &halves[..], &thirds[..]] {
                    let mut restored_keys = vec![Vec::new(); 5];
                    for range in ranges {
                        let (blocks, restored_files) =
                            restore_inputs(&files, id, written, *range, &scratch);
                        let mut restored = Harness::restored(
                            &kind,
                            *range,
                            blocks,
                            &restored_files,
                            scratch.clone(),
                        );
                        let fresh = Handles::new(aggregate.clone());
                        for (i, key) in keys.iter().enumerate() {
                            if restored.owns(key) {
                                prop_assert_eq!(
                                    &fresh.read(&mut restored, key),
                                    &expected[i],
                                    "checkpoint {} restored into {}",
                                    id,
                                    range
                                );
                            }
                        }
                        for (all, part) in restored_keys.iter_mut().zip(fresh.keys(&mut restored)) {
                            all.extend(part);
                        }
                    }
                    for keys in &mut restored_keys {
                        keys.sort();
                    }
                    prop_assert_eq!(&restored_keys, expected_keys, "checkpoint {} keys", id);
                }
            }
            Ok(())
        },
    );
}

fn unregistered_handles() -> MapState<String, u64> {
    MapState::new("map")
}

/// Restored state of a state nobody registered yet is carried through snapshots.
pub fn unregistered_state_is_carried(kind: StoreKind) {
    let kinds = [StoreKind::Heap, kind];
    for from in &kinds {
        let handles = unregistered_handles();
        let mut h = Harness::new(from, FULL, Vec::new());
        for key in keys() {
            h.with(&key, |ctx| handles.put(ctx, key.clone(), 7))
                .unwrap();
        }
        let blocks = h.savepoint();
        for through in &kinds {
            // Restored, snapshotted again before anything registers the state, restored again.
            let mut middle = Harness::new(through, FULL, blocks.clone());
            let again = middle.savepoint();
            let mut last = Harness::new(from, FULL, again);
            let fresh = unregistered_handles();
            for key in keys() {
                let value = last.with(&key, |ctx| fresh.get(ctx, &key)).unwrap();
                assert_eq!(value, Some(7), "{from:?} through {through:?}");
            }
        }
    }
}

/// Entries whose time to live has passed are never read and are left out of snapshots.
pub fn expired_entries_are_left_out(kind: StoreKind) {
    let ttl = StateTtlConfig::new(Duration::from_millis(100));
    let kinds = [StoreKind::Heap, kind];
    for kind in &kinds {
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
        let blocks = h.savepoint();
        let read = |h: &mut Harness, key: &str, user_key: &str| {
            h.with(key, |ctx| -> Result<_, StateError> {
                Ok((
                    value.value(ctx)?,
                    list.get(ctx)?,
                    map.get(ctx, &user_key.to_string())?,
                ))
            })
            .unwrap()
        };
        assert_eq!(read(&mut h, "old", "x"), (None, vec![], None), "{kind:?}");
        assert_eq!(
            read(&mut h, "new", "y"),
            (Some(2), vec![2], Some(2)),
            "{kind:?}"
        );
        // The snapshot holds only the live key of each state.
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
        // Restored, the live one expires too, when its time comes.
        for into in &kinds {
            let mut restored = Harness::new(into, FULL, blocks.clone());
            restored.at(150);
            let value = ValueState::<u64>::new("v").with_ttl(ttl.clone());
            let live = restored.with("new", |ctx| value.value(ctx)).unwrap();
            assert_eq!(live, Some(2), "{kind:?} into {into:?}");
            let keys = value.keys(&mut restored.store).unwrap();
            assert_eq!(
                keys.len(),
                1,
                "{kind:?} into {into:?}: the expired key was snapshotted"
            );
            restored.at(170);
            let gone = restored.with("new", |ctx| value.value(ctx)).unwrap();
            assert_eq!(gone, None, "{kind:?} into {into:?}");
        }
    }
}

/// Timers fire once each, in order, also after a restore (rescaled) into either store.
pub fn timers_survive_a_restore(kind: StoreKind) {
    let kinds = [StoreKind::Heap, kind];
    for kind in &kinds {
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
        let blocks = h.savepoint();
        for into in &kinds {
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
            let mut expected: Vec<(i64, String)> = (5..12)
                .rev()
                .map(|i| (100 - i as i64, format!("k{i}")))
                .collect();
            expected.sort();
            assert_eq!(fired, expected, "{kind:?} into {into:?}");
        }
    }
}
