//! The large-state reference job as a command (see `weir_rocksdb::large_state_job`): keyed
//! state of any size on the heap or in RocksDB, checkpoints in `<work-dir>/checkpoints`,
//! `--resume` after a crash, and a last line of figures: records, time, peak resident
//! memory, the last checkpoint's state and uploaded bytes, and whether the committed output
//! is exact.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use weir::state::backend_factory::StateBackendConfig;
use weir_rocksdb::large_state_job::{self, LargeStateOptions};
use weir_rocksdb::RocksDbStateBackend;

/// Command-line options.
#[derive(Parser, Debug)]
#[command(
    about = "Keyed state of any size, checked exactly once: generator -> key_by -> keep and check -> files"
)]
struct Args {
    /// Distinct keys.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Records per key.
    #[arg(long, default_value_t = 2)]
    rounds: u32,
    /// Bytes of payload kept per key.
    #[arg(long, default_value_t = 64)]
    payload_bytes: usize,
    /// Parallelism.
    #[arg(long, default_value_t = 2)]
    parallelism: u32,
    /// Records per second, all readers together (0: no limit).
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Checkpoint interval in milliseconds.
    #[arg(long, default_value_t = 500)]
    checkpoint_interval_ms: u64,
    /// Working directory (output and checkpoints); reset there (`weir reset`) unless --resume.
    #[arg(long, default_value = "target/large-state")]
    work_dir: PathBuf,
    /// Resume from the latest retained checkpoint.
    #[arg(long)]
    resume: bool,
    /// The keyed state backend: heap or rocksdb.
    #[arg(long, default_value = "rocksdb", value_parser = ["heap", "rocksdb"])]
    state_backend: String,
    /// Incremental checkpoints (rocksdb).
    #[arg(long)]
    incremental: bool,
    /// Memory of each RocksDB instance, MiB.
    #[arg(long, default_value_t = 64)]
    memory_mb: u64,
    /// Where RocksDB keeps its databases (default: the system's temporary directory).
    #[arg(long)]
    local_dir: Option<PathBuf>,
    /// Fail once after this many records (0: never).
    #[arg(long, default_value_t = 0)]
    fail_after: u64,
    /// Fall back past committed output when a checkpoint is unusable.
    #[arg(long)]
    allow_duplicates: bool,
}

fn main() -> std::process::ExitCode {
    weir::cli::exit_code(run())
}

fn run() -> Result<()> {
    weir::cli::init_logging();
    let args = Args::parse();
    std::panic::set_hook(Box::new(|info| eprintln!("large-state: {info}")));
    let mut options = LargeStateOptions::new(&args.work_dir);
    options.keys = args.keys;
    options.rounds = args.rounds.max(1);
    options.payload_bytes = args.payload_bytes;
    options.parallelism = args.parallelism;
    options.rate = (args.rate > 0.0).then_some(args.rate);
    options.checkpoint_interval = Duration::from_millis(args.checkpoint_interval_ms);
    options.resume = args.resume;
    options.fail_after = (args.fail_after > 0).then_some(args.fail_after);
    options.allow_duplicates = args.allow_duplicates;
    options.backend = match args.state_backend.as_str() {
        "rocksdb" => {
            let mut backend = RocksDbStateBackend::new()
                .with_incremental_checkpoints(args.incremental)
                .with_memory_budget(args.memory_mb << 20);
            if let Some(dir) = &args.local_dir {
                backend = backend.with_local_dir(dir);
            }
            backend.into()
        }
        _ => StateBackendConfig::default(),
    };
    let env = large_state_job::build(&options)?;
    if !args.resume {
        // Starts over through a reset: never under a process that still holds the job.
        weir::checkpoint::reset::reset_job(
            &env.config().checkpoint,
            large_state_job::JOB_NAME,
            &[options.output.as_path()],
        )
        .context("starting the job over (--resume continues it instead)")?;
    }
    let started = Instant::now();
    let result = env.execute(large_state_job::JOB_NAME)?;
    let wall = started.elapsed();
    let verification = large_state_job::verify(&options)?;
    let completed: Vec<_> = result
        .checkpoints
        .recent
        .iter()
        .filter(|c| c.status == weir::checkpoint::stats::CheckpointStatus::Completed)
        .collect();
    let last = completed.last();
    let max_sync = completed
        .iter()
        .map(|c| c.max_sync_duration())
        .max()
        .unwrap_or_default();
    println!(
        "large-state: records={} keys={} wall_ms={} peak_rss_bytes={} checkpoints={} \
         last_state_bytes={} last_checkpointed_bytes={} max_sync_ms={:.2} restarts={} \
         restored_from={} exact={}",
        options.records(),
        options.keys,
        wall.as_millis(),
        large_state_job::peak_resident_bytes().unwrap_or(0),
        completed.len(),
        last.map_or(0, |c| c.state_size),
        last.map_or(0, |c| c.checkpointed_size),
        max_sync.as_secs_f64() * 1000.0,
        result.restarts,
        result
            .restored_from
            .first()
            .map_or("none".to_string(), |id| id.to_string()),
        verification.is_exact(&options),
    );
    if !verification.is_exact(&options) {
        bail!(
            "the committed output is not exact: {} lines for {} keys, {} distinct, {} wrong",
            verification.lines,
            options.keys,
            verification.distinct,
            verification.wrong
        );
    }
    Ok(())
}
