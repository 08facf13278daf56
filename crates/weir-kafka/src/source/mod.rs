//! The Kafka source (Flink's `KafkaSource`): every partition is a split owned by one reader
//! subtask; the next offset of each partition is the reader's checkpointed position and the
//! only source of truth on restore. Offsets are committed to the consumer group when a
//! checkpoint completes, for monitoring only.

pub mod enumerator;
mod lag;
pub mod reader;
pub mod split;
pub mod starting_offsets;

use std::sync::Arc;
use std::time::Duration;

use weir::connectors::malformed::{MalformedRecord, MalformedRecordPolicy};
use weir::connectors::source::{Boundedness, Source, SourceReaderContext};
use weir::{BoxError, Record};

use crate::client_config::KafkaConnection;
use crate::deserializer::KafkaRecordDeserializer;
use crate::error::KafkaError;
pub use enumerator::{KafkaEnumeratorState, KafkaSourceEnumerator};
pub use reader::KafkaSourceReader;
pub use split::KafkaPartitionSplit;
pub use starting_offsets::{OffsetResetStrategy, StartingOffsets};

/// Which topics to read.
#[derive(Debug, Clone)]
pub enum TopicSubscription {
    /// These topics.
    Topics(Vec<String>),
    /// Every topic whose whole name matches this regular expression.
    Pattern(regex::Regex),
}

impl TopicSubscription {
    pub(crate) fn matches(&self, topic: &str) -> bool {
        match self {
            TopicSubscription::Topics(topics) => topics.iter().any(|t| t == topic),
            TopicSubscription::Pattern(re) => re.is_match(topic),
        }
    }
}

/// Everything the enumerator and the readers share.
pub(crate) struct SourceSettings<T> {
    pub connection: KafkaConnection,
    pub subscription: TopicSubscription,
    pub group_id: Option<String>,
    pub starting_offsets: StartingOffsets,
    pub bounded: bool,
    pub discovery_interval: Option<Duration>,
    pub deserializer: Arc<dyn KafkaRecordDeserializer<T>>,
    pub malformed: MalformedRecordPolicy,
    /// Turns a malformed record into a stream record (`Err`) when dead letters are on.
    pub dead_letter: Option<fn(MalformedRecord) -> T>,
    pub commit_offsets_on_checkpoint: bool,
    pub rate_limit: Option<f64>,
}

/// A replayable Kafka source. Build one with [`KafkaSource::builder`].
pub struct KafkaSource<T> {
    settings: Arc<SourceSettings<T>>,
}

impl<T: Record> KafkaSource<T> {
    /// A builder reading records with `deserializer`.
    pub fn builder(
        bootstrap_servers: impl Into<String>,
        deserializer: impl KafkaRecordDeserializer<T>,
    ) -> KafkaSourceBuilder<T> {
        KafkaSourceBuilder {
            connection: KafkaConnection::new(bootstrap_servers),
            subscription: None,
            group_id: None,
            starting_offsets: StartingOffsets::Earliest,
            bounded: false,
            discovery_interval: Some(Duration::from_secs(30)),
            deserializer: Arc::new(deserializer),
            malformed: MalformedRecordPolicy::Fail,
            dead_letter: None,
            commit_offsets_on_checkpoint: true,
            rate_limit: None,
        }
    }
}

/// Configures a [`KafkaSource`].
pub struct KafkaSourceBuilder<T> {
    connection: KafkaConnection,
    subscription: Option<TopicSubscription>,
    group_id: Option<String>,
    starting_offsets: StartingOffsets,
    bounded: bool,
    discovery_interval: Option<Duration>,
    deserializer: Arc<dyn KafkaRecordDeserializer<T>>,
    malformed: MalformedRecordPolicy,
    dead_letter: Option<fn(MalformedRecord) -> T>,
    commit_offsets_on_checkpoint: bool,
    rate_limit: Option<f64>,
}

impl<T: Record> KafkaSourceBuilder<T> {
    /// Reads at most `records_per_second` over all subtasks (for demos and tests), shared
    /// among the readers that hold partitions, so that it holds with fewer partitions than
    /// readers.
    pub fn with_rate_limit(mut self, records_per_second: f64) -> Self {
        self.rate_limit = Some(records_per_second);
        self
    }
    /// Reads these topics.
    pub fn topics<I: IntoIterator<Item = S>, S: Into<String>>(mut self, topics: I) -> Self {
        self.subscription = Some(TopicSubscription::Topics(
            topics.into_iter().map(Into::into).collect(),
        ));
        self
    }
    /// Reads every topic whose whole name matches `pattern` (topics created later included,
    /// found by partition discovery).
    pub fn topic_pattern(mut self, pattern: &str) -> Result<Self, KafkaError> {
        let anchored = format!("^(?:{pattern})$");
        let re = regex::Regex::new(&anchored)
            .map_err(|e| KafkaError::Config(format!("invalid topic pattern `{pattern}`: {e}")))?;
        self.subscription = Some(TopicSubscription::Pattern(re));
        Ok(self)
    }
    /// The consumer group: offsets are committed to it when checkpoints complete, and
    /// [`StartingOffsets::Committed`] reads from it.
    pub fn group_id(mut self, group_id: impl Into<String>) -> Self {
        self.group_id = Some(group_id.into());
        self
    }
    /// Where to start partitions that have no checkpointed position (default: earliest).
    pub fn starting_offsets(mut self, starting: StartingOffsets) -> Self {
        self.starting_offsets = starting;
        self
    }
    /// Makes the source bounded: it reads each partition up to its end offset at the time
    /// the partition is discovered, then finishes (Flink's `setBounded(latest())`).
    pub fn bounded(mut self) -> Self {
        self.bounded = true;
        self
    }
    /// How often to look for new partitions and topics (`None`: never; default 30 s).
    pub fn partition_discovery_interval(mut self, interval: Option<Duration>) -> Self {
        self.discovery_interval = interval;
        self
    }
    /// What to do with records the deserializer rejects (default: fail the job, naming the
    /// topic, partition and offset).
    pub fn on_malformed(mut self, policy: MalformedRecordPolicy) -> Self {
        self.malformed = policy;
        self
    }
    /// Whether to commit offsets to the group on checkpoint completion (default: yes, when a
    /// group is set).
    pub fn commit_offsets_on_checkpoint(mut self, commit: bool) -> Self {
        self.commit_offsets_on_checkpoint = commit;
        self
    }
    /// Sets a librdkafka consumer property (it overrides the connector's defaults).
    pub fn property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.connection.properties.insert(key.into(), value.into());
        self
    }
    /// How long a metadata or offsets request may take before the brokers count as
    /// unreachable (default 10 s).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.connection.request_timeout = timeout;
        self
    }

    /// Passes malformed records on as `Err` (dead letters) instead of failing or skipping,
    /// as the file source's `with_dead_letters` does.
    pub fn with_dead_letters(self) -> KafkaSourceBuilder<Result<T, MalformedRecord>> {
        let deserializer = self.deserializer;
        KafkaSourceBuilder {
            connection: self.connection,
            subscription: self.subscription,
            group_id: self.group_id,
            starting_offsets: self.starting_offsets,
            bounded: self.bounded,
            discovery_interval: self.discovery_interval,
            deserializer: Arc::new(move |record: &crate::deserializer::ConsumedRecord<'_>| {
                deserializer.deserialize(record).map(Ok)
            }),
            malformed: self.malformed,
            dead_letter: Some(Err),
            commit_offsets_on_checkpoint: self.commit_offsets_on_checkpoint,
            rate_limit: self.rate_limit,
        }
    }

    /// Checks the configuration and builds the source.
    pub fn build(self) -> Result<KafkaSource<T>, KafkaError> {
        self.connection.validate()?;
        let subscription = self
            .subscription
            .ok_or_else(|| KafkaError::Config("no topics or topic pattern set".into()))?;
        if let TopicSubscription::Topics(topics) = &subscription {
            if topics.is_empty() || topics.iter().any(|t| t.is_empty()) {
                return Err(KafkaError::Config("empty topic list or topic name".into()));
            }
        }
        if matches!(self.starting_offsets, StartingOffsets::Committed { .. })
            && self.group_id.is_none()
        {
            return Err(KafkaError::Config(
                "starting from committed offsets needs a group id".into(),
            ));
        }
        if self.rate_limit.is_some_and(|r| !(r > 0.0 && r.is_finite())) {
            return Err(KafkaError::Config(format!(
                "rate limit must be a positive number of records per second, not {:?}",
                self.rate_limit
            )));
        }
        if self.discovery_interval.is_some_and(|d| d.is_zero()) {
            return Err(KafkaError::Config(
                "partition discovery interval must be positive".into(),
            ));
        }
        for reserved in ["enable.auto.commit", "group.id"] {
            if self.connection.properties.contains_key(reserved) {
                return Err(KafkaError::Config(format!(
                    "property `{reserved}` is managed by the source; use the builder instead"
                )));
            }
        }
        Ok(KafkaSource {
            settings: Arc::new(SourceSettings {
                connection: self.connection,
                subscription,
                group_id: self.group_id,
                starting_offsets: self.starting_offsets,
                bounded: self.bounded,
                discovery_interval: if self.bounded {
                    None
                } else {
                    self.discovery_interval
                },
                deserializer: self.deserializer,
                malformed: self.malformed,
                dead_letter: self.dead_letter,
                commit_offsets_on_checkpoint: self.commit_offsets_on_checkpoint,
                rate_limit: self.rate_limit,
            }),
        })
    }
}

impl<T: Record> Source for KafkaSource<T> {
    type Output = T;
    type Split = KafkaPartitionSplit;
    type Enumerator = KafkaSourceEnumerator<T>;
    type Reader = KafkaSourceReader<T>;

    fn validate(&self) -> Result<(), String> {
        weir::connectors::rate_limiter::check_rate(self.settings.rate_limit)
    }

    fn boundedness(&self) -> Boundedness {
        if self.settings.bounded {
            Boundedness::Bounded
        } else {
            Boundedness::ContinuousUnbounded
        }
    }

    fn create_enumerator(&self, parallelism: u32) -> Result<Self::Enumerator, BoxError> {
        Ok(KafkaSourceEnumerator::new(
            self.settings.clone(),
            parallelism,
            None,
        ))
    }

    fn restore_enumerator(
        &self,
        parallelism: u32,
        checkpoint: KafkaEnumeratorState,
    ) -> Result<Self::Enumerator, BoxError> {
        Ok(KafkaSourceEnumerator::new(
            self.settings.clone(),
            parallelism,
            Some(checkpoint),
        ))
    }

    fn create_reader(&self, context: SourceReaderContext) -> Result<Self::Reader, BoxError> {
        Ok(KafkaSourceReader::new(self.settings.clone(), context)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deserializer::StringValue;

    fn error(builder: KafkaSourceBuilder<String>) -> String {
        match builder.build() {
            Ok(_) => panic!("accepted an invalid configuration"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn invalid_configurations_are_refused_with_the_reason() {
        let builder = || KafkaSource::builder("127.0.0.1:9092", StringValue);
        assert!(error(builder()).contains("no topics"));
        assert!(error(builder().topics(Vec::<String>::new())).contains("empty topic"));
        assert!(error(
            builder()
                .topics(["t"])
                .starting_offsets(StartingOffsets::Committed {
                    reset: OffsetResetStrategy::Earliest
                })
        )
        .contains("needs a group id"));
        assert!(error(builder().topics(["t"]).property("group.id", "g")).contains("managed"));
        assert!(error(
            builder()
                .topics(["t"])
                .partition_discovery_interval(Some(Duration::ZERO))
        )
        .contains("must be positive"));
        assert!(error(KafkaSource::builder("", StringValue).topics(["t"])).contains("empty"));
        assert!(builder().topic_pattern("(").is_err());
        assert!(builder().topics(["t"]).build().is_ok());
    }

    #[test]
    fn a_topic_pattern_matches_whole_names_only() {
        let Ok(builder) =
            KafkaSource::builder("127.0.0.1:9092", StringValue).topic_pattern("in-.*")
        else {
            panic!("valid pattern refused");
        };
        let Some(TopicSubscription::Pattern(_)) = &builder.subscription else {
            panic!("no pattern");
        };
        let subscription = builder
            .subscription
            .clone()
            .unwrap_or(TopicSubscription::Topics(vec![]));
        assert!(subscription.matches("in-1"));
        assert!(!subscription.matches("xin-1"));
        assert!(!subscription.matches("out"));
    }
}
