//! The reference pipeline as a command: Kafka words → key_by → running count → Kafka, with
//! checkpoints on the filesystem so that a killed run can be resumed with `--resume`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use weir_kafka::word_count::{self, WordCountOptions};
use weir_kafka::DeliveryGuarantee;

/// Command-line options.
#[derive(Parser, Debug)]
#[command(about = "Exactly-once word count: Kafka -> key_by -> count -> Kafka")]
struct Args {
    /// Kafka bootstrap servers.
    #[arg(long, env = "WEIR_KAFKA_BOOTSTRAP", default_value = "127.0.0.1:9092")]
    bootstrap: String,
    /// Input topic (one word per record value).
    #[arg(long)]
    input: String,
    /// Output topic (key = word, value = running count).
    #[arg(long)]
    output: String,
    /// Delivery guarantee of the sink: none, at_least_once or exactly_once.
    #[arg(long, default_value = "exactly_once")]
    guarantee: String,
    /// Parallelism.
    #[arg(long, default_value_t = 2)]
    parallelism: u32,
    /// Checkpoint interval in milliseconds.
    #[arg(long, default_value_t = 500)]
    checkpoint_interval_ms: u64,
    /// Working directory (checkpoints); the job is reset there (`weir reset`) unless --resume.
    #[arg(long, default_value = "target/kafka-count")]
    work_dir: PathBuf,
    /// Resume from the latest retained checkpoint.
    #[arg(long)]
    resume: bool,
    /// Words per second (a throttle; 0: none).
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Keep running after the input's current end (default: stop there).
    #[arg(long)]
    unbounded: bool,
    /// Transactional id prefix (default: derived from the output topic).
    #[arg(long)]
    transactional_id_prefix: Option<String>,
    /// Kill this process with SIGKILL right before its first transaction commit, after the
    /// checkpoint completed (fault injection for tests).
    #[arg(long)]
    kill_before_commit: bool,
    /// Stop this process (SIGSTOP) right before its N-th transaction commit (counted over
    /// all subtasks), as a stalled process would: zombie tests continue it later.
    #[arg(long, value_name = "N")]
    stop_before_commit: Option<u64>,
    /// Timeout of the sink's flush, commit and fencing calls, in milliseconds.
    #[arg(long, default_value_t = 60_000)]
    operation_timeout_ms: u64,
    /// Keep no second copy of checkpoint files (by default they are copied to
    /// <work-dir>/local-recovery).
    #[arg(long)]
    no_local_recovery: bool,
    /// Hold the end of the input until this file exists: every record is read, but the job
    /// does not finish before (for tests that kill or stop a running job).
    #[arg(long, value_name = "FILE")]
    hold_end_until: Option<std::path::PathBuf>,
    /// A client property for the source and the sink, as librdkafka names it
    /// (`security.protocol=ssl`, `ssl.ca.location=ca.pem`, …); repeatable.
    #[arg(long = "kafka-property", value_name = "KEY=VALUE", value_parser = parse_property)]
    kafka_properties: Vec<(String, String)>,
    /// Cluster mode (`--role jobmanager|taskmanager`): every process gets the same job
    /// options; none resets the job, and the JobManager resumes from its work directory.
    #[command(flatten)]
    cluster: weir_cluster::ClusterArgs,
}

fn parse_property(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_string(), value.to_string()))
        }
        _ => Err("expected KEY=VALUE".into()),
    }
}

/// Errors print as one line with their causes, never with a backtrace.
fn main() -> std::process::ExitCode {
    weir::cli::exit_code(run())
}

fn run() -> Result<()> {
    weir::cli::init_logging();
    let args = Args::parse();
    let checkpoints = args.work_dir.join("checkpoints");
    let local_recovery = args.work_dir.join("local-recovery");
    let mut options = WordCountOptions::new(&args.bootstrap, &args.input, &args.output);
    options.guarantee = args.guarantee.parse::<DeliveryGuarantee>()?;
    if let Some(prefix) = args.transactional_id_prefix {
        options.transactional_id_prefix = prefix;
    }
    options.parallelism = args.parallelism;
    options.checkpoint_interval = Duration::from_millis(args.checkpoint_interval_ms);
    options.checkpoint_dir = Some(checkpoints);
    options.resume = args.resume;
    options.hold_end_until = args.hold_end_until.clone();
    options.bounded = !args.unbounded;
    options.rate = (args.rate > 0.0).then_some(args.rate);
    options.operation_timeout = Duration::from_millis(args.operation_timeout_ms);
    options.local_recovery = (!args.no_local_recovery).then_some(local_recovery);
    options.properties = args.kafka_properties.iter().cloned().collect();
    if args.kill_before_commit {
        options.before_commit = Some(Arc::new(|checkpoint_id, transactional_id| {
            eprintln!("kafka-count: killing myself before committing {transactional_id} (checkpoint {checkpoint_id})");
            // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }));
    }
    if let Some(n) = args.stop_before_commit {
        let calls = std::sync::atomic::AtomicU64::new(0);
        options.before_commit = Some(Arc::new(move |checkpoint_id, transactional_id| {
            if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == n {
                eprintln!("kafka-count: stopping myself before committing {transactional_id} (checkpoint {checkpoint_id})");
                // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
                unsafe {
                    libc::kill(libc::getpid(), libc::SIGSTOP);
                }
            }
        }));
    }
    let env = word_count::build(&options)?;
    weir_cluster::apply(&args.cluster, &env)?;
    let resumes = args.resume || env.config().resume_from_latest_checkpoint;
    if !resumes && args.cluster.role.is_none() && env.config().restore.is_none() {
        // Starts over through a reset: never under a process that still holds the job.
        weir::checkpoint::reset::reset_job(&env.config().checkpoint, word_count::JOB_NAME, &[])
            .context("starting the job over (--resume continues it instead)")?;
    }
    let result = env.execute(word_count::JOB_NAME)?;
    let records = result
        .operator("Source: words")
        .map_or(0, |o| o.records_out);
    println!(
        "kafka-count: {:?}: {records} words in {:.2?}, {} checkpoints, {} restarts",
        result.status, result.wall_time, result.checkpoints.completed, result.restarts
    );
    Ok(())
}
