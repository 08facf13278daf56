//! Where a source starts reading a partition it has no checkpointed position for (Flink's
//! `OffsetsInitializer`).

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use crate::client_config::KafkaConnection;
use crate::error::KafkaError;
use crate::log_reader::LogReader;

/// The start and end of what a `read_committed` consumer can read in a partition. The end is
/// ListOffsets' answer (the last stable offset, for a read-committed client), raised to the
/// last stable offset of a read-committed fetch response when that is larger: some
/// Kafka-protocol brokers (tansu 0.6) answer ListOffsets(latest) with the last batch's base
/// offset + 1, which would make a bounded source stop early. On Apache Kafka both agree. The
/// fetch needs a listener the log reader can use (plaintext or TLS, no SASL); where it
/// fails, ListOffsets stands alone.
pub(crate) fn watermarks(
    consumer: &BaseConsumer,
    log_reader: &mut LogReader,
    topic: &str,
    partition: i32,
    timeout: Duration,
) -> Result<(i64, i64), KafkaError> {
    let (low, high) = consumer
        .fetch_watermarks(topic, partition, timeout)
        .map_err(|e| KafkaError::client(format!("reading watermarks of {topic}-{partition}"), e))?;
    match log_reader.last_stable_offset(topic, partition, low) {
        Ok(fetched) => Ok((low, high.max(fetched))),
        Err(e) => {
            tracing::debug!(topic, partition, error = %e, "no fetch-based end offset; using ListOffsets");
            Ok((low, high))
        }
    }
}

/// Where to start reading a partition that is not in the restored checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StartingOffsets {
    /// The first record still in the log.
    Earliest,
    /// After the last record at the time the partition is discovered.
    Latest,
    /// The first record whose timestamp is at or after this time (ms since the epoch).
    Timestamp(i64),
    /// The consumer group's committed offset, or `reset` where the group has none.
    Committed {
        /// Where to start without a committed offset.
        reset: OffsetResetStrategy,
    },
}

/// Where to start when the group has no committed offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OffsetResetStrategy {
    /// The first record still in the log.
    Earliest,
    /// After the last record.
    Latest,
    /// Fail, naming the partition.
    None,
}

impl StartingOffsets {
    /// The concrete starting offset of each partition in `partitions`.
    pub(crate) fn resolve(
        &self,
        consumer: &BaseConsumer,
        connection: &KafkaConnection,
        partitions: &[(String, i32)],
    ) -> Result<Vec<i64>, KafkaError> {
        let timeout = connection.request_timeout;
        // With SASL the reader cannot authenticate: its fetch fails and ListOffsets decides.
        let mut log_reader = LogReader::for_connection(connection, timeout)
            .unwrap_or_else(|_| LogReader::new(&connection.bootstrap_servers, timeout));
        let mut watermarks = |topic: &str, partition: i32| {
            watermarks(consumer, &mut log_reader, topic, partition, timeout)
        };
        match *self {
            StartingOffsets::Earliest => partitions
                .iter()
                .map(|(t, p)| watermarks(t, *p).map(|(low, _)| low))
                .collect(),
            StartingOffsets::Latest => partitions
                .iter()
                .map(|(t, p)| watermarks(t, *p).map(|(_, high)| high))
                .collect(),
            StartingOffsets::Timestamp(ms) => {
                let mut request = TopicPartitionList::new();
                for (t, p) in partitions {
                    request
                        .add_partition_offset(t, *p, Offset::Offset(ms))
                        .map_err(|e| {
                            KafkaError::client("building an offsets-for-times request", e)
                        })?;
                }
                let answer = consumer.offsets_for_times(request, timeout).map_err(|e| {
                    KafkaError::client(format!("looking up offsets at time {ms}"), e)
                })?;
                partitions
                    .iter()
                    .map(
                        |(t, p)| match answer.find_partition(t, *p).map(|e| e.offset()) {
                            Some(Offset::Offset(o)) => Ok(o),
                            // No record at or after the time: start at the end.
                            _ => watermarks(t, *p).map(|(_, high)| high),
                        },
                    )
                    .collect()
            }
            StartingOffsets::Committed { reset } => {
                let mut request = TopicPartitionList::new();
                for (t, p) in partitions {
                    request.add_partition(t, *p);
                }
                let answer = consumer
                    .committed_offsets(request, timeout)
                    .map_err(|e| KafkaError::client("reading the group's committed offsets", e))?;
                partitions
                    .iter()
                    .map(|(t, p)| match answer.find_partition(t, *p).map(|e| e.offset()) {
                        Some(Offset::Offset(o)) => Ok(o),
                        _ => match reset {
                            OffsetResetStrategy::Earliest => watermarks(t, *p).map(|(low, _)| low),
                            OffsetResetStrategy::Latest => watermarks(t, *p).map(|(_, high)| high),
                            OffsetResetStrategy::None => Err(KafkaError::Config(format!(
                                "the consumer group has no committed offset for {t}-{p} and the reset strategy is None"
                            ))),
                        },
                    })
                    .collect()
            }
        }
    }
}
