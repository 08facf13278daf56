//! Unaligned checkpoints (FLIP-76) end to end: under backpressure, barriers overtake the
//! records in flight, which are stored as channel state and replayed on restore — after
//! injected failures, and after rescaling 2 → 3 → 1 — with exactly-once results (the oracle
//! of DESIGN.md §9); an aligned-checkpoint timeout switches a slow alignment to unaligned.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{committed, diff, mix, multiset, seeds, CommittingSink, CountPerKey, Rng};
use weir::checkpoint::stats::{CheckpointStats, CheckpointStatus};
use weir::connectors::generator::GeneratorSource;
use weir::{
    CheckpointConfig, CheckpointStorageConfig, ExecutionConfig, JobExecutionResult,
    RestartStrategyConfig, RetentionOnCancel, StreamExecutionEnvironment, WatermarkStrategy,
};

const RECORDS: u64 = 12_000;
const KEYS: u64 = 61;

fn key_of(i: u64) -> u64 {
    mix(i) % KEYS
}

fn checkpointing(timeout: Duration) -> CheckpointConfig {
    CheckpointConfig::default()
        .with_interval(Duration::from_millis(30))
        .with_unaligned(true)
        .with_aligned_checkpoint_timeout(timeout)
        .with_storage(CheckpointStorageConfig::Memory)
}

fn config(parallelism: u32, checkpoint: CheckpointConfig) -> ExecutionConfig {
    ExecutionConfig::default()
        .with_parallelism(parallelism)
        .with_buffer_size(32)
        .with_channel_capacity(4)
        .with_buffer_timeout(Duration::from_millis(5))
        .with_checkpointing(checkpoint)
        .with_restart_strategy(RestartStrategyConfig::FixedDelay {
            attempts: 20,
            delay: Duration::from_millis(5),
        })
}

/// Every rolling-count update of an uninterrupted run.
fn expected_updates() -> Vec<(u64, u64)> {
    common::rolling_counts(RECORDS, key_of)
}

/// Fails once before each record of `at`, in the stage it is placed in.
fn injector(at: &[u64]) -> impl Fn(u64) -> u64 + Clone + Send + Sync + 'static {
    let failures: Arc<Vec<(u64, AtomicBool)>> =
        Arc::new(at.iter().map(|&i| (i, AtomicBool::new(false))).collect());
    move |i| {
        for (at, done) in failures.iter() {
            if i == *at && !done.swap(true, Ordering::SeqCst) {
                panic!("injected failure at record {i}");
            }
        }
        i
    }
}

/// A source as fast as it can go, a fault injector, a keyed shuffle into a slow stage (so
/// that the shuffle's queues stay full and barriers have records to overtake), a second
/// fault injector after the shuffle, and a keyed count into the committing sink.
fn build(
    env: &StreamExecutionEnvironment,
    store: &CommittingSink<(u64, u64)>,
    before_shuffle: &[u64],
    after_shuffle: &[u64],
) {
    build_with(env, store, before_shuffle, after_shuffle, None);
}

/// [`build`]; with `backlog`, a run that cannot finish and stays backpressured until it is
/// told otherwise: the source holds back the last quarter of each split for good, and the
/// slow stage takes 2 ms per record until `backlog` is set.
fn build_with(
    env: &StreamExecutionEnvironment,
    store: &CommittingSink<(u64, u64)>,
    before_shuffle: &[u64],
    after_shuffle: &[u64],
    backlog: Option<Arc<AtomicBool>>,
) {
    let (before, after) = (injector(before_shuffle), injector(after_shuffle));
    let numbers = GeneratorSource::new(RECORDS, |i| i);
    let numbers = if backlog.is_some() {
        numbers.with_held_tail(RECORDS / 4, || false)
    } else {
        numbers
    };
    env.from_source(numbers, WatermarkStrategy::no_watermarks(), "numbers")
        .map(before)
        .name("fault injector")
        .key_by(|i: &u64| key_of(*i))
        .process(SlowPassThrough { drained: backlog })
        .uid("slow")
        .map(after)
        .name("fault injector after the shuffle")
        .key_by(|i: &u64| key_of(*i))
        .process(CountPerKey::default())
        .uid("count")
        .sink_to(store.clone(), "committed")
        .uid("sink");
}

/// Passes records on, sleeping now and then: the consumer that causes backpressure. While
/// `drained` is given and not set, it sleeps on every record.
#[derive(Clone)]
struct SlowPassThrough {
    drained: Option<Arc<AtomicBool>>,
}

impl weir::KeyedProcessFunction<u64, u64, u64> for SlowPassThrough {
    fn process_element(
        &mut self,
        value: u64,
        _ctx: &mut weir::KeyedContext<'_, u64>,
        out: &mut weir::Collector<'_, u64>,
    ) -> Result<(), weir::BoxError> {
        let backlog = self
            .drained
            .as_ref()
            .is_some_and(|d| !d.load(Ordering::SeqCst));
        if backlog {
            std::thread::sleep(Duration::from_millis(2));
        } else if value.is_multiple_of(16) {
            std::thread::sleep(Duration::from_micros(500));
        }
        out.collect(value);
        Ok(())
    }
}

fn completed(result: &JobExecutionResult) -> Vec<&CheckpointStats> {
    result
        .checkpoints
        .recent
        .iter()
        .filter(|c| c.status == CheckpointStatus::Completed)
        .collect()
}

fn run(
    parallelism: u32,
    checkpoint: CheckpointConfig,
    before_shuffle: &[u64],
    after_shuffle: &[u64],
) -> (Vec<(u64, u64)>, JobExecutionResult) {
    let env = StreamExecutionEnvironment::new(config(parallelism, checkpoint)).unwrap();
    let (sink, store) = CommittingSink::new();
    build(&env, &sink, before_shuffle, after_shuffle);
    let result = env.execute("unaligned keyed count").unwrap();
    (committed(&store), result)
}

#[test]
fn checkpoints_under_backpressure_store_the_records_in_flight_and_stay_exact() {
    let (output, result) = run(2, checkpointing(Duration::ZERO), &[], &[]);
    if let Some(d) = diff(&multiset(&expected_updates()), &multiset(&output)) {
        panic!("{d}");
    }
    let done = completed(&result);
    assert!(
        done.iter()
            .any(|c| c.is_unaligned() && c.persisted_data() > 0),
        "no completed checkpoint stored in-flight records: {:?}",
        done.iter()
            .map(|c| (c.id, c.is_unaligned(), c.persisted_data()))
            .collect::<Vec<_>>()
    );
    // The final checkpoint is aligned: nothing is in flight once every input ended.
    let last = done.last().expect("a final checkpoint");
    assert!(
        !last.is_unaligned(),
        "final checkpoint {} unaligned",
        last.id
    );
}

#[test]
fn exactly_once_under_random_failures_with_unaligned_checkpoints() {
    let expected = multiset(&expected_updates());
    let mut stored_in_flight = 0;
    for seed in seeds(5) {
        let mut rng = Rng(seed);
        let before: Vec<u64> = (0..rng.below(2))
            .map(|_| rng.below(RECORDS * 9 / 10))
            .collect();
        let after: Vec<u64> = (0..1 + rng.below(2))
            .map(|_| rng.below(RECORDS * 9 / 10))
            .collect();
        println!(
            "seed {seed}: failures before records {before:?} at the source, {after:?} after the \
             shuffle (replay with WEIR_SEED={seed})"
        );
        let (output, result) = run(2, checkpointing(Duration::ZERO), &before, &after);
        if let Some(d) = diff(&expected, &multiset(&output)) {
            panic!(
                "seed {seed}: {d}; {} restarts, {} checkpoints",
                result.restarts, result.checkpoints.completed
            );
        }
        assert!(result.restarts >= 1, "seed {seed}: no failure struck");
        stored_in_flight += completed(&result)
            .iter()
            .filter(|c| c.persisted_data() > 0)
            .count();
    }
    assert!(
        stored_in_flight > 0,
        "no checkpoint stored in-flight records"
    );
}

#[test]
fn an_alignment_that_outlasts_its_timeout_goes_unaligned_and_a_quick_one_does_not() {
    // A timeout far beyond any alignment here: every checkpoint aligns.
    let (output, result) = run(2, checkpointing(Duration::from_secs(60)), &[], &[]);
    assert!(diff(&multiset(&expected_updates()), &multiset(&output)).is_none());
    assert!(
        completed(&result).iter().all(|c| !c.is_unaligned()),
        "a checkpoint went unaligned before its 60 s timeout"
    );
    // A timeout shorter than the alignment under backpressure: checkpoints switch.
    let (output, result) = run(2, checkpointing(Duration::from_millis(2)), &[], &[1_000]);
    if let Some(d) = diff(&multiset(&expected_updates()), &multiset(&output)) {
        panic!("{d}");
    }
    assert!(
        completed(&result).iter().any(|c| c.is_unaligned()),
        "no checkpoint switched to unaligned after a 2 ms alignment timeout"
    );
}

#[test]
fn in_flight_records_are_replayed_after_rescaling_two_three_one() {
    let dir = tempfile::tempdir().unwrap();
    let (sink, store) = CommittingSink::new();
    let checkpoint = checkpointing(Duration::ZERO)
        .with_retained(3)
        .with_retention_on_cancel(RetentionOnCancel::Retain)
        .with_storage(CheckpointStorageConfig::directory(dir.path()));
    let mut replayed = 0;
    for parallelism in [2, 3] {
        let env = StreamExecutionEnvironment::new(
            config(parallelism, checkpoint.clone()).with_resume_from_latest_checkpoint(true),
        )
        .unwrap();
        // The run cannot finish, and stays backpressured until the checkpoint is seen.
        let drained = Arc::new(AtomicBool::new(false));
        build_with(&env, &sink, &[], &[], Some(drained.clone()));
        let client = env.execute_async("rescaled").unwrap();
        // Cancel once a checkpoint with records in flight is the latest.
        let deadline = std::time::Instant::now() + Duration::from_secs(300);
        loop {
            let details = client.details();
            let latest = details.checkpoints.latest_completed();
            if latest.is_some_and(|c| c.persisted_data() > 0 && c.id > 2) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no checkpoint with in-flight records at parallelism {parallelism}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let result = client.cancel().unwrap();
        drained.store(true, Ordering::SeqCst);
        replayed += result
            .checkpoints
            .latest_completed()
            .map_or(0, |c| c.persisted_data());
    }
    assert!(replayed > 0, "no restore had in-flight records to replay");
    let env = StreamExecutionEnvironment::new(
        config(1, checkpoint).with_resume_from_latest_checkpoint(true),
    )
    .unwrap();
    build(&env, &sink, &[], &[]);
    env.execute("rescaled").unwrap();
    if let Some(d) = diff(
        &multiset(&expected_updates()),
        &multiset(&committed(&store)),
    ) {
        panic!("rescaled 2 -> 3 -> 1: {d}");
    }
}
