//! What command-line programs that run Weir jobs share.

use std::error::Error;
use std::process::ExitCode;

/// Set by `weir run` in the environment of the job binary it starts. `weir run` hands the
/// binary its settings (`--config`, `-D`, `--resume`, `--jobmanager` and the REST endpoint
/// it follows the job through) as environment variables that `weir_cluster::ClusterArgs`
/// reads (`WEIR_CONFIG_FILE`, `WEIR_DYNAMIC_PROPERTIES`, `WEIR_ROLE`), so a job that runs
/// without applying them (`weir_cluster::apply`) is an error that says so instead of a job
/// that silently ignores them.
pub const STARTED_BY_WEIR_RUN: &str = "WEIR_STARTED_BY_WEIR_RUN";

/// Ends a command-line program with `result`: on an error, prints it and its causes on one
/// line to standard error (`error: job `x` failed: …: census-0.csv:5002, column age: …`) and
/// exits with status 1. No backtrace, whatever `RUST_BACKTRACE` says: bad input is not a bug,
/// and the message says all there is to say. Each cause is printed once: one whose text the
/// message already holds (Weir's errors say their cause) is left out, see [`error_chain`].
///
/// ```
/// use std::process::ExitCode;
/// fn run(input_found: bool) -> Result<(), String> {
///     if input_found { Ok(()) } else { Err("no input".into()) }
/// }
/// // In a binary: `fn main() -> ExitCode { weir::cli::exit_code(run(..)) }`.
/// assert_eq!(weir::cli::exit_code(run(true)), ExitCode::SUCCESS);
/// assert_eq!(weir::cli::exit_code(run(false)), ExitCode::FAILURE); // prints `error: no input`
/// ```
pub fn exit_code<E: Into<Box<dyn Error + Send + Sync>>>(result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", error_chain(&*error.into()));
            ExitCode::FAILURE
        }
    }
}

/// Sets up logging for a command-line program, so that what a user must see is printed
/// without a setup of their own: events at WARN and above — a refusal's context, a recovery
/// that fell back, a checkpoint that failed — go to standard error, unless `RUST_LOG` asks for
/// more or less (`RUST_LOG=weir=info` shows every checkpoint, `RUST_LOG=off` nothing). Does
/// nothing if the program installed a subscriber already.
///
/// ```
/// // First thing in a job binary's `main` (or `run`):
/// weir::cli::init_logging();
/// tracing::warn!("printed to standard error");
/// weir::cli::init_logging(); // a second call changes nothing
/// ```
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// An error and its causes on one line (`a: b: c`), each cause once: a cause whose text is
/// already in the line is left out. Errors that say their cause in their own message (as
/// Weir's do) and also return it as their `source` would otherwise print it twice.
///
/// ```
/// #[derive(Debug, thiserror::Error)]
/// #[error("job failed: {0}")]
/// struct JobFailed(#[source] std::io::Error);
/// let error = JobFailed(std::io::Error::other("disk full"));
/// assert_eq!(weir::cli::error_chain(&error), "job failed: disk full");
/// let error = std::io::Error::other(error);
/// assert_eq!(weir::cli::error_chain(&error), "job failed: disk full");
/// ```
pub fn error_chain(error: &(dyn Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let next = cause.to_string();
        if !text.contains(&next) {
            text = format!("{text}: {next}");
        }
        source = cause.source();
    }
    text
}
