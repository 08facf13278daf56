//! The data plane between processes: the channels of subtasks that run in different
//! TaskManagers, over TCP.
//!
//! As in Flink's network stack, one TCP connection per pair of TaskManagers (per run of the
//! job) multiplexes every channel between them, and **credit-based flow control** keeps
//! backpressure per channel: a receiver grants its sender one credit per free slot of the
//! channel's bounded queue, the sender spends one per element and waits when it has none. A
//! slow consumer therefore stops only its own channel's sender, the connection never carries
//! more than the receivers can hold, and no socket buffer fills up behind a stalled channel.
//!
//! - [`frame`]: the wire format — a handshake, then length-prefixed data and credit frames;
//! - [`credit`]: a remote channel's sending end and the credits flowing back;
//! - [`connection`]: one TCP connection, its writer and reader threads and its routing;
//! - [`environment`]: a TaskManager's listening socket and the connections of one run;
//! - [`transport`]: the [`Transport`](crate::runtime::transport::Transport) that places each
//!   channel of a run in-process or on a connection.
//!
//! Batches, barriers, watermarks and end-of-stream travel in band, encoded with postcard,
//! the codec of the state snapshots.

pub mod connection;
pub mod credit;
pub mod environment;
pub mod frame;
pub mod transport;

/// Why the data plane failed.
#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    /// A socket operation failed.
    #[error("{what}: {cause}")]
    Io {
        /// What was being done, naming the peer.
        what: String,
        /// The I/O error.
        cause: std::io::Error,
    },
    /// The peer sent bytes that are not a valid frame.
    #[error("malformed frame from {peer}: {reason}")]
    Protocol {
        /// The peer's address or id.
        peer: String,
        /// What was wrong.
        reason: String,
    },
    /// The peer refused the connection, or presented itself wrongly.
    #[error("handshake with {peer} failed: {reason}")]
    Handshake {
        /// The peer's address or id.
        peer: String,
        /// Why.
        reason: String,
    },
    /// A peer did not connect in time.
    #[error(
        "TaskManager `{peer}` did not connect within {timeout:?} (data connection of run {run})"
    )]
    Timeout {
        /// The TaskManager waited for.
        peer: String,
        /// How long was waited.
        timeout: std::time::Duration,
        /// The run (attempt) the connection was for.
        run: String,
    },
    /// A channel's subtask runs on a TaskManager this one has no connection to.
    #[error("no data connection to TaskManager `{0}`")]
    NoConnection(String),
}

#[cfg(test)]
mod tests;
