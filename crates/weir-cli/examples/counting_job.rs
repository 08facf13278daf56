//! A job to try the `weir` command line on: numbers at a set rate, counted per key at
//! parallelism 2, the counts written exactly once (two-phase commit) as files, checkpointed
//! into `--work-dir`. It takes the cluster and configuration flags of every Weir job
//! (`-D key=value`, `--config`, `--role`).
//!
//! ```text
//! cargo run -p weir-cli --example counting_job -- --work-dir /tmp/counting -D rest.port=8081
//! weir list
//! ```

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use weir::prelude::*;

#[derive(Parser, Debug)]
struct Args {
    /// Numbers to count.
    #[arg(long, default_value_t = 100_000)]
    records: u64,
    /// Numbers per second.
    #[arg(long, default_value_t = 5_000.0)]
    rate: f64,
    /// Where the output and the checkpoints go.
    #[arg(long)]
    work_dir: PathBuf,
    /// Never read the last N numbers of each of the source's splits, so that the job does
    /// not finish and runs until it is stopped or cancelled (for tests that must act on a
    /// running job, whatever the machine's speed).
    #[arg(long, default_value_t = 0)]
    hold_last: u64,
    #[command(flatten)]
    cluster: weir_cluster::ClusterArgs,
}

fn main() -> std::process::ExitCode {
    weir::cli::exit_code(run())
}

fn run() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "weir=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let env = StreamExecutionEnvironment::new(
        ExecutionConfig::default()
            .with_parallelism(2)
            .with_checkpointing(
                CheckpointConfig::default()
                    .with_interval(Duration::from_millis(200))
                    .with_storage(CheckpointStorageConfig::directory(
                        args.work_dir.join("checkpoints"),
                    )),
            ),
    )?;
    let records = args.records;
    let numbers = GeneratorSource::new(records, |i| i).with_rate_limit(args.rate);
    let numbers = if args.hold_last > 0 {
        numbers.with_held_tail(args.hold_last, || false)
    } else {
        numbers
    };
    env.from_source(numbers, WatermarkStrategy::no_watermarks(), "numbers")
        .uid("numbers")
        .key_by(|i: &u64| i % 10)
        .count()
        .uid("counts")
        .map(|(key, count): (u64, u64)| format!("{key},{count}"))
        .sink_to(
            FileSink::<String>::lines(args.work_dir.join("output")).into_two_phase_commit_sink(),
            "count files",
        )
        .uid("count-files");
    weir_cluster::apply(&args.cluster, &env)?;
    let result = env.execute("counting")?;
    println!("{result}");
    Ok(())
}
