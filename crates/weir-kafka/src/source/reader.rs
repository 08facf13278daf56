//! The reader side of the Kafka source: one librdkafka consumer per subtask, manually
//! assigned to the subtask's partitions at their checkpointed offsets (no group rebalancing:
//! Weir, not the broker, decides who reads what).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError as RdKafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Message, Offset, TopicPartitionList};
use weir::connectors::malformed::{MalformedRecord, MalformedRecordHandler};
use weir::connectors::origin::OriginPlace;
use weir::connectors::rate_limiter::RateLimiter;
use weir::connectors::source::{InputStatus, SourceReader, SourceReaderContext, SourceSplit};
use weir::{BoxError, Collector};

use super::lag::{HighWatermarks, LagContext, LagMetrics, STATISTICS_INTERVAL_MS};
use super::split::KafkaPartitionSplit;
use super::SourceSettings;
use crate::deserializer::ConsumedRecord;
use crate::error::KafkaError;

/// Records handed on per poll, so that barriers and control messages are not delayed.
const RECORDS_PER_POLL: usize = 4096;

/// Reads the partitions assigned to one source subtask.
pub struct KafkaSourceReader<T> {
    settings: Arc<SourceSettings<T>>,
    context: SourceReaderContext,
    consumer: BaseConsumer<LagContext>,
    splits: BTreeMap<(String, i32), KafkaPartitionSplit>,
    assignment_changed: bool,
    no_more_splits: bool,
    malformed: MalformedRecordHandler<T>,
    /// Positions per checkpoint, committed to the group when the checkpoint completes.
    offsets_to_commit: BTreeMap<u64, Vec<(String, i32, i64)>>,
    /// End positions of bounded splits read to their end, still to be committed.
    finished: BTreeMap<(String, i32), i64>,
    limiter: RateLimiter,
    /// The partitions' high watermarks, from the consumer's statistics.
    high_watermarks: HighWatermarks,
    lag: LagMetrics,
    next_lag_update: Instant,
    /// The partition last read as an interned origin place, made at its first traced
    /// record.
    origin_place: Option<(String, i32, OriginPlace)>,
}

impl<T> KafkaSourceReader<T> {
    pub(crate) fn new(
        settings: Arc<SourceSettings<T>>,
        context: SourceReaderContext,
    ) -> Result<Self, KafkaError> {
        let mut defaults = vec![
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("isolation.level", "read_committed"),
            ("enable.partition.eof", "true"),
            // Positions come from checkpoints; this applies only when one has been deleted
            // by retention in the meantime.
            ("auto.offset.reset", "earliest"),
            ("fetch.wait.max.ms", "50"),
            // Statistics carry the partitions' high watermarks: the lag metrics.
            ("statistics.interval.ms", STATISTICS_INTERVAL_MS),
        ];
        // librdkafka assigns partitions only to a consumer with a group id; without the
        // user's, a fixed one is used, to which nothing is committed.
        defaults.push((
            "group.id",
            settings.group_id.as_deref().unwrap_or("weir-kafka-source"),
        ));
        let lag_context = LagContext::default();
        let high_watermarks = lag_context.high_watermarks.clone();
        let consumer: BaseConsumer<LagContext> = settings
            .connection
            .client_config(&defaults)
            .create_with_context(lag_context)
            .map_err(|e| KafkaError::client("creating the source reader's consumer", e))?;
        let lag = LagMetrics::new(context.metric_group());
        let limiter = RateLimiter::new(settings.rate_limit, context.parallelism());
        let malformed = MalformedRecordHandler::new(
            settings.malformed,
            settings.dead_letter,
            context.malformed_record_counters(),
        );
        Ok(Self {
            settings,
            context,
            consumer,
            splits: BTreeMap::new(),
            assignment_changed: false,
            no_more_splits: false,
            malformed,
            offsets_to_commit: BTreeMap::new(),
            finished: BTreeMap::new(),
            limiter,
            high_watermarks,
            lag,
            next_lag_update: Instant::now(),
            origin_place: None,
        })
    }

    /// Publishes the partitions' lag, at most once a second.
    fn update_lag(&mut self) {
        let now = Instant::now();
        if now < self.next_lag_update {
            return;
        }
        self.next_lag_update = now + Duration::from_secs(1);
        let high = self
            .high_watermarks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        // The consumer's position passes transaction markers, which hand out no record:
        // after a committed transaction the last record's offset + 1 is one short of the end.
        let mut positions: BTreeMap<(String, i32), i64> = self
            .splits
            .iter()
            .map(|(k, s)| (k.clone(), s.next_offset))
            .collect();
        if let Ok(list) = self.consumer.position() {
            for element in list.elements() {
                if let (Some(at), Offset::Offset(position)) = (
                    positions.get_mut(&(element.topic().to_string(), element.partition())),
                    element.offset(),
                ) {
                    *at = (*at).max(position);
                }
            }
        }
        self.lag
            .update(positions.iter().map(|(k, v)| (k, *v)), &high);
    }

    fn reassign(&mut self) -> Result<(), KafkaError> {
        let mut assignment = TopicPartitionList::new();
        for split in self.splits.values() {
            assignment
                .add_partition_offset(
                    &split.topic,
                    split.partition,
                    Offset::Offset(split.next_offset),
                )
                .map_err(|e| KafkaError::client("building the reader's assignment", e))?;
        }
        self.consumer
            .assign(&assignment)
            .map_err(|e| KafkaError::client("assigning partitions to the reader", e))?;
        self.assignment_changed = false;
        Ok(())
    }

    /// Moves bounded splits past trailing control records (transaction markers), which the
    /// consumer skips without handing them out; then drops the splits read to their end.
    /// Drops the bounded splits read to their end; returns their ids.
    fn settle_bounded_splits(&mut self) -> Result<Vec<String>, KafkaError> {
        if !self.splits.values().any(|s| s.stopping_offset.is_some()) {
            return Ok(Vec::new());
        }
        let positions = self
            .consumer
            .position()
            .map_err(|e| KafkaError::client("reading the reader's positions", e))?;
        for element in positions.elements() {
            let key = (element.topic().to_string(), element.partition());
            if let (Some(split), Offset::Offset(position)) =
                (self.splits.get_mut(&key), element.offset())
            {
                split.next_offset = split.next_offset.max(position);
            }
        }
        let done: Vec<(String, i32)> = self
            .splits
            .iter()
            .filter(|(_, s)| s.is_finished())
            .map(|(key, _)| key.clone())
            .collect();
        let mut released = Vec::with_capacity(done.len());
        for key in done {
            if let Some(split) = self.splits.remove(&key) {
                released.push(split.split_id());
                self.finished.insert(key, split.next_offset);
                self.assignment_changed = true;
            }
        }
        Ok(released)
    }
}

/// Consumer errors that librdkafka recovers from by itself (it reconnects and retries).
fn is_transient(error: &RdKafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::BrokerTransportFailure
                | RDKafkaErrorCode::AllBrokersDown
                | RDKafkaErrorCode::OperationTimedOut
                | RDKafkaErrorCode::RequestTimedOut
                | RDKafkaErrorCode::NotLeaderForPartition
                | RDKafkaErrorCode::LeaderNotAvailable
        )
    )
}

impl<T: Send + Sync + 'static> SourceReader for KafkaSourceReader<T> {
    type Output = T;
    type Split = KafkaPartitionSplit;

    fn poll_next(&mut self, output: &mut Collector<'_, T>) -> Result<InputStatus, BoxError> {
        if self.assignment_changed {
            self.reassign()?;
        }
        if self.splits.is_empty() {
            return Ok(if self.no_more_splits {
                InputStatus::EndOfInput
            } else {
                InputStatus::NothingAvailable
            });
        }
        let limit = self.limiter.allowed(RECORDS_PER_POLL as u64) as usize;
        let mut emitted = 0usize;
        let mut drained = false;
        // The partition whose records are being emitted: each has its own watermark.
        let mut current: Option<(String, i32)> = None;
        while emitted < limit {
            let message = match self.consumer.poll(Duration::ZERO) {
                None => {
                    drained = true;
                    break;
                }
                Some(Err(RdKafkaError::PartitionEOF(_))) => continue,
                Some(Err(e)) if is_transient(&e) => {
                    tracing::warn!(error = %e, subtask = self.context.subtask_index(), "transient Kafka consumer error; librdkafka retries");
                    drained = true;
                    break;
                }
                Some(Err(e))
                    if matches!(
                        e.rdkafka_error_code(),
                        Some(RDKafkaErrorCode::SSL | RDKafkaErrorCode::Authentication)
                    ) =>
                {
                    return Err(self
                        .settings
                        .connection
                        .unreachable(format!("consuming from Kafka: {e}"))
                        .into())
                }
                Some(Err(e)) => return Err(KafkaError::client("consuming from Kafka", e).into()),
                Some(Ok(message)) => message,
            };
            let key = (message.topic().to_string(), message.partition());
            let Some(split) = self.splits.get_mut(&key) else {
                continue;
            };
            let offset = message.offset();
            if offset < split.next_offset || split.stopping_offset.is_some_and(|s| offset >= s) {
                continue;
            }
            split.next_offset = offset + 1;
            if current.as_ref() != Some(&key) {
                output.for_split(&split.split_id());
                current = Some(key);
            }
            let record = ConsumedRecord {
                topic: message.topic(),
                partition: message.partition(),
                offset,
                timestamp: message.timestamp().to_millis(),
                key: message.key(),
                value: message.payload(),
            };
            let decoded = match self.settings.deserializer.deserialize(&record) {
                Ok(value) => Some(value),
                Err(error) => self.malformed.handle(MalformedRecord {
                    origin: record.origin(),
                    error,
                    raw: record
                        .value
                        .map(|v| String::from_utf8_lossy(v).into_owned())
                        .unwrap_or_default(),
                })?,
            };
            if let Some(value) = decoded {
                // The record's Kafka timestamp is its event time unless the watermark
                // strategy assigns another, as in Flink's Kafka source.
                // The origin is made only when the attempt traces origins, its partition
                // interned once per run of records from it.
                let cached = &mut self.origin_place;
                let origin = || {
                    let place = match cached {
                        Some((topic, partition, place))
                            if *partition == record.partition && topic == record.topic =>
                        {
                            *place
                        }
                        _ => {
                            let place = OriginPlace::kafka(record.topic, record.partition);
                            *cached = Some((record.topic.to_string(), record.partition, place));
                            place
                        }
                    };
                    place.at(offset as u64)
                };
                match record.timestamp {
                    Some(timestamp) => output.collect_from_with_timestamp(value, timestamp, origin),
                    None => output.collect_from(value, origin),
                }
                emitted += 1;
            }
        }
        self.limiter.record(emitted as u64);
        self.update_lag();
        if drained {
            for split in self.settle_bounded_splits()? {
                output.release_split(&split);
            }
        }
        if emitted > 0 {
            Ok(InputStatus::MoreAvailable)
        } else if self.splits.is_empty() && self.no_more_splits {
            Ok(InputStatus::EndOfInput)
        } else {
            Ok(InputStatus::NothingAvailable)
        }
    }

    fn poll_delay(&self) -> Duration {
        self.limiter.delay(Duration::from_millis(2))
    }

    fn add_splits(&mut self, splits: Vec<KafkaPartitionSplit>) -> Result<(), BoxError> {
        for split in splits {
            if split.is_finished() {
                continue;
            }
            tracing::debug!(subtask = self.context.subtask_index(), split = ?split, "Kafka partition assigned");
            self.splits
                .insert((split.topic.clone(), split.partition), split);
            self.assignment_changed = true;
        }
        Ok(())
    }

    fn notify_no_more_splits(&mut self) {
        self.no_more_splits = true;
    }

    fn set_readers_sharing(&mut self, readers: u32) {
        self.limiter.share_among(readers);
    }

    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<Vec<KafkaPartitionSplit>, BoxError> {
        let splits: Vec<KafkaPartitionSplit> = self.splits.values().cloned().collect();
        if self.settings.group_id.is_some() && self.settings.commit_offsets_on_checkpoint {
            let finished = self
                .finished
                .iter()
                .map(|((topic, partition), offset)| (topic.clone(), *partition, *offset));
            self.offsets_to_commit.insert(
                checkpoint_id,
                splits
                    .iter()
                    .map(|s| (s.topic.clone(), s.partition, s.next_offset))
                    .chain(finished)
                    .collect(),
            );
        }
        Ok(splits)
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), BoxError> {
        let Some(offsets) = self.offsets_to_commit.remove(&checkpoint_id) else {
            return Ok(());
        };
        if offsets.is_empty() {
            return Ok(());
        }
        self.offsets_to_commit.retain(|id, _| *id > checkpoint_id);
        let mut list = TopicPartitionList::new();
        for (topic, partition, offset) in &offsets {
            list.add_partition_offset(topic, *partition, Offset::Offset(*offset))
                .map_err(|e| KafkaError::client("building an offset commit", e))?;
        }
        // Only for monitoring: a failed commit loses nothing, the checkpoint has the offsets.
        // A reader that is done commits synchronously, as it is about to close.
        let mode = if self.splits.is_empty() && self.no_more_splits {
            CommitMode::Sync
        } else {
            CommitMode::Async
        };
        if let Err(e) = self.consumer.commit(&list, mode) {
            tracing::warn!(checkpoint_id, error = %e, "committing offsets to the consumer group failed");
        }
        Ok(())
    }
}
