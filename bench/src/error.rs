//! What can go wrong in the benchmark suite, named by what and where.

use std::path::PathBuf;

/// An error of the benchmark suite.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A file or directory could not be read or written.
    #[error("{what} `{}`: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// An input record that does not parse.
    #[error("{file}:{line}: {reason}")]
    Malformed {
        /// The input file.
        file: String,
        /// Its 1-based line.
        line: u64,
        /// Why.
        reason: String,
    },
    /// The Weir job failed.
    #[error("Weir job failed: {0}")]
    Weir(#[from] weir::WeirError),
    /// A run (a child process, the Flink job) failed or reported nothing usable.
    #[error("{0}")]
    Run(String),
}

impl BenchError {
    /// An I/O error while doing `what` on `path`.
    pub fn io(what: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { what, path, source }
    }
}
