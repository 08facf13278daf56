//! The Kafka sink (Flink's `KafkaSink`), with three delivery guarantees:
//!
//! - [`DeliveryGuarantee::None`]: records are sent as they come; errors are logged.
//! - [`DeliveryGuarantee::AtLeastOnce`]: every checkpoint barrier waits until all records
//!   sent so far are acknowledged, so a completed checkpoint never misses output.
//! - [`DeliveryGuarantee::ExactlyOnce`]: one Kafka transaction per subtask and checkpoint,
//!   flushed at the barrier and committed when the checkpoint completes. Its records stay in
//!   the sink's state until the commit is confirmed: if the broker aborted the transaction in
//!   the meantime (timeout, fencing, crash between completion and commit), they are sent
//!   again in a new transaction, so that a completed checkpoint's output is neither lost nor
//!   duplicated.

pub mod producer;
pub mod recovery;
pub mod serializer;
pub mod transactions;
pub mod writer;

use std::sync::Arc;
use std::time::Duration;

use weir::connectors::sink::Sink;
use weir::{BoxError, RuntimeContext};

use crate::client_config::KafkaConnection;
use crate::error::KafkaError;
use crate::security::ConnectionSecurity;
pub use serializer::{
    JsonSerializer, KafkaRecordSerializer, ProducerRecord, StringKeyValueSerializer,
};
pub use writer::KafkaSinkWriter;

/// What the sink promises about its output after failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryGuarantee {
    /// Nothing: records in flight at a failure may be lost (or duplicated on replay).
    None,
    /// No loss; records may be duplicated on replay.
    AtLeastOnce,
    /// Each record exactly once, visible to `read_committed` consumers when its checkpoint
    /// completes.
    ExactlyOnce,
}

impl std::str::FromStr for DeliveryGuarantee {
    type Err = KafkaError;
    fn from_str(s: &str) -> Result<Self, KafkaError> {
        match s.to_ascii_lowercase().replace('-', "_").as_str() {
            "none" => Ok(Self::None),
            "at_least_once" => Ok(Self::AtLeastOnce),
            "exactly_once" => Ok(Self::ExactlyOnce),
            other => Err(KafkaError::Config(format!(
                "unknown delivery guarantee `{other}` (none, at_least_once, exactly_once)"
            ))),
        }
    }
}

/// What to do when a pending transaction's first record is gone from the log (retention or
/// compaction removed it), so its fate cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownOutcome {
    /// Fail the job, naming the transaction (default).
    Fail,
    /// Assume it committed: its output is lost if it did not.
    AssumeCommitted,
    /// Send its records again: they are duplicated if it had committed.
    Resend,
}

/// Everything the writers share.
pub(crate) struct SinkSettings<T> {
    pub connection: KafkaConnection,
    pub serializer: Arc<dyn KafkaRecordSerializer<T>>,
    pub guarantee: DeliveryGuarantee,
    pub transactional_id_prefix: String,
    pub pool_size: u32,
    pub transaction_timeout: Duration,
    pub operation_timeout: Duration,
    pub before_commit: Option<BeforeCommitHook>,
    pub unknown_outcome: UnknownOutcome,
}

/// Called with a checkpoint id and a transactional id right before that transaction commits.
pub type BeforeCommitHook = Arc<dyn Fn(u64, &str) + Send + Sync>;

/// A Kafka sink. Build one with [`KafkaSink::builder`].
pub struct KafkaSink<T> {
    settings: Arc<SinkSettings<T>>,
}

impl<T: Send + 'static> KafkaSink<T> {
    /// A builder writing records serialized by `serializer`.
    pub fn builder(
        bootstrap_servers: impl Into<String>,
        serializer: impl KafkaRecordSerializer<T>,
    ) -> KafkaSinkBuilder<T> {
        KafkaSinkBuilder {
            connection: KafkaConnection::new(bootstrap_servers),
            serializer: Arc::new(serializer),
            guarantee: DeliveryGuarantee::AtLeastOnce,
            transactional_id_prefix: None,
            pool_size: 5,
            transaction_timeout: Duration::from_secs(15 * 60),
            operation_timeout: Duration::from_secs(60),
            before_commit: None,
            unknown_outcome: UnknownOutcome::Fail,
        }
    }
}

/// Configures a [`KafkaSink`].
pub struct KafkaSinkBuilder<T> {
    connection: KafkaConnection,
    serializer: Arc<dyn KafkaRecordSerializer<T>>,
    guarantee: DeliveryGuarantee,
    transactional_id_prefix: Option<String>,
    pool_size: u32,
    transaction_timeout: Duration,
    operation_timeout: Duration,
    before_commit: Option<BeforeCommitHook>,
    unknown_outcome: UnknownOutcome,
}

impl<T: Send + 'static> KafkaSinkBuilder<T> {
    /// What recovery does when a pending transaction's first record is gone from the log
    /// (default: fail the job, naming it).
    pub fn on_unknown_transaction_outcome(mut self, policy: UnknownOutcome) -> Self {
        self.unknown_outcome = policy;
        self
    }
    /// Calls `hook` with the checkpoint id and transactional id right before each commit:
    /// the moment between a checkpoint's completion and its transaction's commit, for
    /// fault-injection tests (kill the process, fence the producer) and for monitoring.
    pub fn before_commit(mut self, hook: impl Fn(u64, &str) + Send + Sync + 'static) -> Self {
        self.before_commit = Some(Arc::new(hook));
        self
    }
    /// The delivery guarantee (default: at least once).
    pub fn delivery_guarantee(mut self, guarantee: DeliveryGuarantee) -> Self {
        self.guarantee = guarantee;
        self
    }
    /// The prefix of the transactional ids (needed for exactly-once). Ids are
    /// `{prefix}-{operator uid}-{subtask}-{slot}`: keep prefix and uid unchanged across
    /// restarts so that a restarted job fences its predecessor, and unique per job.
    pub fn transactional_id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.transactional_id_prefix = Some(prefix.into());
        self
    }
    /// Producers per subtask to start with (default 5): a transaction holds one from its
    /// first record until its checkpoint's commit is confirmed. The pool grows when all are
    /// held (checkpoints that fail keep their transactions pending until a later one
    /// completes), with a warning.
    pub fn transaction_pool_size(mut self, size: u32) -> Self {
        self.pool_size = size;
        self
    }
    /// `transaction.timeout.ms` (default 15 min, the broker's default maximum): the broker
    /// aborts a transaction older than this.
    pub fn transaction_timeout(mut self, timeout: Duration) -> Self {
        self.transaction_timeout = timeout;
        self
    }
    /// How long a flush, commit or fencing call may take (default 60 s).
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }
    /// Sets a librdkafka producer property (it overrides the connector's defaults).
    pub fn property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.connection.properties.insert(key.into(), value.into());
        self
    }

    /// Checks the configuration and builds the sink.
    pub fn build(self) -> Result<KafkaSink<T>, KafkaError> {
        self.connection.validate()?;
        for managed in ["transactional.id", "transaction.timeout.ms"] {
            if self.connection.properties.contains_key(managed) {
                return Err(KafkaError::Config(format!(
                    "property `{managed}` is managed by the sink; use the builder instead"
                )));
            }
        }
        let prefix = match (self.guarantee, self.transactional_id_prefix) {
            (DeliveryGuarantee::ExactlyOnce, None) => {
                return Err(KafkaError::Config(
                    "an exactly-once Kafka sink needs a transactional id prefix".into(),
                ))
            }
            (_, Some(p)) if p.is_empty() => {
                return Err(KafkaError::Config(
                    "the transactional id prefix is empty".into(),
                ))
            }
            (_, p) => p.unwrap_or_default(),
        };
        let security = ConnectionSecurity::from_properties(&self.connection.properties)?;
        if self.guarantee == DeliveryGuarantee::ExactlyOnce {
            // Recovery reads the log over the Kafka protocol directly (see `log_reader`): its
            // TLS and SASL settings must be ones that reader can apply.
            crate::log_reader::LogReader::for_connection(&self.connection, Duration::from_secs(1))
                .map_err(|e| match e {
                    KafkaError::Config(message) => KafkaError::Config(format!(
                        "the exactly-once Kafka sink recovers its transactions by reading the log directly: {message}"
                    )),
                    other => other,
                })?;
        }
        if self.guarantee == DeliveryGuarantee::ExactlyOnce
            && !security.log_reader_unsupported.is_empty()
        {
            return Err(KafkaError::Config(format!(
                "the exactly-once Kafka sink recovers its transactions by reading the log directly, over TLS with `ssl.ca.location` only: {} is not supported for it yet",
                security.log_reader_unsupported.join(", ")
            )));
        }
        if self.pool_size < 2 {
            return Err(KafkaError::Config(format!(
                "transaction pool size {} is too small: one transaction is pending while the next one is written, so at least 2",
                self.pool_size
            )));
        }
        if self.transaction_timeout < Duration::from_secs(1) || self.operation_timeout.is_zero() {
            return Err(KafkaError::Config(
                "transaction timeout must be at least 1 s and operation timeout positive".into(),
            ));
        }
        Ok(KafkaSink {
            settings: Arc::new(SinkSettings {
                connection: self.connection,
                serializer: self.serializer,
                guarantee: self.guarantee,
                transactional_id_prefix: prefix,
                pool_size: self.pool_size,
                transaction_timeout: self.transaction_timeout,
                operation_timeout: self.operation_timeout,
                before_commit: self.before_commit,
                unknown_outcome: self.unknown_outcome,
            }),
        })
    }
}

impl<T: Send + 'static> Sink<T> for KafkaSink<T> {
    type Writer = KafkaSinkWriter<T>;
    /// Only the exactly-once sink commits (its transactions, on checkpoint completion); the
    /// others write at least once, so a replay adds nothing they do not promise already.
    fn commits_on_checkpoint_completion(&self) -> bool {
        self.settings.guarantee == DeliveryGuarantee::ExactlyOnce
    }
    fn create_writer(&self, context: &RuntimeContext) -> Result<Self::Writer, BoxError> {
        if context.subtask_index() == 0 {
            if let Some(warning) = exactly_once_warning(
                self.settings.guarantee,
                self.settings.transaction_timeout,
                context.execution_config(),
                context.operator_name(),
            ) {
                tracing::warn!("{warning}");
            }
        }
        Ok(KafkaSinkWriter::new(
            self.settings.clone(),
            context.clone(),
        )?)
    }
}

/// A warning about an exactly-once configuration that cannot deliver: no checkpoints,
/// unaligned (at-least-once) checkpoints, or a transaction timeout so short that the broker
/// could abort a transaction before the job gets to commit it:
/// a transaction lives from its first record through the checkpoint interval and the
/// checkpoint itself, and after a crash through the restart delay, until the recovered job
/// commits or re-sends it.
pub fn exactly_once_warning(
    guarantee: DeliveryGuarantee,
    transaction_timeout: Duration,
    config: &weir::ExecutionConfig,
    operator_name: &str,
) -> Option<String> {
    if guarantee != DeliveryGuarantee::ExactlyOnce {
        return None;
    }
    let Some(interval) = config.checkpoint.interval else {
        return Some(
            "exactly-once Kafka sink without checkpointing: transactions commit only when the input ends".into(),
        );
    };
    if config.checkpoint.mode == weir::CheckpointingMode::AtLeastOnce {
        return Some(format!(
            "Kafka sink `{operator_name}`: exactly-once delivery with at-least-once checkpointing: barriers are not aligned, so records replayed after a recovery are written again; use CheckpointingMode::ExactlyOnce"
        ));
    }
    let restart_delay = config
        .restart_strategy
        .as_ref()
        .map(restart_delay)
        .unwrap_or_default();
    let needed = interval + config.checkpoint.timeout + restart_delay;
    (transaction_timeout < needed).then(|| {
        format!(
            "Kafka sink `{operator_name}`: transaction.timeout.ms ({} ms) is shorter than checkpoint interval + checkpoint timeout + restart delay ({} ms); the broker may abort transactions before they commit. The sink re-sends their records from its state, but raise transaction.timeout.ms (and the broker's transaction.max.timeout.ms) to avoid it",
            transaction_timeout.as_millis(),
            needed.as_millis()
        )
    })
}

/// The longest wait a restart strategy imposes before restarting.
fn restart_delay(strategy: &weir::RestartStrategyConfig) -> Duration {
    use weir::RestartStrategyConfig as R;
    match strategy {
        R::None => Duration::ZERO,
        R::FixedDelay { delay, .. } => *delay,
        R::ExponentialDelay { max, .. } => *max,
        R::FailureRate { delay, .. } => *delay,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir::{CheckpointConfig, ExecutionConfig, RestartStrategyConfig};

    fn builder() -> KafkaSinkBuilder<(String, String)> {
        KafkaSink::builder("127.0.0.1:9092", StringKeyValueSerializer::new("out"))
    }

    fn error(builder: KafkaSinkBuilder<(String, String)>) -> String {
        match builder.build() {
            Ok(_) => panic!("accepted an invalid configuration"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn invalid_configurations_are_refused_with_the_reason() {
        let exactly_once = || builder().delivery_guarantee(DeliveryGuarantee::ExactlyOnce);
        assert!(error(exactly_once()).contains("needs a transactional id prefix"));
        assert!(error(exactly_once().transactional_id_prefix("")).contains("empty"));
        assert!(error(
            exactly_once()
                .transactional_id_prefix("p")
                .transaction_pool_size(1)
        )
        .contains("pool size 1"));
        assert!(error(builder().property("transactional.id", "x")).contains("managed by the sink"));
        assert!(error(KafkaSink::builder(
            "nohost",
            StringKeyValueSerializer::new("out")
        ))
        .contains("not host:port"));
        assert!(exactly_once().transactional_id_prefix("p").build().is_ok());
        // TLS and SASL (PLAIN, SCRAM) are fine for every guarantee; the exactly-once sink
        // refuses a mechanism its recovery's log reader cannot speak.
        assert!(exactly_once()
            .transactional_id_prefix("p")
            .property("security.protocol", "ssl")
            .build()
            .is_ok());
        let sasl = |b: KafkaSinkBuilder<(String, String)>, mechanism: &str| {
            b.property("security.protocol", "sasl_ssl")
                .property("sasl.mechanism", mechanism)
                .property("sasl.username", "alice")
                .property("sasl.password", "hunter2")
        };
        for mechanism in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
            assert!(
                sasl(exactly_once().transactional_id_prefix("p"), mechanism)
                    .build()
                    .is_ok(),
                "{mechanism}"
            );
        }
        let refused = error(sasl(
            exactly_once().transactional_id_prefix("p"),
            "OAUTHBEARER",
        ));
        assert!(
            refused.contains("recovers its transactions")
                && refused.contains("OAUTHBEARER")
                && !refused.contains("hunter2"),
            "{refused}"
        );
        assert!(sasl(
            builder().delivery_guarantee(DeliveryGuarantee::AtLeastOnce),
            "OAUTHBEARER"
        )
        .build()
        .is_ok());
        assert!(error(builder().property("security.protocol", "tls")).contains("`tls`"));
        assert_eq!(
            "exactly-once".parse::<DeliveryGuarantee>().ok(),
            Some(DeliveryGuarantee::ExactlyOnce)
        );
        assert!("twice".parse::<DeliveryGuarantee>().is_err());
    }

    #[test]
    fn a_transaction_timeout_shorter_than_a_checkpoint_plus_restart_is_warned_about() {
        let config = ExecutionConfig::default()
            .with_checkpointing(
                CheckpointConfig::default()
                    .with_interval(Duration::from_secs(10))
                    .with_timeout(Duration::from_secs(60)),
            )
            .with_restart_strategy(RestartStrategyConfig::FixedDelay {
                attempts: 3,
                delay: Duration::from_secs(30),
            });
        let warn = |timeout| {
            exactly_once_warning(DeliveryGuarantee::ExactlyOnce, timeout, &config, "sink")
        };
        let warning = warn(Duration::from_secs(90)).expect("a warning");
        assert!(
            warning.contains("90000 ms") && warning.contains("100000 ms"),
            "{warning}"
        );
        assert_eq!(warn(Duration::from_secs(100)), None);
        assert_eq!(
            exactly_once_warning(
                DeliveryGuarantee::AtLeastOnce,
                Duration::from_secs(1),
                &config,
                "sink"
            ),
            None
        );
        let unaligned = config.clone().with_checkpointing(
            CheckpointConfig::default()
                .with_interval(Duration::from_secs(10))
                .with_mode(weir::CheckpointingMode::AtLeastOnce),
        );
        assert!(exactly_once_warning(
            DeliveryGuarantee::ExactlyOnce,
            Duration::from_secs(900),
            &unaligned,
            "sink"
        )
        .is_some_and(|w| w.contains("at-least-once checkpointing")));
        let unchecked = ExecutionConfig::default();
        assert!(exactly_once_warning(
            DeliveryGuarantee::ExactlyOnce,
            Duration::from_secs(900),
            &unchecked,
            "sink"
        )
        .is_some_and(|w| w.contains("without checkpointing")));
    }
}
