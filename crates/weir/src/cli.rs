//! What command-line programs that run Weir jobs share.

use std::fmt::Display;
use std::process::ExitCode;

/// Ends a command-line program with `result`: on an error, prints it and its causes on one
/// line to standard error (`error: job `x` failed: …: census-0.csv:5002, column age: …`) and
/// exits with status 1. No backtrace, whatever `RUST_BACKTRACE` says: bad input is not a bug,
/// and the message says all there is to say. (An `anyhow::Error`'s alternate form, `{:#}`, is
/// its chain of causes.)
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
pub fn exit_code<E: Display>(result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
