//! Errors of the Kafka connector, each naming the broker, topic, partition or offset involved.

use std::io;

/// What went wrong talking to Kafka.
#[derive(thiserror::Error)]
pub enum KafkaError {
    /// This process lost its job (a successor holds it): it sends and commits nothing more,
    /// and never re-sends a transaction it found aborted — the successor settles it.
    #[error("{0}")]
    Fenced(#[from] weir::FencedError),
    /// A configuration value is missing or wrong.
    #[error("invalid Kafka connector configuration: {0}")]
    Config(String),
    /// No broker of the bootstrap list answered.
    #[error("Kafka brokers {servers} unreachable ({detail}); check `bootstrap.servers` and that the brokers are up")]
    BrokerUnreachable {
        /// The bootstrap list.
        servers: String,
        /// What the client reported.
        detail: String,
    },
    /// Reading from or writing to a broker failed.
    #[error("I/O with Kafka broker {broker}: {source}")]
    BrokerIo {
        /// The broker's address.
        broker: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A broker answered something unexpected.
    #[error("Kafka protocol error with {broker}: {message}")]
    Protocol {
        /// The broker (or partition) concerned.
        broker: String,
        /// What was wrong.
        message: String,
    },
    /// A broker refused to authenticate the client (SASL), or the exchange failed. Never
    /// holds the password.
    #[error("SASL {mechanism} authentication as `{username}` with Kafka broker {broker} failed: {message}")]
    Authentication {
        /// The broker's address.
        broker: String,
        /// The mechanism (`sasl.mechanism`).
        mechanism: String,
        /// The user (`sasl.username`).
        username: String,
        /// What went wrong.
        message: String,
    },
    /// A topic or partition does not exist.
    #[error("Kafka partition {topic}-{partition} does not exist")]
    UnknownPartition {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: i32,
    },
    /// An offset is outside the partition's log (deleted by retention, or not written yet).
    #[error("offset {offset} is outside the log of Kafka partition {topic}-{partition}")]
    OffsetOutOfRange {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: i32,
        /// The offset asked for.
        offset: i64,
    },
    /// A pending transaction's first record is gone from the log, so whether it committed
    /// cannot be told.
    #[error("cannot tell whether transaction {transactional_id} of checkpoint {checkpoint_id} committed: its first record {record} is no longer in the log (retention or compaction removed it). Restore from a newer checkpoint, or choose an UnknownOutcome policy for the sink (assume committed: may lose that checkpoint's output; resend: may duplicate it)")]
    UnknownTransactionOutcome {
        /// The transactional id.
        transactional_id: String,
        /// The checkpoint the transaction belongs to.
        checkpoint_id: u64,
        /// `topic-partition@offset` of its first record.
        record: String,
    },
    /// librdkafka reported an error.
    #[error("Kafka client error while {action}: {source}")]
    Client {
        /// What the connector was doing.
        action: String,
        /// The client's error.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// A record could not be deserialized.
    #[error(
        "cannot deserialize the Kafka record at {topic}-{partition} offset {offset}: {message}"
    )]
    Deserialize {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: i32,
        /// Offset of the record.
        offset: i64,
        /// Why.
        message: String,
    },
    /// A record could not be serialized.
    #[error("cannot serialize a record for the Kafka sink `{sink}`: {message}")]
    Serialize {
        /// The sink operator.
        sink: String,
        /// Why.
        message: String,
    },
    /// A record was not delivered.
    #[error("Kafka did not accept a record for {topic}: {message}")]
    Delivery {
        /// Target topic (and partition, when known).
        topic: String,
        /// Why.
        message: String,
    },
}

impl KafkaError {
    /// Wraps a librdkafka error with what the connector was doing.
    pub fn client(action: impl Into<String>, source: rdkafka::error::KafkaError) -> Self {
        // librdkafka's configuration errors carry the value: never a secret's.
        let source = match source {
            rdkafka::error::KafkaError::ClientConfig(code, description, key, value) => {
                let value = if crate::security::is_secret_property(&key) {
                    "<redacted>".to_string()
                } else {
                    value
                };
                rdkafka::error::KafkaError::ClientConfig(code, description, key, value)
            }
            other => other,
        };
        KafkaError::Client {
            action: action.into(),
            source,
        }
    }
}

/// Its `Debug` form is its message, so that `fn main() -> Result<(), KafkaError>` prints what
/// went wrong rather than the enum's fields.
impl std::fmt::Debug for KafkaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod debug_tests {
    use super::*;

    /// `fn main() -> Result<(), KafkaError>` prints `Error: ` and the `Debug` form.
    #[test]
    fn debug_prints_the_message() {
        let error = KafkaError::Config("no bootstrap servers".into());
        assert_eq!(format!("{error:?}"), error.to_string());
    }
}
