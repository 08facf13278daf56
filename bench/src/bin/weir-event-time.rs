//! Event-time benchmarks of the Weir runtime (generated records, no I/O), printing their
//! figures: windowed aggregation throughput, timers fired per second, and the size of window
//! state per key in a checkpoint. Each figure is measured in its own job, `--runs` times
//! (best and median are printed); the machine is shared, so take them as a range.
//!
//! `cargo run --release -p weir-bench --bin weir-event-time [-- --records N --keys K]`

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;
use weir::prelude::*;
use weir::windowing::{SlidingEventTimeWindows, TumblingEventTimeWindows};
use weir_bench::process_usage;

/// Command-line options.
#[derive(Parser, Debug)]
struct Args {
    /// Records per throughput run.
    #[arg(long, default_value_t = 10_000_000)]
    records: u64,
    /// Distinct keys.
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// Runs per figure.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Parallelism.
    #[arg(long, default_value_t = 1)]
    parallelism: u32,
}

#[derive(Clone)]
struct Count;

impl AggregateFunction<(u64, i64), u64, u64> for Count {
    fn create_accumulator(&self) -> u64 {
        0
    }
    fn add(&self, _: (u64, i64), acc: &mut u64) {
        *acc += 1;
    }
    fn get_result(&self, acc: &u64) -> u64 {
        *acc
    }
    fn merge(&self, a: u64, b: u64) -> u64 {
        a + b
    }
}

/// Sets an event-time timer one millisecond after each record (each key's records are 100 ms
/// of event time apart, so every timer is its own); counts the firings.
#[derive(Clone)]
struct TimerPerRecord;

impl KeyedProcessFunction<u64, (u64, i64), u64> for TimerPerRecord {
    fn process_element(
        &mut self,
        (_, t): (u64, i64),
        ctx: &mut KeyedContext<'_, u64>,
        _: &mut Collector<'_, u64>,
    ) -> Result<(), BoxError> {
        Ok(ctx.timer_service().register_event_time_timer(t + 1)?)
    }
    fn on_timer(
        &mut self,
        _: i64,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<'_, u64>,
    ) -> Result<(), BoxError> {
        out.collect(*ctx.current_key());
        Ok(())
    }
}

fn env(args: &Args) -> Result<StreamExecutionEnvironment> {
    StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(args.parallelism))
        .context("invalid configuration")
}

/// `(key, timestamp)` records, 100 per millisecond of event time, keys round-robin, with
/// periodic watermarks (every 200 ms of processing time, Flink's default).
fn events(env: &StreamExecutionEnvironment, args: &Args) -> DataStream<(u64, i64)> {
    let keys = args.keys;
    env.from_source(
        GeneratorSource::new(args.records, move |i| (i % keys, (i / 100) as i64)),
        WatermarkStrategy::for_monotonous_timestamps()
            .with_timestamp_assigner(|e: &(u64, i64), _| e.1),
        "events",
    )
}

/// Runs a job; returns (wall seconds, CPU seconds, the named operator's records in/out).
fn measure(
    env: &StreamExecutionEnvironment,
    name: &str,
    operator: &str,
) -> Result<(f64, f64, u64, u64)> {
    let cpu_before = process_usage::current().cpu_seconds;
    let started = Instant::now();
    let result = env.execute(name)?;
    let wall = started.elapsed().as_secs_f64();
    let cpu = process_usage::current().cpu_seconds - cpu_before;
    let op = result
        .operators
        .iter()
        .find(|o| o.name.starts_with(operator))
        .with_context(|| format!("no operator `{operator}` in the result"))?;
    Ok((wall, cpu, op.records_in, op.records_out))
}

fn best_and_median(mut rates: Vec<f64>) -> (f64, f64) {
    rates.sort_by(|a, b| b.total_cmp(a));
    (rates[0], rates[rates.len() / 2])
}

fn windowed_aggregation(args: &Args) -> Result<()> {
    let mut rates = Vec::new();
    let mut per_cpu = Vec::new();
    let mut fired = 0;
    for _ in 0..args.runs {
        let env = env(args)?;
        events(&env, args)
            .key_by(|e: &(u64, i64)| e.0)
            .window(TumblingEventTimeWindows::of(Duration::from_secs(1)))
            .aggregate(Count)
            .sink_to(DiscardingSink, "out");
        let (wall, cpu, records_in, out) = measure(&env, "windowed aggregation", "Window(")?;
        rates.push(records_in as f64 / wall);
        per_cpu.push(records_in as f64 / cpu);
        fired = out;
    }
    let (best, median) = best_and_median(rates);
    let (cpu_best, _) = best_and_median(per_cpu);
    println!(
        "windowed aggregation (tumbling 1 s, count, {} keys): {:.2} M records/s best, {:.2} M median, \
         {:.2} M records per CPU-second; {fired} window results",
        args.keys,
        best / 1e6,
        median / 1e6,
        cpu_best / 1e6
    );
    Ok(())
}

fn timers(args: &Args) -> Result<()> {
    let mut rates = Vec::new();
    let mut fired = 0;
    for _ in 0..args.runs {
        let env = env(args)?;
        events(&env, args)
            .key_by(|e: &(u64, i64)| e.0)
            .process(TimerPerRecord)
            .sink_to(DiscardingSink, "out");
        let (wall, _, _, out) = measure(&env, "timers", "Keyed Process")?;
        rates.push(out as f64 / wall);
        fired = out;
    }
    let (best, median) = best_and_median(rates);
    println!(
        "event-time timers (one per record, fired as periodic watermarks pass them): {:.2} M \
         timers registered and fired/s best, {:.2} M median ({fired} per run)",
        best / 1e6,
        median / 1e6
    );
    Ok(())
}

fn window_state_size(args: &Args) -> Result<()> {
    // Every key holds its sliding windows open (no watermark passes them) when a savepoint
    // is taken: its size over the keys is the window state per key.
    let dir = std::env::temp_dir().join(format!("weir-event-time-{}", std::process::id()));
    let config = ExecutionConfig::default()
        .with_parallelism(args.parallelism)
        .with_checkpointing(
            CheckpointConfig::default().with_storage(CheckpointStorageConfig::directory(&dir)),
        );
    let env = StreamExecutionEnvironment::new(config)?;
    let keys = args.keys;
    env.from_source(
        GeneratorSource::unbounded(move |i| (i % keys, (i % 1_000) as i64))
            .with_rate_limit(2_000_000.0),
        WatermarkStrategy::for_monotonous_timestamps()
            .with_timestamp_assigner(|e: &(u64, i64), _| e.1),
        "events",
    )
    .key_by(|e: &(u64, i64)| e.0)
    .window(SlidingEventTimeWindows::of(
        Duration::from_secs(10),
        Duration::from_secs(5),
    ))
    .aggregate(Count)
    .sink_to(DiscardingSink, "out");
    let client = env.execute_async("window state")?;
    std::thread::sleep(Duration::from_secs(2));
    let savepoint = client.trigger_savepoint()?;
    let bytes: u64 = walk_size(savepoint.path())?;
    let result = client.cancel()?;
    let _ = std::fs::remove_dir_all(&dir);
    let held = result
        .operators
        .iter()
        .find(|o| o.name.starts_with("Window("))
        .map_or(0, |o| o.records_in);
    println!(
        "window state (sliding 10 s / 5 s, count per window, {keys} keys, {held} records in): \
         {bytes} bytes in the savepoint, {:.1} bytes per key (two open windows each)",
        bytes as f64 / keys as f64
    );
    Ok(())
}

fn walk_size(path: &std::path::Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(path).with_context(|| format!("listing {}", path.display()))? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            walk_size(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

fn main() -> Result<()> {
    let args = Args::parse();
    windowed_aggregation(&args)?;
    timers(&args)?;
    window_state_size(&args)?;
    Ok(())
}
