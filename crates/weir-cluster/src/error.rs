//! What can go wrong in cluster mode.

use weir::WeirError;

/// An error and its causes on one line (`a: b: c`), each once, for messages that carry
/// another library's error, whose own `Display` is often only its outermost layer.
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    weir::cli::error_chain(error)
}

/// A cluster-mode failure, naming the setting or the peer involved.
#[derive(thiserror::Error)]
pub enum ClusterError {
    /// The configuration (file, environment, `-D`) is invalid.
    #[error(transparent)]
    Configuration(#[from] weir::configuration::ConfigurationError),
    /// The REST endpoint could not start.
    #[error(transparent)]
    Rest(#[from] weir_rest::RestError),
    /// A setting has a value that cannot work.
    #[error("invalid setting `{setting}` = `{value}`: {reason}")]
    InvalidSetting {
        /// The setting (command-line flag and environment variable).
        setting: &'static str,
        /// Its value.
        value: String,
        /// Why it cannot work.
        reason: String,
    },
    /// A socket could not be bound.
    #[error("cannot listen on {address} ({setting}): {cause}")]
    Bind {
        /// The address.
        address: String,
        /// The setting that chose it.
        setting: &'static str,
        /// The I/O error.
        cause: std::io::Error,
    },
    /// The JobManager could not be reached within the registration timeout.
    #[error(
        "cannot reach the JobManager at {address} (--jobmanager-address / WEIR_JOBMANAGER_ADDRESS) within {timeout:?}: {reason}"
    )]
    Unreachable {
        /// The address tried.
        address: String,
        /// How long it was tried.
        timeout: std::time::Duration,
        /// The last error.
        reason: String,
    },
    /// The JobManager refused this TaskManager.
    #[error("the JobManager at {address} refused this TaskManager: {reason}")]
    Refused {
        /// The JobManager's address.
        address: String,
        /// Its reason.
        reason: String,
    },
    /// The data plane failed.
    #[error(transparent)]
    Network(#[from] weir::runtime::network::NetworkError),
    /// The engine failed.
    #[error(transparent)]
    Weir(#[from] WeirError),
    /// A gRPC call failed.
    #[error("{what}: {status}")]
    Rpc {
        /// Which call.
        what: String,
        /// The status.
        status: Box<tonic::Status>,
    },
    /// A message could not be encoded or decoded.
    #[error("control message {what}: {reason}")]
    Codec {
        /// Which message.
        what: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// An internal error (a thread could not start, a runtime could not be built).
    #[error("{0}")]
    Internal(String),
}

impl From<ClusterError> for WeirError {
    fn from(e: ClusterError) -> Self {
        match e {
            ClusterError::Weir(e) => e,
            other => WeirError::Cluster(Box::new(other)),
        }
    }
}

/// Its `Debug` form is its message, so that `fn main() -> Result<(), ClusterError>` prints what
/// went wrong rather than the enum's fields.
impl std::fmt::Debug for ClusterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `fn main() -> Result<(), ClusterError>` prints `Error: ` and the `Debug` form.
    #[test]
    fn debug_prints_the_message() {
        let error = ClusterError::InvalidSetting {
            setting: "--slots",
            value: "0".into(),
            reason: "a TaskManager needs at least one slot".into(),
        };
        assert_eq!(format!("{error:?}"), error.to_string());
        assert!(!format!("{error:?}").contains("InvalidSetting"));
    }
}
