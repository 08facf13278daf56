//! What can go wrong starting the REST endpoint.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Why the REST endpoint could not start.
#[derive(thiserror::Error)]
pub enum RestError {
    /// The address is taken or not ours.
    #[error("cannot listen on {address} (`rest.bind-address`/`rest.port`): {source}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A TLS file is missing or not what it should be.
    #[error("cannot use `{path}` for the REST endpoint's TLS ({key}): {reason}")]
    Tls {
        /// The file.
        path: PathBuf,
        /// The configuration key that named it.
        key: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The server's thread or runtime could not start.
    #[error("cannot start the REST endpoint: {0}")]
    Start(String),
}

/// Its `Debug` form is its message, so that `fn main() -> Result<(), RestError>` prints what
/// went wrong rather than the enum's fields.
impl std::fmt::Debug for RestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}
