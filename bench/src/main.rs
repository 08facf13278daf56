//! Throughput and checkpointing benchmarks of the Weir runtime, printing their figures.
//!
//! Run with `cargo run --release -p weir-bench` (all workloads) or pick some with
//! `--only NAME`. Each throughput workload runs `--runs` times; best and median are printed.
//! The machine is shared, so take the figures as a range.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;
use weir::checkpoint::stats::{CheckpointHistory, CheckpointStatus};
use weir::connectors::discard::DiscardingSink;
use weir::{
    BoxError, CheckpointConfig, CheckpointStorageConfig, Collector, ExecutionConfig,
    ProcessContext, ProcessFunction, RestartStrategyConfig, RuntimeContext,
    StreamExecutionEnvironment,
};

/// Command-line options.
#[derive(Parser, Debug)]
struct Args {
    /// Records for the stateless pipeline.
    #[arg(long, default_value_t = 200_000_000)]
    stateless_records: u64,
    /// Records for the keyed counts.
    #[arg(long, default_value_t = 40_000_000)]
    keyed_records: u64,
    /// Distinct keys in the keyed counts.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Distinct keys for the large-state checkpoint and recovery workloads.
    #[arg(long, default_value_t = 1_000_000)]
    state_keys: u64,
    /// Runs per throughput workload.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Only run workloads whose name contains this: stateless, keyed, large-state, recovery.
    #[arg(long)]
    only: Option<String>,
}

/// A scratch directory for checkpoints, removed on drop.
struct ScratchDir(std::path::PathBuf);

impl ScratchDir {
    fn new(name: &str) -> Result<Self> {
        let path = std::env::temp_dir().join(format!("weir-bench-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self(path))
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn spread(i: u64) -> u64 {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// generator → map → filter → discard, chained in one task at parallelism 1.
fn stateless(records: u64) -> Result<Duration> {
    let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
    env.generate(records, |i| i)
        .map(spread)
        .filter(|x| x & 1 == 0)
        .sink_to(DiscardingSink, "discard");
    Ok(env.execute("stateless")?.wall_time)
}

fn checkpointing(dir: &std::path::Path, interval: Duration) -> CheckpointConfig {
    CheckpointConfig::default()
        .with_interval(interval)
        .with_storage(CheckpointStorageConfig::FileSystem(dir.to_path_buf()))
}

/// generator → key_by → count → discard at parallelism 2: a real shuffle between subtasks,
/// optionally checkpointing every second to the filesystem.
fn keyed_count(
    records: u64,
    keys: u64,
    checkpoints: Option<&std::path::Path>,
) -> Result<(Duration, CheckpointHistory)> {
    let mut config = ExecutionConfig::default().with_parallelism(2);
    if let Some(dir) = checkpoints {
        config = config.with_checkpointing(checkpointing(dir, Duration::from_secs(1)));
    }
    let env = StreamExecutionEnvironment::new(config)?;
    env.generate(records, move |i| spread(i) % keys)
        .key_by(|k: &u64| *k)
        .count()
        .sink_to(DiscardingSink, "discard");
    let result = env.execute("keyed count")?;
    Ok((result.wall_time, result.checkpoints))
}

fn report(
    name: &str,
    records: u64,
    runs: usize,
    mut run: impl FnMut() -> Result<Duration>,
) -> Result<f64> {
    let mut rates = Vec::with_capacity(runs);
    for _ in 0..runs {
        let wall = run()?;
        rates.push(records as f64 / wall.as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    let best = rates.last().copied().unwrap_or(0.0);
    let median = rates[rates.len() / 2];
    println!(
        "{name:<52} {records:>11} records  best {:>7.2} M/s  median {:>7.2} M/s",
        best / 1e6,
        median / 1e6
    );
    Ok(median)
}

/// A checkpoint's figures: end-to-end, the task thread's synchronous part, the asynchronous
/// write, and the state size.
struct CheckpointFigures {
    end_to_end: Duration,
    sync: Duration,
    write: Duration,
    bytes: u64,
}

/// A keyed count over `keys` distinct keys, checkpointed every 500 ms, to measure how long
/// checkpoints of that much state take and how long they block the task thread — with or
/// without a local-recovery copy of every checkpoint file. Returns the figures of the
/// largest checkpoint.
fn large_state_checkpoint(keys: u64, local_copy: bool) -> Result<CheckpointFigures> {
    let dir = ScratchDir::new("state")?;
    let mut checkpoint = checkpointing(&dir.0.join("primary"), Duration::from_millis(500));
    if local_copy {
        checkpoint = checkpoint.with_local_recovery(dir.0.join("copy"));
    }
    let config = ExecutionConfig::default()
        .with_parallelism(2)
        .with_checkpointing(checkpoint.with_retained(1));
    let env = StreamExecutionEnvironment::new(config)?;
    // Every key first, then the keys again: state reaches its full size early.
    env.generate(keys * 6, move |i| i % keys)
        .key_by(|k: &u64| *k)
        .count()
        .sink_to(DiscardingSink, "discard");
    let result = env.execute("large state")?;
    let largest = result
        .checkpoints
        .recent
        .iter()
        .filter(|s| s.status == CheckpointStatus::Completed)
        .max_by_key(|s| s.state_size)
        .context("no checkpoint completed")?;
    Ok(CheckpointFigures {
        end_to_end: largest.duration.unwrap_or_default(),
        sync: largest.max_sync_duration(),
        write: largest.max_async_duration(),
        bytes: largest.state_size,
    })
}

/// Checkpoints of `keys` keys with and without a local copy of every file, alternating so
/// that drift in the machine's load hits both alike; prints the medians and what the copy
/// costs.
fn local_copy_cost(keys: u64, runs: usize) -> Result<()> {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (mut plain, mut copied) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        plain.push(large_state_checkpoint(keys, false)?);
        copied.push(large_state_checkpoint(keys, true)?);
    }
    let median = |v: &mut Vec<CheckpointFigures>, f: fn(&CheckpointFigures) -> Duration| {
        let mut values: Vec<Duration> = v.iter().map(f).collect();
        values.sort();
        values[values.len() / 2]
    };
    let bytes = plain.first().map_or(0, |f| f.bytes);
    for (label, figures) in [("no local copy", &mut plain), ("local copy", &mut copied)] {
        println!(
            "checkpoint of {keys} keys ({:.1} MB), {label:<13}: end-to-end median {:.1} ms, task blocked (sync) median {:.3} ms, async write median {:.1} ms",
            bytes as f64 / 1e6,
            ms(median(figures, |f| f.end_to_end)),
            ms(median(figures, |f| f.sync)),
            ms(median(figures, |f| f.write)),
        );
    }
    let (p, c) = (
        median(&mut plain, |f| f.end_to_end),
        median(&mut copied, |f| f.end_to_end),
    );
    println!(
        "the local copy costs {:+.1} ms per checkpoint of {:.1} MB ({:+.0}% end to end), over {runs} runs each",
        ms(c) - ms(p),
        bytes as f64 / 1e6,
        (ms(c) / ms(p).max(1e-9) - 1.0) * 100.0
    );
    Ok(())
}

/// Notes when the first record passes after the job restarted from its checkpoint.
#[derive(Clone)]
struct FirstRecordAfterRestart {
    failed_at: Arc<Mutex<Option<Instant>>>,
    resumed_at: Arc<Mutex<Option<Instant>>>,
    opened_at: Option<Instant>,
}

impl ProcessFunction<(u64, u64), (u64, u64)> for FirstRecordAfterRestart {
    fn open(&mut self, _ctx: &RuntimeContext) -> Result<(), BoxError> {
        self.opened_at = Some(Instant::now());
        Ok(())
    }
    fn process_element(
        &mut self,
        v: (u64, u64),
        _: &mut ProcessContext<'_>,
        out: &mut Collector<'_, (u64, u64)>,
    ) -> Result<(), BoxError> {
        let failed = *self.failed_at.lock().unwrap_or_else(|e| e.into_inner());
        if let (Some(failed), Some(opened)) = (failed, self.opened_at) {
            if opened > failed {
                let mut resumed = self.resumed_at.lock().unwrap_or_else(|e| e.into_inner());
                resumed.get_or_insert_with(Instant::now);
            }
        }
        out.collect(v);
        Ok(())
    }
}

/// Fails a job holding `keys` keys of state right after a checkpoint, and measures the time
/// from the failure until records flow again through the restored keyed operator.
fn recovery(keys: u64) -> Result<()> {
    let dir = ScratchDir::new("recovery")?;
    let config = ExecutionConfig::default()
        .with_parallelism(2)
        .with_checkpointing(checkpointing(&dir.0, Duration::from_millis(300)))
        .with_restart_strategy(RestartStrategyConfig::FixedDelay {
            attempts: 1,
            delay: Duration::ZERO,
        });
    let env = StreamExecutionEnvironment::new(config)?;
    let records = keys * 8;
    let failed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let resumed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let fired = Arc::new(AtomicBool::new(false));
    let (f, fa) = (fired.clone(), failed_at.clone());
    env.generate(records, move |i| i)
        .map(move |i: u64| {
            // Fail once, late in the run, so that a checkpoint of the full state exists.
            if i == records * 3 / 4 && !f.swap(true, Ordering::SeqCst) {
                *fa.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
                panic!("injected failure for the recovery benchmark");
            }
            i % keys
        })
        .key_by(|k: &u64| *k)
        .count()
        .process(FirstRecordAfterRestart {
            failed_at: failed_at.clone(),
            resumed_at: resumed_at.clone(),
            opened_at: None,
        })
        .sink_to(DiscardingSink, "discard");
    let result = env.execute("recovery")?;
    let failed = failed_at
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .context("no failure injected")?;
    let resumed = resumed_at
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .context("records never resumed")?;
    let restored = result
        .checkpoints
        .recent
        .iter()
        .filter(|s| result.restored_from.contains(&s.id))
        .map(|s| s.state_size)
        .max()
        .unwrap_or(0);
    println!(
        "recovery with {keys} keys ({:.1} MB restored from checkpoint {:?}): {:.1} ms from failure to records flowing",
        restored as f64 / 1e6,
        result.restored_from,
        resumed.saturating_duration_since(failed).as_secs_f64() * 1e3
    );
    Ok(())
}

/// Errors print as one line with their causes, never with a backtrace.
fn main() -> std::process::ExitCode {
    weir::cli::exit_code(run())
}

fn run() -> Result<()> {
    let args = Args::parse();
    // Injected failures are expected here: one line each, not a backtrace.
    std::panic::set_hook(Box::new(|info| eprintln!("(injected) {info}")));
    let runs = args.runs.max(1);
    let wanted = |name: &str| args.only.as_deref().is_none_or(|o| name.contains(o));
    println!(
        "cores: {}",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    if wanted("stateless") {
        report(
            "stateless: generator->map->filter->discard p=1",
            args.stateless_records,
            runs,
            || stateless(args.stateless_records),
        )?;
    }
    if wanted("keyed") {
        // Plain and checkpointed runs alternate, so that drift in the machine's load hits
        // both alike.
        let dir = ScratchDir::new("keyed")?;
        let (mut plain, mut checkpointed, mut completed) = (Vec::new(), Vec::new(), 0);
        for _ in 0..runs {
            let (wall, _) = keyed_count(args.keyed_records, args.keys, None)?;
            plain.push(args.keyed_records as f64 / wall.as_secs_f64());
            let (wall, history) = keyed_count(args.keyed_records, args.keys, Some(&dir.0))?;
            checkpointed.push(args.keyed_records as f64 / wall.as_secs_f64());
            completed += history.completed;
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (p, c) = (median(&mut plain), median(&mut checkpointed));
        println!(
            "{:<52} {:>11} records  median {:>7.2} M/s  best {:>7.2} M/s",
            "keyed: generator->key_by->count->discard p=2",
            args.keyed_records,
            p / 1e6,
            plain.last().copied().unwrap_or(0.0) / 1e6
        );
        println!(
            "{:<52} {:>11} records  median {:>7.2} M/s  best {:>7.2} M/s",
            "keyed, exactly-once checkpoints every 1 s (fs)",
            args.keyed_records,
            c / 1e6,
            checkpointed.last().copied().unwrap_or(0.0) / 1e6
        );
        println!(
            "checkpoint overhead: {:.1}% of median throughput ({completed} checkpoints over {runs} runs)",
            (1.0 - c / p) * 100.0
        );
    }
    if wanted("large-state") {
        local_copy_cost(args.state_keys, runs)?;
    }
    if wanted("recovery") {
        recovery(args.state_keys)?;
    }
    Ok(())
}
