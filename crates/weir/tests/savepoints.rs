//! Savepoints: stop-with-savepoint, restore at another parallelism (2 → 3 → 1) with keyed
//! state, operator list state and source positions redistributed, and uid mapping.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{committed, diff, mix, multiset, CommittedStore, CommittingSink};
use weir::connectors::generator::GeneratorSource;
use weir::WatermarkStrategy;
use weir::{
    CheckpointConfig, CheckpointStorageConfig, ExecutionConfig, StreamExecutionEnvironment,
    WeirError,
};

const RECORDS: u64 = 24_000;

fn key_of(i: u64) -> u64 {
    mix(i) % 101
}

fn config(
    parallelism: u32,
    dir: &std::path::Path,
    restore: Option<&weir::Savepoint>,
) -> ExecutionConfig {
    let mut config = ExecutionConfig::default()
        .with_parallelism(parallelism)
        .with_buffer_size(64)
        .with_buffer_timeout(Duration::from_millis(5))
        .with_checkpointing(
            CheckpointConfig::default()
                .with_interval(Duration::from_millis(50))
                .with_storage(CheckpointStorageConfig::FileSystem(dir.to_path_buf())),
        );
    if let Some(savepoint) = restore {
        config = config.with_restore(savepoint);
    }
    config
}

/// The job: numbers → keyed running count → committing sink. (A count's updates do not
/// depend on the order in which parallel sources interleave, so an uninterrupted run's
/// output is one well-defined multiset.) With `held` > 0 the last `held` numbers of each
/// split are never read: the run cannot finish, whatever the machine's speed, and ends only
/// by a stop or a cancellation.
fn build(
    env: &StreamExecutionEnvironment,
    sink: CommittingSink<(u64, u64)>,
    rename_count: bool,
    held: u64,
) {
    env.from_source(
        numbers(RECORDS, held),
        WatermarkStrategy::no_watermarks(),
        "numbers",
    )
    .uid("numbers")
    .key_by(|i: &u64| key_of(*i))
    .count()
    .uid(if rename_count {
        "renamed-count"
    } else {
        "count"
    })
    .sink_to(sink, "committed")
    .uid("sink");
}

/// `0..count`, the last `held` of each split withheld for good (none with 0).
fn numbers(count: u64, held: u64) -> GeneratorSource<u64, fn(u64) -> u64> {
    let source = GeneratorSource::new(count, (|i| i) as fn(u64) -> u64);
    if held == 0 {
        source
    } else {
        source.with_held_tail(held, || false)
    }
}

/// Waits (up to five minutes, a guard against a hang only) until the job completed a
/// checkpoint.
fn await_checkpoint(client: &weir::JobClient) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while client.checkpoint_history().unwrap().completed == 0 {
        assert!(Instant::now() < deadline, "no checkpoint completed");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn expected() -> HashMap<(u64, u64), usize> {
    let mut counts: HashMap<u64, u64> = HashMap::new();
    let updates: Vec<(u64, u64)> = (0..RECORDS)
        .map(|i| {
            let c = counts.entry(key_of(i)).or_insert(0);
            *c += 1;
            (key_of(i), *c)
        })
        .collect();
    multiset(&updates)
}

/// Runs the job with the last `held` numbers of each split withheld, so that it cannot
/// finish, and stops it with a savepoint once a checkpoint completed.
fn run_until_stopped(
    parallelism: u32,
    dir: &std::path::Path,
    restore: Option<&weir::Savepoint>,
    store: &CommittedStore<(u64, u64)>,
    held: u64,
) -> weir::Savepoint {
    let env = StreamExecutionEnvironment::new(config(parallelism, dir, restore)).unwrap();
    build(
        &env,
        CommittingSink {
            store: store.clone(),
        },
        false,
        held,
    );
    let client = env.execute_async("rescaling").unwrap();
    await_checkpoint(&client);
    let (path, result) = client.stop_with_savepoint().unwrap();
    assert_eq!(result.status, weir::JobStatus::Stopped);
    assert_eq!(result.savepoint.as_ref(), Some(&path));
    path
}

#[test]
fn savepoints_restore_at_parallelism_2_then_3_then_1() {
    let dir = tempfile::tempdir().unwrap();
    let (_, store) = CommittingSink::<(u64, u64)>::new();
    // Each of the first run's two splits holds back its last quarter of the numbers, the
    // second run its last eighth: each run reads some, the last one the rest.
    let first = run_until_stopped(2, dir.path(), None, &store, RECORDS / 4);
    assert!(first.path().join("_metadata").exists(), "{first}");
    let second = run_until_stopped(3, dir.path(), Some(&first), &store, RECORDS / 8);
    let env = StreamExecutionEnvironment::new(config(1, dir.path(), Some(&second))).unwrap();
    build(
        &env,
        CommittingSink {
            store: store.clone(),
        },
        false,
        0,
    );
    let result = env.execute("rescaling").unwrap();
    assert!(
        matches!(result.start, Some(weir::JobStart::Restored { checkpoint_id, .. }) if checkpoint_id == second.checkpoint_id()),
        "{:?}",
        result.start
    );
    assert_eq!(result.status, weir::JobStatus::Finished);
    let got = multiset(&committed(&store));
    if let Some(d) = diff(&expected(), &got) {
        panic!("2 -> 3 -> 1 differs from an uninterrupted run: {d}");
    }
    // Savepoints are the user's: never discarded.
    assert!(first.path().exists() && second.path().exists());
}

#[test]
fn state_of_a_missing_uid_is_an_error_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let (_, store) = CommittingSink::<(u64, u64)>::new();
    let savepoint = run_until_stopped(2, dir.path(), None, &store, RECORDS / 4);
    let env = StreamExecutionEnvironment::new(config(2, dir.path(), Some(&savepoint))).unwrap();
    build(
        &env,
        CommittingSink {
            store: store.clone(),
        },
        true,
        0,
    );
    let err = env
        .execute("renamed")
        .expect_err("restoring orphaned state must fail");
    assert!(matches!(err, WeirError::Restore { .. }), "{err}");
    assert!(err.to_string().contains("\"count\""), "{err}");
    let mut allowed = config(2, dir.path(), None);
    allowed = allowed.with_restore(
        weir::RestoreSettings::from(&savepoint)
            .with_non_restored_state(weir::NonRestoredState::Drop),
    );
    let env = StreamExecutionEnvironment::new(allowed).unwrap();
    build(
        &env,
        CommittingSink {
            store: store.clone(),
        },
        true,
        0,
    );
    env.execute("renamed").unwrap();
}

#[test]
fn trigger_savepoint_while_running() {
    let dir = tempfile::tempdir().unwrap();
    let (sink, _) = CommittingSink::<(u64, u64)>::new();
    let env = StreamExecutionEnvironment::new(config(2, dir.path(), None)).unwrap();
    // The input's last quarter waits until the savepoint is taken: the job is still running.
    let released = Arc::new(AtomicBool::new(false));
    let release = released.clone();
    env.from_source(
        GeneratorSource::new(RECORDS, |i| i)
            .with_held_tail(RECORDS / 4, move || release.load(Ordering::SeqCst)),
        WatermarkStrategy::no_watermarks(),
        "numbers",
    )
    .uid("numbers")
    .key_by(|i: &u64| key_of(*i))
    .count()
    .uid("count")
    .sink_to(sink, "committed")
    .uid("sink");
    let client = env.execute_async("savepoint").unwrap();
    let savepoint = client.trigger_savepoint().unwrap();
    released.store(true, Ordering::SeqCst);
    assert!(
        savepoint
            .location()
            .ends_with(&format!("savepoint-{}", savepoint.checkpoint_id())),
        "{savepoint}"
    );
    let history = client.checkpoint_history().unwrap();
    assert!(history
        .recent
        .iter()
        .any(|s| s.kind == weir::runtime::stream_element::SnapshotType::Savepoint));
    let result = client.wait().unwrap();
    assert_eq!(result.status, weir::JobStatus::Finished);
    assert!(savepoint.path().join("_metadata").exists());
}

#[test]
fn savepoint_without_checkpoint_storage_is_refused() {
    let env =
        StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1)).unwrap();
    env.from_source(
        numbers(50_000, 10_000),
        WatermarkStrategy::no_watermarks(),
        "numbers",
    )
    .collect();
    let client = env.execute_async("no checkpoints").unwrap();
    let err = client.trigger_savepoint().unwrap_err();
    assert!(
        err.to_string().contains("savepoints need a directory"),
        "{err}"
    );
    client.cancel().unwrap();
}

#[test]
fn savepoints_need_no_periodic_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let config = |restore: Option<&weir::Savepoint>| {
        let mut config = ExecutionConfig::default()
            .with_parallelism(2)
            .with_checkpointing(
                CheckpointConfig::default()
                    .with_storage(CheckpointStorageConfig::directory(dir.path())),
            );
        if let Some(savepoint) = restore {
            config = config.with_restore(savepoint);
        }
        config
    };
    // The first run holds back the last quarter of each split for good: it cannot end
    // before the stop.
    let build = |env: &StreamExecutionEnvironment, held: u64| {
        env.from_source(
            numbers(40_000, held),
            WatermarkStrategy::no_watermarks(),
            "numbers",
        )
        .uid("numbers")
        .map(|i| i % 7)
        .key_by(|k: &u64| *k)
        .count()
        .uid("count")
        .collect()
    };
    let env = StreamExecutionEnvironment::new(config(None)).unwrap();
    assert_eq!(env.config().checkpoint.interval, None);
    let first = build(&env, 10_000);
    let client = env.execute_async("savepoint only").unwrap();
    let savepoint = client.trigger_savepoint().unwrap();
    assert!(savepoint.path().join("_metadata").is_file(), "{savepoint}");
    let (stopped, result) = client.stop_with_savepoint().unwrap();
    assert_eq!(result.status, weir::JobStatus::Stopped);
    let counted_before = first.take().len();
    assert!(counted_before < 40_000, "the job ended before the stop");

    // The restored run continues the counts: every count from 1 to its key's total comes
    // out once over both runs.
    let env = StreamExecutionEnvironment::new(config(Some(&stopped))).unwrap();
    let second = build(&env, 0);
    env.execute("savepoint only").unwrap();
    let second = second.take();
    assert_eq!(counted_before + second.len(), 40_000);
    let mut finals = std::collections::BTreeMap::new();
    for (key, n) in second {
        let top = finals.entry(key).or_insert(0);
        *top = n.max(*top);
    }
    assert_eq!(finals.values().sum::<u64>(), 40_000);
}

#[test]
fn restoring_a_savepoint_older_than_committed_output_is_refused_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let (sink, _) = CommittingSink::<(u64, u64)>::new();
    let env = StreamExecutionEnvironment::new(config(2, dir.path(), None)).unwrap();
    build(&env, sink, false, RECORDS / 4);
    let client = env.execute_async("older savepoint").unwrap();
    // A savepoint commits nothing; the checkpoints after it do.
    let savepoint = client.trigger_savepoint().unwrap();
    let id = savepoint.checkpoint_id();
    let deadline = Instant::now() + Duration::from_secs(300);
    while !client.checkpoint_history().unwrap().recent.iter().any(|s| {
        s.id > id
            && s.kind == weir::runtime::stream_element::SnapshotType::Checkpoint
            && s.status == weir::checkpoint::stats::CheckpointStatus::Completed
    }) {
        assert!(
            Instant::now() < deadline,
            "no checkpoint after the savepoint"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    client.cancel().unwrap();

    let build_restored = |config: ExecutionConfig| {
        let env = StreamExecutionEnvironment::new(config).unwrap();
        let (sink, _) = CommittingSink::<(u64, u64)>::new();
        build(&env, sink, false, 0);
        env.execute("older savepoint")
    };
    let err = build_restored(config(2, dir.path(), Some(&savepoint))).unwrap_err();
    assert!(
        matches!(
            err,
            WeirError::Recovery(weir::RecoveryError::OlderThanCommitted { .. })
        ),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&format!("it is checkpoint {id}"))
            && text.contains("a second time")
            && text.contains("recovery.fallback-on-corrupt-checkpoint"),
        "{text}"
    );
    // Asked for, it restores (and would duplicate what those checkpoints committed).
    let mut allowed = config(2, dir.path(), Some(&savepoint));
    allowed.checkpoint = allowed
        .checkpoint
        .with_corrupt_checkpoint_policy(weir::CorruptCheckpointPolicy::AllowDuplicates);
    let result = build_restored(allowed).unwrap();
    assert_eq!(result.restored_from, vec![id]);
}
