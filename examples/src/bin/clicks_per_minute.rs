//! The event-time example job: clicks per page and minute of event time, counted in tumbling
//! windows over out-of-order click rows and committed exactly once by the transactional file
//! sink; `--resume` continues a killed run from its latest checkpoint.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::Parser;
use weir_examples::clicks::{self, ClicksOptions};

/// Command-line options.
#[derive(Parser, Debug)]
#[command(about = "Clicks per page and minute of event time, exactly once")]
struct Args {
    /// Directory of the click CSV files.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/data/clicks"))]
    data: PathBuf,
    /// Working directory for output and checkpoints; the job is reset there (`weir reset`)
    /// unless --resume.
    #[arg(long, default_value = "target/clicks")]
    work_dir: PathBuf,
    /// Parallelism.
    #[arg(long, default_value_t = 2)]
    parallelism: u32,
    /// Rows read per second.
    #[arg(long, default_value_t = 4_000.0)]
    rate: f64,
    /// Checkpoint interval in milliseconds.
    #[arg(long, default_value_t = 200)]
    checkpoint_interval_ms: u64,
    /// Resume from the latest retained checkpoint.
    #[arg(long)]
    resume: bool,
}

fn run() -> Result<()> {
    weir::cli::init_logging();
    let args = Args::parse();
    let mut options = ClicksOptions::new(args.data.clone(), &args.work_dir);
    options.parallelism = args.parallelism;
    options.rate = args.rate;
    options.checkpoint_interval = Duration::from_millis(args.checkpoint_interval_ms);
    options.resume = args.resume;
    let env = clicks::build(&options)?;
    if !args.resume {
        // Starts over through a reset: never under a process that still holds the job.
        weir::checkpoint::reset::reset_job(
            &env.config().checkpoint,
            clicks::JOB_NAME,
            &[options.output.as_path()],
        )?;
    }
    let result = env.execute(clicks::JOB_NAME)?;
    let windows = clicks::verify(&options.output, &args.data)?;
    println!("{result}");
    println!("verified: {windows} windows committed exactly once");
    Ok(())
}

fn main() -> std::process::ExitCode {
    weir::cli::exit_code(run())
}
