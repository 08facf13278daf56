//! Checkpoints end to end: exactly-once results under injected failures (the oracle of
//! DESIGN.md §9), at-least-once loses nothing, consistent snapshots under alignment, and the
//! checkpoint lifecycle (history, retention, ids).

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use weir::WatermarkStrategy;

use common::{committed, diff, mix, multiset, seeds, CommittingSink, CountPerKey, Rng};
use weir::connectors::generator::GeneratorSource;
use weir::{
    CheckpointConfig, CheckpointStorageConfig, CheckpointingMode, ExecutionConfig,
    RestartStrategyConfig, StreamExecutionEnvironment,
};

const RECORDS: u64 = 20_000;
const KEYS: u64 = 97;

fn key_of(i: u64) -> u64 {
    mix(i) % KEYS
}

fn config(parallelism: u32, mode: CheckpointingMode) -> ExecutionConfig {
    ExecutionConfig::default()
        .with_parallelism(parallelism)
        .with_buffer_size(64)
        .with_buffer_timeout(Duration::from_millis(5))
        .with_checkpointing(
            CheckpointConfig::default()
                .with_interval(Duration::from_millis(40))
                .with_mode(mode)
                .with_retained(2)
                .with_storage(CheckpointStorageConfig::Memory),
        )
        .with_restart_strategy(RestartStrategyConfig::FixedDelay {
            attempts: 20,
            delay: Duration::from_millis(5),
        })
}

/// Every rolling-count update of an uninterrupted run.
fn expected_updates() -> Vec<(u64, u64)> {
    common::rolling_counts(RECORDS, key_of)
}

/// Runs the keyed count with failures injected before each of `fail_at` records (each once).
fn run_keyed_count(
    mode: CheckpointingMode,
    fail_at: &[u64],
) -> (Vec<(u64, u64)>, weir::JobExecutionResult) {
    let env = StreamExecutionEnvironment::new(config(2, mode)).unwrap();
    let (sink, store) = CommittingSink::new();
    let failures: Arc<Vec<(u64, AtomicBool)>> = Arc::new(
        fail_at
            .iter()
            .map(|&i| (i, AtomicBool::new(false)))
            .collect(),
    );
    env.from_source(
        GeneratorSource::new(RECORDS, |i| i).with_rate_limit(40_000.0),
        WatermarkStrategy::no_watermarks(),
        "numbers",
    )
    .map(move |i: u64| {
        for (at, done) in failures.iter() {
            if i == *at && !done.swap(true, Ordering::SeqCst) {
                panic!("injected failure at record {i}");
            }
        }
        i
    })
    .name("fault injector")
    .key_by(|i: &u64| key_of(*i))
    .process(CountPerKey::default())
    .uid("count")
    .sink_to(sink, "committed")
    .uid("sink");
    let result = env.execute("keyed count").unwrap();
    (committed(&store), result)
}

#[test]
fn exactly_once_under_random_failures() {
    let expected = multiset(&expected_updates());
    for seed in seeds(6) {
        let mut rng = Rng(seed);
        let failures: Vec<u64> = (0..1 + rng.below(3))
            .map(|_| rng.below(RECORDS * 9 / 10))
            .collect();
        println!(
            "seed {seed}: failures before records {failures:?} (replay with WEIR_SEED={seed})"
        );
        let (output, result) = run_keyed_count(CheckpointingMode::ExactlyOnce, &failures);
        if let Some(d) = diff(&expected, &multiset(&output)) {
            panic!(
                "seed {seed}: {d}; {} restarts, {} checkpoints",
                result.restarts, result.checkpoints.completed
            );
        }
        // Failures in records of different subtasks may strike the same run.
        let distinct = failures
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        assert!(
            (1..=distinct as u32).contains(&result.restarts),
            "seed {seed}: {} restarts for {distinct} failures",
            result.restarts
        );
        assert!(
            result.checkpoints.completed > 0,
            "seed {seed}: no checkpoint completed"
        );
    }
}

#[test]
fn at_least_once_loses_nothing() {
    let mut truth: HashMap<u64, u64> = HashMap::new();
    for i in 0..RECORDS {
        *truth.entry(key_of(i)).or_insert(0) += 1;
    }
    for seed in seeds(3) {
        let mut rng = Rng(seed + 1000);
        let failures: Vec<u64> = (0..2).map(|_| rng.below(RECORDS * 9 / 10)).collect();
        println!("seed {seed}: failures before records {failures:?}");
        let (output, _) = run_keyed_count(CheckpointingMode::AtLeastOnce, &failures);
        let mut latest: HashMap<u64, u64> = HashMap::new();
        for (k, n) in output {
            let e = latest.entry(k).or_insert(0);
            *e = (*e).max(n);
        }
        for (k, n) in &truth {
            let got = latest.get(k).copied().unwrap_or(0);
            assert!(
                got >= *n,
                "seed {seed}: key {k} counted {got} < {n}: records lost"
            );
        }
    }
}

#[test]
fn checkpoints_complete_with_statistics_and_growing_ids() {
    let (output, result) = run_keyed_count(CheckpointingMode::ExactlyOnce, &[]);
    assert_eq!(multiset(&output), multiset(&expected_updates()));
    let history = &result.checkpoints;
    assert!(history.completed >= 3, "{history}");
    let ids: Vec<u64> = history.recent.iter().map(|s| s.id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    let last = history.latest_completed().unwrap();
    // 2 source subtasks + 2 count/sink subtasks.
    assert_eq!(last.subtasks.len(), 4, "{last:?}");
    assert!(last.state_size > 0);
    assert!(last.duration.is_some());
}
