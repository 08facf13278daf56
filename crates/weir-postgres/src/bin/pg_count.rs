//! The reference pipeline into PostgreSQL as a command: generated words → key_by → running
//! count → table, with checkpoints on the filesystem so that a killed run can be resumed
//! with `--resume`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use weir_postgres::word_count::{self, Delivery, WordCountOptions};

/// Command-line options.
#[derive(Parser, Debug)]
#[command(about = "Word count into PostgreSQL, exactly once (two-phase commit) or by upserts")]
struct Args {
    /// Connection string.
    #[arg(
        long,
        env = "WEIR_POSTGRES_URL",
        hide_env_values = true,
        default_value = "postgresql://postgres@127.0.0.1/postgres"
    )]
    url: String,
    /// Output table (created if missing).
    #[arg(long, default_value = "word_counts")]
    table: String,
    /// exactly-once-append, exactly-once-upsert or upsert.
    #[arg(long, default_value = "exactly-once-append")]
    delivery: String,
    /// Words to generate.
    #[arg(long, default_value_t = 20_000)]
    records: u64,
    /// Distinct words.
    #[arg(long, default_value_t = 300)]
    words: u64,
    /// Words per second (0: no limit).
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Parallelism.
    #[arg(long, default_value_t = 2)]
    parallelism: u32,
    /// Checkpoint interval in milliseconds.
    #[arg(long, default_value_t = 200)]
    checkpoint_interval_ms: u64,
    /// Working directory (checkpoints); the job is reset there (`weir reset`) unless --resume.
    #[arg(long, default_value = "target/pg-count")]
    work_dir: PathBuf,
    /// Resume from the latest retained checkpoint.
    #[arg(long)]
    resume: bool,
    /// Kill this process with SIGKILL right before its first COMMIT PREPARED (after the
    /// checkpoint completed).
    #[arg(long)]
    kill_before_commit: bool,
    /// Stop this process (SIGSTOP) right before its N-th PREPARE TRANSACTION (counted over
    /// all subtasks), as a stalled process would: zombie tests continue it later.
    #[arg(long, value_name = "N")]
    stop_before_prepare: Option<u64>,
    /// Stop this process (SIGSTOP) right before its N-th COMMIT PREPARED.
    #[arg(long, value_name = "N")]
    stop_before_commit: Option<u64>,
    /// Keep no second copy of checkpoint files (by default they are copied to
    /// <work-dir>/local-recovery).
    #[arg(long)]
    no_local_recovery: bool,
    /// Hold the end of the input until this file exists: every record is read, but the job
    /// does not finish before (for tests that kill or stop a running job).
    #[arg(long, value_name = "FILE")]
    hold_end_until: Option<std::path::PathBuf>,
    /// Cluster mode (`--role jobmanager|taskmanager`): every process gets the same job
    /// options; none resets the job, and the JobManager resumes from its work directory.
    #[command(flatten)]
    cluster: weir_cluster::ClusterArgs,
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
    let delivery: Delivery = args.delivery.parse()?;
    // In a cluster, only the JobManager sets up the table (concurrent CREATE TABLE IF NOT
    // EXISTS statements race in PostgreSQL); TaskManagers only write to it.
    if args.cluster.role != Some(weir_cluster::Role::Taskmanager) {
        word_count::create_table(
            &args.url,
            &args.table,
            delivery != Delivery::ExactlyOnceAppend,
        )?;
    }
    let mut options = WordCountOptions::new(&args.url, &args.table);
    options.delivery = delivery;
    options.records = args.records;
    options.words = args.words;
    options.rate = (args.rate > 0.0).then_some(args.rate);
    options.parallelism = args.parallelism;
    options.checkpoint_interval = Duration::from_millis(args.checkpoint_interval_ms);
    options.checkpoint_dir = Some(checkpoints);
    options.resume = args.resume;
    options.hold_end_until = args.hold_end_until.clone();
    options.local_recovery = (!args.no_local_recovery).then_some(local_recovery);
    if args.kill_before_commit {
        options.before_commit = Some(Arc::new(|gid| {
            eprintln!("pg-count: killing myself before COMMIT PREPARED '{gid}'");
            // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }));
    }
    if let Some(n) = args.stop_before_prepare {
        options.before_prepare = Some(stop_before("PREPARE TRANSACTION", n));
    }
    if let Some(n) = args.stop_before_commit {
        options.before_commit = Some(stop_before("COMMIT PREPARED", n));
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
    println!(
        "pg-count: {:?} in {:.2?}, {} checkpoints, {} restarts",
        result.status, result.wall_time, result.checkpoints.completed, result.restarts
    );
    Ok(())
}

/// A hook that stops this process (SIGSTOP) when it is called the `n`-th time.
fn stop_before(what: &'static str, n: u64) -> weir_postgres::settings::BeforeCommitHook {
    let calls = std::sync::atomic::AtomicU64::new(0);
    Arc::new(move |gid| {
        if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == n {
            eprintln!("pg-count: stopping myself before {what} '{gid}'");
            // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGSTOP);
            }
        }
    })
}
