//! Weir's main example job (README command 1): exactly-once aggregation of census rows with
//! the file source, keyed state and the transactional file sink, checkpointing every second,
//! surviving an injected failure — and proving that the committed output is exactly what an
//! uninterrupted computation gives.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use weir::checkpoint::reset::reset_job;
use weir_examples::census::{self, CensusOptions, SinkKind};

/// Command-line options.
#[derive(Parser, Debug)]
#[command(
    about = "Exactly-once census aggregation: file source -> keyed state -> transactional file sink"
)]
struct Args {
    /// Directory of the census CSV files.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/data/census"))]
    data: PathBuf,
    /// Working directory for output and checkpoints. Unless --resume (or a restore path) is
    /// given, the job starts over there: an earlier run is reset (`weir reset`: refused
    /// while another process holds the job; its output and checkpoints removed).
    #[arg(long, default_value = "target/census")]
    work_dir: PathBuf,
    /// Parallelism.
    #[arg(long, default_value_t = 2)]
    parallelism: u32,
    /// Rows read per second (a throttle, so that checkpoints happen during the demo).
    #[arg(long, default_value_t = 8_000.0)]
    rate: f64,
    /// Fail once after this many rows (0: never).
    #[arg(long, default_value_t = 10_000)]
    fail_after_rows: u64,
    /// Resume from the latest retained checkpoint (like Flink's `run -s` after a crash).
    #[arg(long)]
    resume: bool,
    /// Checkpoint interval in milliseconds.
    #[arg(long, default_value_t = 1000)]
    checkpoint_interval_ms: u64,
    /// Pause before each commit, in milliseconds (for process-kill tests).
    #[arg(long, default_value_t = 0)]
    commit_delay_ms: u64,
    /// Print only the verification line.
    #[arg(long)]
    quiet: bool,
    /// The exactly-once sink: `2pc` (transactional file sink) or `wal` (write-ahead log).
    #[arg(long, default_value = "2pc", value_parser = ["2pc", "wal"])]
    sink: String,
    /// Keep no second copy of checkpoint files (by default they are copied to
    /// <work-dir>/local-recovery, so that a damaged file does not make a checkpoint
    /// unrestorable).
    #[arg(long)]
    no_local_recovery: bool,
    /// When the checkpoint to restore is unusable, fall back to an older one even though
    /// its output is committed already (`recovery.fallback-on-corrupt-checkpoint:
    /// allow-duplicates`).
    #[arg(long)]
    allow_duplicates: bool,
    /// Stop with a savepoint after reading this many rows (0: never); `--resume` then
    /// continues from the savepoint.
    #[arg(long, default_value_t = 0)]
    stop_after_rows: u64,
    /// Unaligned checkpoints: barriers overtake the records in flight, which are stored
    /// with the checkpoint (`execution.checkpointing.unaligned.enabled`).
    #[arg(long)]
    unaligned: bool,
    /// Pause this many microseconds after every aggregated row (0: none), to create
    /// backpressure.
    #[arg(long, default_value_t = 0)]
    slow_aggregation_us: u64,
    /// Pass rows that cannot be decoded on as dead letters, committed exactly once as JSON
    /// lines into <work-dir>/dead-letters (by default such a row fails the job).
    #[arg(long)]
    dead_letters: bool,
    /// Panic on every row of this occupation, in the aggregation (a poison record: the
    /// restart strategy gives up, naming where the row was read).
    #[arg(long)]
    poison_occupation: Option<String>,
    /// Hold the end of the input until this file exists: every row is read and committed,
    /// but the job does not finish before (for tests that kill or stop a running job).
    #[arg(long, value_name = "FILE")]
    hold_end_until: Option<PathBuf>,
    /// Checkpoint storage at a URL instead of <work-dir>/checkpoints: `s3://bucket/prefix`
    /// (S3 or an S3-compatible server, configured by AWS_ENDPOINT, AWS_ACCESS_KEY_ID, …),
    /// `gs://…`, `az://…`, or `file:///dir`. Needs --no-local-recovery.
    #[arg(long)]
    checkpoint_storage: Option<String>,
    /// Cluster mode: run this process as the JobManager or a TaskManager of the job (see
    /// `--role`). Every process of a cluster is started with the same job options; none of
    /// them resets the job, and a JobManager resumes the job from its newest
    /// checkpoint there.
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
    // The injected failure is part of the demo: one line, not a backtrace.
    std::panic::set_hook(Box::new(|info| eprintln!("census: {info}")));
    let mut options = CensusOptions::new(args.data.clone(), &args.work_dir);
    options.sink = if args.sink == "wal" {
        SinkKind::WriteAheadLog
    } else {
        SinkKind::TwoPhaseCommit
    };
    options.parallelism = args.parallelism;
    options.rate = args.rate;
    options.fail_after_rows = (args.fail_after_rows > 0).then_some(args.fail_after_rows);
    options.resume = args.resume;
    options.checkpoint_interval = Duration::from_millis(args.checkpoint_interval_ms);
    options.commit_delay =
        (args.commit_delay_ms > 0).then(|| Duration::from_millis(args.commit_delay_ms));
    options.allow_duplicates = args.allow_duplicates;
    options.stop_after_rows = (args.stop_after_rows > 0).then_some(args.stop_after_rows);
    options.unaligned = args.unaligned;
    options.slow_aggregation =
        (args.slow_aggregation_us > 0).then(|| Duration::from_micros(args.slow_aggregation_us));
    let dead_letters = args.work_dir.join("dead-letters");
    options.dead_letters = args.dead_letters.then(|| dead_letters.clone());
    options.poison_occupation = args.poison_occupation.clone();
    options.hold_end_until = args.hold_end_until.clone();
    let local_recovery = args.work_dir.join("local-recovery");
    options.local_recovery = (!args.no_local_recovery).then(|| local_recovery.clone());
    options.checkpoint_storage = args.checkpoint_storage.clone();
    let role = args.cluster.role;
    let (env, rows_read) = census::build_with_progress(&options)?;
    weir_cluster::apply(&args.cluster, &env)?;
    // The demo starts over unless asked to resume or restore: through a reset, which takes
    // the job's lock (so never under a process that still holds the job, running or
    // stalled), records the reset, and then removes what the earlier runs wrote by the
    // epoch in its names — never by deleting the work directory.
    let resumes = args.resume || env.config().resume_from_latest_checkpoint;
    if !resumes && role.is_none() && env.config().restore.is_none() {
        let outputs = [options.output.as_path(), dead_letters.as_path()];
        let reset = reset_job(&env.config().checkpoint, census::JOB_NAME, &outputs)
            .context("starting the census job over (--resume continues it instead)")?;
        if reset.previous.is_some() && !args.quiet {
            println!("Starting over: {reset}.");
        }
    }
    if !args.quiet && role != Some(weir_cluster::Role::Taskmanager) {
        println!("{}", env.explain(census::JOB_NAME)?);
    }
    let result = match census::execute(&env, &options, &rows_read) {
        Ok(result) => result,
        Err(error) => {
            // Where the record the job failed on was read, as a value a script can act on
            // (fix that line, or skip it): the same in cluster mode as in one process.
            let origin = error
                .downcast_ref::<weir::WeirError>()
                .and_then(weir::WeirError::record_origin);
            if let Some(origin) = origin {
                eprintln!("census: failing record {}", serde_json::to_string(origin)?);
            }
            let malformed = error
                .downcast_ref::<weir::WeirError>()
                .and_then(weir::WeirError::malformed_record);
            if let Some(record) = malformed {
                eprintln!(
                    "census: malformed record {}",
                    serde_json::to_string(record)?
                );
            }
            return Err(error);
        }
    };
    if role == Some(weir_cluster::Role::Taskmanager) {
        println!("TaskManager: job `{}` {:?}", result.job_name, result.status);
        return Ok(());
    }
    if let Some(savepoint) = &result.savepoint {
        println!(
            "Stopped with savepoint {savepoint} after {} rows; `--resume` continues from it.",
            rows_read.load(std::sync::atomic::Ordering::SeqCst)
        );
        return Ok(());
    }
    let verification = census::verify(&options.output, &args.data)?;
    if !args.quiet {
        print!("{result}");
        println!();
        println!("Average weekly hours by education and income class (committed output):");
        for ((education, income), (count, hours)) in &verification.finals {
            println!(
                "  {education:<14} {income:<6} {count:>6} people  {:>5.1} h/week",
                *hours as f64 / *count as f64
            );
        }
        println!();
        println!(
            "Recovered from {} failure(s), restoring checkpoint(s) {:?}.",
            result.restarts, result.restored_from
        );
    }
    println!(
        "Verified: {} committed lines for {} input rows; every class's running counts appear exactly once and its final totals equal an uninterrupted computation.",
        verification.committed_lines, verification.input_rows
    );
    if let Some(dir) = &options.dead_letters {
        let letters = census::verify_dead_letters(dir, &args.data)?;
        println!(
            "Verified: {letters} dead letters committed in {}, each malformed row exactly once.",
            dir.display()
        );
    }
    Ok(())
}
