//! The three ways to exactly-once output under injected failures: the two-phase-commit file
//! sink, the write-ahead-log sink, and idempotent upserts.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir::WatermarkStrategy;

use common::{committed_lines, diff, failover_config, hidden_files, mix, multiset};
use weir::connectors::file_sink::{committed_files, FileSink, RollingPolicy};
use weir::connectors::generator::GeneratorSource;
use weir::connectors::sink::Sink;
use weir::connectors::upsert_sink::{UpsertSink, UpsertStore};
use weir::connectors::write_ahead_log::{FileBatchCommitter, WriteAheadLog};
use weir::{
    BoxError, CheckpointConfig, CheckpointStorageConfig, ExecutionConfig,
    StreamExecutionEnvironment,
};

const RECORDS: u64 = 12_000;

fn key_of(i: u64) -> u64 {
    mix(i) % 41
}

fn config() -> ExecutionConfig {
    failover_config(2, Duration::from_millis(30))
}

/// Rolling counts as "key,count" lines; the expected lines of an uninterrupted run.
fn expected_lines() -> HashMap<String, usize> {
    let mut counts: HashMap<u64, u64> = HashMap::new();
    let lines: Vec<String> = (0..RECORDS)
        .map(|i| {
            let c = counts.entry(key_of(i)).or_insert(0);
            *c += 1;
            format!("{},{}", key_of(i), c)
        })
        .collect();
    multiset(&lines)
}

/// Runs the keyed count into `sink` with two injected failures.
fn run_into<S: Sink<String>>(sink: S) -> weir::JobExecutionResult {
    run_into_releasing(sink, || true)
}

/// [`run_into`], the last 500 numbers of each split withheld until `release` says so.
fn run_into_releasing<S: Sink<String>>(
    sink: S,
    release: impl Fn() -> bool + Send + Sync + 'static,
) -> weir::JobExecutionResult {
    let env = StreamExecutionEnvironment::new(config()).unwrap();
    let failures = Arc::new([
        (2_000u64, AtomicBool::new(false)),
        (5_000, AtomicBool::new(false)),
    ]);
    env.from_source(
        GeneratorSource::new(RECORDS, |i| i)
            .with_rate_limit(30_000.0)
            .with_held_tail(500, release),
        WatermarkStrategy::no_watermarks(),
        "numbers",
    )
    .map(move |i: u64| {
        for (at, done) in failures.iter() {
            if i == *at && !done.swap(true, Ordering::SeqCst) {
                panic!("injected failure at {i}");
            }
        }
        i
    })
    .key_by(|i: &u64| key_of(*i))
    .count()
    .map(|(k, n): (u64, u64)| format!("{k},{n}"))
    .sink_to(sink, "output");
    let result = env.execute("exactly once").unwrap();
    assert_eq!(result.restarts, 2);
    result
}

#[test]
fn two_phase_commit_file_sink_is_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let sink = FileSink::<String>::lines(dir.path()).with_rolling_policy(RollingPolicy {
        max_part_size: Some(4 * 1024),
        rollover_interval: None,
    });
    run_into(sink);
    if let Some(d) = diff(&expected_lines(), &multiset(&committed_lines(dir.path()))) {
        panic!("{d}");
    }
    assert!(
        hidden_files(dir.path()).is_empty(),
        "left behind: {:?}",
        hidden_files(dir.path())
    );
    assert!(
        committed_files(dir.path()).unwrap().len() > 4,
        "rolled by size and at checkpoints"
    );
}

#[test]
fn readers_never_see_partial_or_uncommitted_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_path_buf();
    // The watcher looks until the job has ended, however long a loaded machine makes it (a
    // fixed 0.6 s once ended before the first commit); the job cannot end before the watcher
    // saw a committed file (the last numbers wait for it).
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let running = done.clone();
    let saw_one = Arc::new(AtomicBool::new(false));
    let saw = saw_one.clone();
    let watcher = std::thread::spawn(move || {
        let mut seen: HashMap<std::path::PathBuf, String> = HashMap::new();
        while !running.load(std::sync::atomic::Ordering::SeqCst) {
            if let Ok(files) = committed_files(&out) {
                for f in files {
                    let Ok(text) = std::fs::read_to_string(&f) else {
                        continue;
                    };
                    assert!(
                        text.is_empty() || text.ends_with('\n'),
                        "partial file {}",
                        f.display()
                    );
                    if let Some(before) = seen.insert(f.clone(), text.clone()) {
                        assert_eq!(before, text, "committed file {} changed", f.display());
                    }
                }
                if !seen.is_empty() {
                    saw.store(true, Ordering::SeqCst);
                }
            }
            std::thread::sleep(Duration::from_millis(3));
        }
        seen.len()
    });
    run_into_releasing(FileSink::<String>::lines(dir.path()), move || {
        saw_one.load(Ordering::SeqCst)
    });
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(
        watcher.join().unwrap() > 0,
        "the watcher saw committed files while the job ran"
    );
}

#[test]
fn write_ahead_log_sink_is_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    run_into(WriteAheadLog(FileBatchCommitter::<String>::lines(
        dir.path(),
    )));
    if let Some(d) = diff(&expected_lines(), &multiset(&committed_lines(dir.path()))) {
        panic!("{d}");
    }
    assert!(hidden_files(dir.path()).is_empty());
}

/// A table in memory, standing in for a database with a primary key.
#[derive(Clone, Default)]
struct Table(Arc<Mutex<HashMap<u64, u64>>>);

impl UpsertStore<u64, u64> for Table {
    fn upsert(&mut self, rows: Vec<(u64, u64)>) -> Result<(), BoxError> {
        let mut table = self.0.lock().map_err(|_| "poisoned")?;
        for (k, v) in rows {
            table.insert(k, v);
        }
        Ok(())
    }
}

#[test]
fn upserts_make_replays_idempotent() {
    let table = Table::default();
    let sink = UpsertSink::new(table.clone(), |line: &String| {
        let (k, n) = line.split_once(',').unwrap_or(("0", "0"));
        (k.parse().unwrap_or(0), n.parse().unwrap_or(0))
    });
    run_into(sink);
    let mut truth: HashMap<u64, u64> = HashMap::new();
    for i in 0..RECORDS {
        *truth.entry(key_of(i)).or_insert(0) += 1;
    }
    assert_eq!(*table.0.lock().unwrap(), truth);
}

#[test]
fn file_sink_rolls_parts_by_age() {
    let dir = tempfile::tempdir().unwrap();
    let config = ExecutionConfig::default()
        .with_parallelism(1)
        .with_checkpointing(
            CheckpointConfig::default()
                .with_interval(Duration::from_secs(60))
                .with_storage(CheckpointStorageConfig::Memory),
        );
    let env = StreamExecutionEnvironment::new(config).unwrap();
    let rollover = Duration::from_millis(30);
    // The last 200 numbers wait until the part the first 200 went to is older than the
    // rollover interval, however the machine delivers the records.
    let released = Arc::new(AtomicBool::new(false));
    let release = released.clone();
    env.from_source(
        GeneratorSource::new(400, |i| i)
            .with_held_tail(200, move || release.load(Ordering::SeqCst)),
        WatermarkStrategy::no_watermarks(),
        "numbers",
    )
    .map(|i: u64| i.to_string())
    .sink_to(
        FileSink::<String>::lines(dir.path()).with_rolling_policy(RollingPolicy {
            max_part_size: None,
            rollover_interval: Some(rollover),
        }),
        "output",
    );
    let client = env.execute_async("rolling").unwrap();
    common::wait_until("an open part", || {
        hidden_files(dir.path())
            .iter()
            .any(|name| name.ends_with(".inprogress"))
    });
    // The part was opened before it was seen: after the rollover interval it is older than
    // that (a longer wait only makes it older).
    std::thread::sleep(rollover);
    released.store(true, Ordering::SeqCst);
    client.wait().unwrap();
    // No periodic checkpoint in this short run: the final checkpoint commits every part.
    let parts = committed_files(dir.path()).unwrap();
    // Without rolling by age there would be one part: the final checkpoint's.
    assert!(parts.len() >= 2, "rolled by age into {} parts", parts.len());
    let lines = committed_lines(dir.path());
    assert_eq!(lines.len(), 400);
}

#[test]
fn file_sink_transactions_survive_rescaling_through_savepoints() {
    let out = tempfile::tempdir().unwrap();
    let checkpoints = tempfile::tempdir().unwrap();
    let config = |parallelism: u32, restore: Option<&weir::Savepoint>| {
        let mut config = ExecutionConfig::default()
            .with_parallelism(parallelism)
            .with_buffer_size(64)
            .with_checkpointing(
                CheckpointConfig::default()
                    .with_interval(Duration::from_millis(40))
                    .with_storage(CheckpointStorageConfig::FileSystem(
                        checkpoints.path().to_path_buf(),
                    )),
            );
        if let Some(savepoint) = restore {
            config = config.with_restore(savepoint);
        }
        config
    };
    // The last `held` numbers of each split withheld for good (none with 0); `formatted`
    // counts the lines formatted.
    let build = |env: &StreamExecutionEnvironment, held: u64, formatted: &Arc<AtomicU64>| {
        let mut numbers = GeneratorSource::new(RECORDS, (|i| i) as fn(u64) -> u64);
        if held > 0 {
            numbers = numbers.with_held_tail(held, || false);
        }
        let formatted = formatted.clone();
        env.from_source(numbers, WatermarkStrategy::no_watermarks(), "numbers")
            .uid("numbers")
            .key_by(|i: &u64| key_of(*i))
            .count()
            .uid("count")
            .map(move |(k, n): (u64, u64)| {
                formatted.fetch_add(1, Ordering::SeqCst);
                format!("{k},{n}")
            })
            .uid("format")
            .sink_to(FileSink::<String>::lines(out.path()), "output")
            .uid("files");
    };
    // Two splits of 6 000: the first run reads 2 000 of each and cannot end, nor can the
    // second, which reads 2 000 more; each is stopped once it read what it can and completed
    // a checkpoint.
    let mut restore: Option<weir::Savepoint> = None;
    for (parallelism, held) in [(2, 4_000), (3, 2_000)] {
        let env = StreamExecutionEnvironment::new(config(parallelism, restore.as_ref())).unwrap();
        let formatted = Arc::new(AtomicU64::new(0));
        build(&env, held, &formatted);
        let client = env.execute_async("rescale files").unwrap();
        common::wait_until("the numbers the run can read", || {
            formatted.load(Ordering::SeqCst) >= 4_000
        });
        common::await_checkpoints(&client, 1);
        let (savepoint, _) = client.stop_with_savepoint().unwrap();
        assert_eq!(
            formatted.load(Ordering::SeqCst),
            4_000,
            "held numbers were read"
        );
        restore = Some(savepoint);
    }
    let env = StreamExecutionEnvironment::new(config(1, restore.as_ref())).unwrap();
    build(&env, 0, &Arc::default());
    env.execute("rescale files").unwrap();
    if let Some(d) = diff(&expected_lines(), &multiset(&committed_lines(out.path()))) {
        panic!("2 -> 3 -> 1: {d}");
    }
    assert!(
        hidden_files(out.path()).is_empty(),
        "left behind: {:?}",
        hidden_files(out.path())
    );
}
