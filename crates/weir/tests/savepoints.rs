//! Savepoints: stop-with-savepoint, restore at another parallelism (2 → 3 → 1) with keyed
//! state, operator list state and source positions redistributed, and uid mapping.

mod common;

use std::collections::HashMap;
use std::time::Duration;

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
/// output is one well-defined multiset.)
fn build(env: &StreamExecutionEnvironment, sink: CommittingSink<(u64, u64)>, rename_count: bool) {
    env.from_source(
        GeneratorSource::new(RECORDS, |i| i).with_rate_limit(24_000.0),
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

fn run_until_stopped(
    parallelism: u32,
    dir: &std::path::Path,
    restore: Option<&weir::Savepoint>,
    store: &CommittedStore<(u64, u64)>,
) -> weir::Savepoint {
    let env = StreamExecutionEnvironment::new(config(parallelism, dir, restore)).unwrap();
    build(
        &env,
        CommittingSink {
            store: store.clone(),
        },
        false,
    );
    let client = env.execute_async("rescaling").unwrap();
    std::thread::sleep(Duration::from_millis(250));
    let (path, result) = client.stop_with_savepoint().unwrap();
    assert_eq!(result.status, weir::JobStatus::Stopped);
    assert_eq!(result.savepoint.as_ref(), Some(&path));
    path
}

#[test]
fn savepoints_restore_at_parallelism_2_then_3_then_1() {
    let dir = tempfile::tempdir().unwrap();
    let (_, store) = CommittingSink::<(u64, u64)>::new();
    let first = run_until_stopped(2, dir.path(), None, &store);
    assert!(first.path().join("_metadata").exists(), "{first}");
    let second = run_until_stopped(3, dir.path(), Some(&first), &store);
    let env = StreamExecutionEnvironment::new(config(1, dir.path(), Some(&second))).unwrap();
    build(
        &env,
        CommittingSink {
            store: store.clone(),
        },
        false,
    );
    let result = env.execute("rescaling").unwrap();
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
    let savepoint = run_until_stopped(2, dir.path(), None, &store);
    let env = StreamExecutionEnvironment::new(config(2, dir.path(), Some(&savepoint))).unwrap();
    build(
        &env,
        CommittingSink {
            store: store.clone(),
        },
        true,
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
    );
    env.execute("renamed").unwrap();
}

#[test]
fn trigger_savepoint_while_running() {
    let dir = tempfile::tempdir().unwrap();
    let (sink, _) = CommittingSink::<(u64, u64)>::new();
    let env = StreamExecutionEnvironment::new(config(2, dir.path(), None)).unwrap();
    build(&env, sink, false);
    let client = env.execute_async("savepoint").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let savepoint = client.trigger_savepoint().unwrap();
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
        GeneratorSource::new(50_000, |i| i).with_rate_limit(50_000.0),
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
    let build = |env: &StreamExecutionEnvironment| {
        env.from_source(
            GeneratorSource::new(40_000, |i| i % 7).with_rate_limit(40_000.0),
            WatermarkStrategy::no_watermarks(),
            "numbers",
        )
        .uid("numbers")
        .key_by(|k: &u64| *k)
        .count()
        .uid("count")
        .collect()
    };
    let env = StreamExecutionEnvironment::new(config(None)).unwrap();
    assert_eq!(env.config().checkpoint.interval, None);
    let first = build(&env);
    let client = env.execute_async("savepoint only").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let savepoint = client.trigger_savepoint().unwrap();
    assert!(savepoint.path().join("_metadata").is_file(), "{savepoint}");
    let (stopped, result) = client.stop_with_savepoint().unwrap();
    assert_eq!(result.status, weir::JobStatus::Stopped);
    let counted_before = first.take().len();
    assert!(counted_before < 40_000, "the job ended before the stop");

    // The restored run continues the counts: every count from 1 to its key's total comes
    // out once over both runs.
    let env = StreamExecutionEnvironment::new(config(Some(&stopped))).unwrap();
    let second = build(&env);
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
    build(&env, sink, false);
    let client = env.execute_async("older savepoint").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    // A savepoint commits nothing; the checkpoints after it do.
    let savepoint = client.trigger_savepoint().unwrap();
    let id = savepoint.checkpoint_id();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !client.checkpoint_history().unwrap().recent.iter().any(|s| {
        s.id > id
            && s.kind == weir::runtime::stream_element::SnapshotType::Checkpoint
            && s.status == weir::checkpoint::stats::CheckpointStatus::Completed
    }) {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint after the savepoint"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    client.cancel().unwrap();

    let build_restored = |config: ExecutionConfig| {
        let env = StreamExecutionEnvironment::new(config).unwrap();
        let (sink, _) = CommittingSink::<(u64, u64)>::new();
        build(&env, sink, false);
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
