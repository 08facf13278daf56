//! A librdkafka producer that reports, per record, where it landed or why it did not.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError as RdKafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{
    BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext, PurgeConfig,
};
use rdkafka::Message;

use super::transactions::{BufferedRecord, ProbeRecord};
use crate::client_config::KafkaConnection;
use crate::error::KafkaError;

/// Why a record was not delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeliveryFailure {
    /// The record's topic and partition, as `topic-partition`.
    pub topic: String,
    /// librdkafka's reason.
    pub reason: String,
}

/// Where a record landed (partition, offset), or why it did not.
pub(crate) type Delivery = Result<(i32, i64), DeliveryFailure>;

/// Collects delivery reports, tagged with the index the writer gave each record, and sends
/// librdkafka's own logs and errors to `tracing`.
#[derive(Default)]
pub(crate) struct DeliveryTracker {
    reports: Mutex<Vec<(usize, Delivery)>>,
}

impl ClientContext for DeliveryTracker {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => tracing::error!(facility, "librdkafka: {message}"),
            RDKafkaLogLevel::Warning => tracing::warn!(facility, "librdkafka: {message}"),
            _ => tracing::debug!(facility, "librdkafka: {message}"),
        }
    }
    fn error(&self, error: RdKafkaError, reason: &str) {
        tracing::warn!(%error, "librdkafka producer: {reason}");
    }
}

impl ProducerContext for DeliveryTracker {
    type DeliveryOpaque = usize;
    fn delivery(&self, result: &DeliveryResult<'_>, index: usize) {
        let report = match result {
            Ok(message) => Ok((message.partition(), message.offset())),
            Err((error, message)) => Err(DeliveryFailure {
                topic: format!("{}-{}", message.topic(), message.partition()),
                reason: error.to_string(),
            }),
        };
        if let Ok(mut reports) = self.reports.lock() {
            reports.push((index, report));
        }
    }
}

/// A producer and its delivery reports.
pub(crate) struct TrackedProducer {
    producer: BaseProducer<DeliveryTracker>,
    /// For errors: the transactional id, or "producer".
    name: String,
}

impl TrackedProducer {
    /// A producer; transactional when `transactional_id` is set.
    pub fn create(
        connection: &KafkaConnection,
        transactional_id: Option<&str>,
        transaction_timeout_ms: u64,
    ) -> Result<Self, KafkaError> {
        let timeout = transaction_timeout_ms.to_string();
        let mut defaults = vec![
            ("enable.idempotence", "true"),
            ("linger.ms", "5"),
            ("compression.type", "none"),
        ];
        if let Some(id) = transactional_id {
            defaults.push(("transactional.id", id));
            defaults.push(("transaction.timeout.ms", &timeout));
        }
        let producer = connection
            .client_config(&defaults)
            .create_with_context(DeliveryTracker::default())
            .map_err(|e| KafkaError::client("creating a Kafka producer", e))?;
        Ok(Self {
            producer,
            name: transactional_id.unwrap_or("producer").to_string(),
        })
    }

    /// The transactional id (or "producer").
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sends one record (asynchronously), waiting while librdkafka's queue is full.
    pub fn send(&self, record: &BufferedRecord, index: usize) -> Result<(), KafkaError> {
        self.send_with_header(record, index, None)
    }

    /// Sends one record with one extra header.
    pub fn send_with_header(
        &self,
        record: &BufferedRecord,
        index: usize,
        header: Option<(&str, &str)>,
    ) -> Result<(), KafkaError> {
        let mut base = BaseRecord::with_opaque_to(&record.topic, index);
        if let Some((key, value)) = header {
            base = base.headers(OwnedHeaders::new().insert(Header {
                key,
                value: Some(value),
            }));
        }
        if record.partition >= 0 {
            base = base.partition(record.partition);
        }
        if let Some(key) = &record.key {
            base = base.key(key.as_slice());
        }
        if let Some(value) = &record.value {
            base = base.payload(value.as_slice());
        }
        if let Some(ts) = record.timestamp {
            base = base.timestamp(ts);
        }
        loop {
            match self.producer.send(base) {
                Ok(()) => return Ok(()),
                Err((RdKafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    base = back;
                    self.producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => {
                    return Err(KafkaError::Delivery {
                        topic: record.topic.clone(),
                        message: e.to_string(),
                    })
                }
            }
        }
    }

    /// Serves delivery callbacks without waiting.
    pub fn poll(&self) {
        self.producer.poll(Duration::ZERO);
    }

    /// Waits until every record sent is delivered or failed, and returns their reports.
    ///
    /// librdkafka's flush (through `rdkafka`) sleeps in steps of up to 100 ms between checks,
    /// which would add up to 100 ms to every checkpoint barrier; this asks librdkafka to send
    /// at once and then polls in 1 ms steps.
    pub fn flush(&self, timeout: Duration) -> Result<Vec<(usize, Delivery)>, KafkaError> {
        let deadline = Instant::now() + timeout;
        // A zero-timeout flush only wakes the sender (linger is cut short); it reports a
        // timeout while records are in flight, which is expected here.
        let _ = self.producer.flush(Duration::ZERO);
        loop {
            self.producer.poll(Duration::ZERO);
            if self.producer.in_flight_count() == 0 {
                return Ok(self.take_reports());
            }
            if Instant::now() >= deadline {
                return Err(KafkaError::Delivery {
                    topic: self.name.clone(),
                    message: format!(
                        "{} records still unacknowledged after {timeout:?}",
                        self.producer.in_flight_count()
                    ),
                });
            }
            self.producer.poll(Duration::from_millis(1));
        }
    }

    /// The delivery reports received so far.
    pub fn take_reports(&self) -> Vec<(usize, Delivery)> {
        self.producer
            .context()
            .reports
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default()
    }

    /// Registers the transactional id with the coordinator: fences earlier producers with
    /// the same id and aborts the transaction they left open.
    pub fn init_transactions(&self, timeout: Duration) -> Result<(), KafkaError> {
        self.producer.init_transactions(timeout).map_err(|e| {
            KafkaError::client(format!("initializing transactions of {}", self.name), e)
        })
    }

    /// Starts a transaction.
    pub fn begin_transaction(&self) -> Result<(), KafkaError> {
        self.producer
            .begin_transaction()
            .map_err(|e| KafkaError::client(format!("beginning a transaction on {}", self.name), e))
    }

    /// Commits the open transaction.
    pub fn commit_transaction(&self, timeout: Duration) -> Result<(), KafkaError> {
        self.producer.commit_transaction(timeout).map_err(|e| {
            KafkaError::client(format!("committing the transaction of {}", self.name), e)
        })
    }

    /// Aborts the open transaction. Its records still queued are purged first, and those
    /// in flight are waited for, their delivery reports drained: librdkafka's abort waits for
    /// them, and a `BaseProducer` only receives them while polled. In-flight records are not
    /// purged: a produce request already sent could still be appended after the ABORT
    /// marker, where a broker that does not fence the old epoch (tansu) would count it as
    /// the start of the next transaction.
    pub fn abort_transaction(&self, timeout: Duration) -> Result<(), KafkaError> {
        self.producer.purge(PurgeConfig::default().queue());
        let deadline = Instant::now() + timeout;
        while self.producer.in_flight_count() > 0 && Instant::now() < deadline {
            self.producer.poll(Duration::from_millis(1));
        }
        let _ = self.take_reports();
        self.producer.abort_transaction(timeout).map_err(|e| {
            KafkaError::client(format!("aborting the transaction of {}", self.name), e)
        })
    }
}

/// Checks a transaction's delivery reports: fills in the partition each record went to and
/// returns the probe (the first record's position); fails on the first undelivered record.
pub(crate) fn apply_deliveries(
    records: &mut [BufferedRecord],
    reports: Vec<(usize, Delivery)>,
) -> Result<Option<ProbeRecord>, KafkaError> {
    let mut probe = None;
    let mut delivered = 0usize;
    for (index, report) in reports {
        let Some(record) = records.get_mut(index) else {
            continue;
        };
        match report {
            Ok((partition, offset)) => {
                record.partition = partition;
                delivered += 1;
                if index == 0 {
                    probe = Some(ProbeRecord {
                        topic: record.topic.clone(),
                        partition,
                        offset,
                    });
                }
            }
            Err(failure) => {
                return Err(KafkaError::Delivery {
                    topic: failure.topic,
                    message: failure.reason,
                })
            }
        }
    }
    if delivered != records.len() {
        return Err(KafkaError::Delivery {
            topic: records.first().map(|r| r.topic.clone()).unwrap_or_default(),
            message: format!(
                "{} of {} records of the transaction were not acknowledged",
                records.len().saturating_sub(delivered),
                records.len()
            ),
        });
    }
    Ok(probe)
}
