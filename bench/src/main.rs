//! Throughput benchmarks of the core runtime, printing records/s.
//!
//! Run with `cargo run --release -p weir-bench`. Each workload runs `--runs` times and the
//! best and median rates are printed; the machine is shared, so take the figures as a range.

use std::time::Duration;

use anyhow::Result;
use clap::Parser;
use weir::connectors::discard::DiscardingSink;
use weir::{ExecutionConfig, StreamExecutionEnvironment};

/// Command-line options.
#[derive(Parser, Debug)]
struct Args {
    /// Records for the stateless pipeline.
    #[arg(long, default_value_t = 200_000_000)]
    stateless_records: u64,
    /// Records for the keyed count.
    #[arg(long, default_value_t = 30_000_000)]
    keyed_records: u64,
    /// Distinct keys in the keyed count.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Runs per workload.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Only run workloads whose name contains this.
    #[arg(long)]
    only: Option<String>,
}

/// generator → map → filter → discard, chained in one task at parallelism 1.
fn stateless(records: u64) -> Result<Duration> {
    let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
    env.generate(records, |i| i)
        .map(|x: u64| x.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .filter(|x| x & 1 == 0)
        .sink_to(DiscardingSink, "discard");
    Ok(env.execute("stateless")?.wall_time)
}

/// generator → key_by → count → discard at parallelism 2: a real shuffle between subtasks.
fn keyed_count(records: u64, keys: u64) -> Result<Duration> {
    let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))?;
    env.generate(records, move |i| {
        i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % keys
    })
    .key_by(|k: &u64| *k)
    .count()
    .sink_to(DiscardingSink, "discard");
    Ok(env.execute("keyed count")?.wall_time)
}

fn report(
    name: &str,
    records: u64,
    runs: usize,
    mut run: impl FnMut() -> Result<Duration>,
) -> Result<()> {
    let mut rates = Vec::with_capacity(runs);
    for _ in 0..runs {
        let wall = run()?;
        rates.push(records as f64 / wall.as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    let best = rates.last().copied().unwrap_or(0.0);
    let median = rates[rates.len() / 2];
    println!(
        "{name:<48} {records:>12} records  best {:>7.2} M/s  median {:>7.2} M/s",
        best / 1e6,
        median / 1e6
    );
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse();
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
        report(
            "keyed: generator->key_by->count->discard p=2",
            args.keyed_records,
            runs,
            || keyed_count(args.keyed_records, args.keys),
        )?;
    }
    Ok(())
}
