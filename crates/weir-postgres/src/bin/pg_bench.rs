//! Rows per second into PostgreSQL for each sink: generated words → key_by → running count →
//! table (one row per word read), checkpoints every second, the table checked afterwards.

use std::time::Duration;

use anyhow::{bail, Result};
use clap::Parser;
use weir_postgres::word_count::{self, Delivery, WordCountOptions};

/// Command-line options.
#[derive(Parser, Debug)]
#[command(about = "PostgreSQL sink throughput")]
struct Args {
    /// Connection string.
    #[arg(
        long,
        env = "WEIR_POSTGRES_URL",
        default_value = "postgresql://postgres@127.0.0.1/postgres"
    )]
    url: String,
    /// Rows (words) per run.
    #[arg(long, default_value_t = 500_000)]
    records: u64,
    /// Distinct words (keys).
    #[arg(long, default_value_t = 10_000)]
    words: u64,
    /// Parallelism.
    #[arg(long, default_value_t = 2)]
    parallelism: u32,
    /// Rows per statement.
    #[arg(long, default_value_t = 5000)]
    batch_size: usize,
    /// Deliveries to measure, comma-separated.
    #[arg(long, default_value = "upsert,exactly-once-upsert,exactly-once-append")]
    deliveries: String,
}

/// Errors print as one line with their causes, never with a backtrace.
fn main() -> std::process::ExitCode {
    weir::cli::exit_code(run())
}

fn run() -> Result<()> {
    weir::cli::init_logging();
    let args = Args::parse();
    println!(
        "{} rows, {} keys, parallelism {}, {} rows per statement",
        args.records, args.words, args.parallelism, args.batch_size
    );
    println!(
        "{:<22} {:>10} {:>12} {:>12} {:>9}",
        "sink", "wall", "rows/s", "checkpoints", "verified"
    );
    for name in args.deliveries.split(',') {
        let delivery: Delivery = name.trim().parse()?;
        let table = format!(
            "bench_{}_{}",
            name.trim().replace('-', "_"),
            std::process::id()
        );
        word_count::create_table(&args.url, &table, delivery != Delivery::ExactlyOnceAppend)?;
        let mut options = WordCountOptions::new(&args.url, &table);
        options.delivery = delivery;
        options.records = args.records;
        options.words = args.words;
        options.parallelism = args.parallelism;
        options.batch_size = args.batch_size;
        options.checkpoint_interval = Duration::from_secs(1);
        let result = word_count::build(&options)?.execute(word_count::JOB_NAME)?;
        let rows = word_count::table_rows(&args.url, &table)?;
        let expected = word_count::expected_totals(args.records, args.words);
        let verdict = if delivery == Delivery::ExactlyOnceAppend {
            word_count::verify_running_counts(&rows, &expected)
        } else {
            word_count::verify_totals(&rows, &expected)
        };
        if let Err(problems) = verdict {
            bail!("{name}: table {table} is wrong: {problems}");
        }
        println!(
            "{:<22} {:>10.2?} {:>12.0} {:>12} {:>9}",
            name.trim(),
            result.wall_time,
            args.records as f64 / result.wall_time.as_secs_f64(),
            result.checkpoints.completed,
            "yes"
        );
    }
    Ok(())
}
