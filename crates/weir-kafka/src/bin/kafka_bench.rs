//! Throughput of Kafka → key_by → count → Kafka, per delivery guarantee, against the broker
//! at `--bootstrap`. Produces the input once, runs the bounded pipeline once per guarantee
//! into a fresh output topic, checks the output and prints records/s.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use weir_kafka::client_config::KafkaConnection;
use weir_kafka::word_count::{self, WordCountOptions};
use weir_kafka::DeliveryGuarantee;

/// Command-line options.
#[derive(Parser, Debug)]
#[command(about = "Kafka -> keyed count -> Kafka throughput")]
struct Args {
    /// Kafka bootstrap servers.
    #[arg(long, env = "WEIR_KAFKA_BOOTSTRAP", default_value = "127.0.0.1:9092")]
    bootstrap: String,
    /// Input records.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Distinct words (keys).
    #[arg(long, default_value_t = 10_000)]
    words: u64,
    /// Partitions of the input and output topics.
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    /// Parallelism of the job.
    #[arg(long, default_value_t = 2)]
    parallelism: u32,
    /// Checkpoint interval in milliseconds.
    #[arg(long, default_value_t = 1000)]
    checkpoint_interval_ms: u64,
    /// Guarantees to measure, comma-separated.
    #[arg(long, default_value = "exactly_once,at_least_once")]
    guarantees: String,
    /// Skip reading back and checking the output.
    #[arg(long)]
    no_verify: bool,
}

/// Errors print as one line with their causes, never with a backtrace.
fn main() -> std::process::ExitCode {
    weir::cli::exit_code(run())
}

fn run() -> Result<()> {
    weir::cli::init_logging();
    let args = Args::parse();
    let run_id = std::process::id();
    let input = format!("bench-words-{run_id}");
    let started = Instant::now();
    let expected = word_count::produce_words(
        &args.bootstrap,
        &input,
        args.partitions,
        args.records,
        args.words,
    )
    .context("producing the input")?;
    let produce_time = started.elapsed();
    println!(
        "input: {} records, {} words, {} partitions, produced in {:.2?} ({:.0} records/s)",
        args.records,
        args.words,
        args.partitions,
        produce_time,
        args.records as f64 / produce_time.as_secs_f64()
    );
    println!(
        "{:<14} {:>12} {:>14} {:>12} {:>10}",
        "guarantee", "wall", "records/s", "checkpoints", "verified"
    );
    for name in args.guarantees.split(',') {
        let guarantee: DeliveryGuarantee = name.trim().parse()?;
        let output = format!("bench-counts-{run_id}-{}", name.trim());
        weir_kafka::admin::ensure_topic(
            &KafkaConnection::new(args.bootstrap.clone()),
            &output,
            args.partitions,
        )?;
        let mut options = WordCountOptions::new(&args.bootstrap, &input, &output);
        options.guarantee = guarantee;
        options.parallelism = args.parallelism;
        options.checkpoint_interval = Duration::from_millis(args.checkpoint_interval_ms);
        options.transactional_id_prefix = format!("bench-{run_id}");
        let env = word_count::build(&options)?;
        let result = env.execute(word_count::JOB_NAME)?;
        let verified = if args.no_verify {
            "skipped".to_string()
        } else {
            let committed =
                word_count::committed_counts(&args.bootstrap, &output, args.partitions)?;
            let exactly = guarantee == DeliveryGuarantee::ExactlyOnce;
            match word_count::verify_counts(&committed, &expected, exactly) {
                Ok(()) => "yes".to_string(),
                Err(problems) => bail!("{name}: output is wrong: {problems}"),
            }
        };
        println!(
            "{:<14} {:>12.2?} {:>14.0} {:>12} {:>10}",
            name.trim(),
            result.wall_time,
            args.records as f64 / result.wall_time.as_secs_f64(),
            result.checkpoints.completed,
            verified
        );
    }
    Ok(())
}
