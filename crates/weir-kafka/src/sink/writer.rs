//! The Kafka sink's per-subtask writer.

use std::collections::HashMap;
use std::sync::Arc;

use weir::connectors::sink::SinkWriter;
use weir::{BoxError, FunctionStateContext, RuntimeContext};

use super::producer::{Delivery, TrackedProducer};
use super::transactions::{
    free_slot, id_base, ids_to_fence, restored_for_subtask, transactional_id, BufferedRecord,
    PendingTransaction, ProbeRecord, SubtaskTransactions, SubtaskTransactionsRef,
};
use super::{DeliveryGuarantee, SinkSettings};
use crate::error::KafkaError;
use crate::log_reader::{LogReader, TransactionOutcome};

/// Union list state: one [`SubtaskTransactions`] per subtask.
const TRANSACTIONS_STATE: &str = "kafka-sink-transactions";

/// Writes between two polls of the producer's delivery callbacks.
const POLL_EVERY: u32 = 1024;

/// A transaction being written.
struct OpenTransaction {
    slot: u32,
    records: Vec<BufferedRecord>,
}

/// The exactly-once machinery of one subtask.
struct Transactional {
    id_base: String,
    /// One producer per slot (created and fenced in `initialize_state`).
    pool: Vec<Option<TrackedProducer>>,
    current: Option<OpenTransaction>,
    pending: Vec<PendingTransaction>,
    log_reader: LogReader,
}

enum Mode {
    Plain {
        producer: TrackedProducer,
        at_least_once: bool,
    },
    ExactlyOnce(Box<Transactional>),
}

/// Writes one sink subtask's records to Kafka.
pub struct KafkaSinkWriter<T> {
    settings: Arc<SinkSettings<T>>,
    context: RuntimeContext,
    mode: Mode,
    writes_since_poll: u32,
}

impl<T> KafkaSinkWriter<T> {
    pub(crate) fn new(
        settings: Arc<SinkSettings<T>>,
        context: RuntimeContext,
    ) -> Result<Self, KafkaError> {
        let mode = match settings.guarantee {
            DeliveryGuarantee::ExactlyOnce => Mode::ExactlyOnce(Box::new(Transactional {
                id_base: id_base(&settings.transactional_id_prefix, context.operator_uid()),
                pool: Vec::new(),
                current: None,
                pending: Vec::new(),
                log_reader: LogReader::new(
                    &settings.connection.bootstrap_servers,
                    settings.connection.request_timeout,
                ),
            })),
            guarantee => Mode::Plain {
                producer: TrackedProducer::create(&settings.connection, None, 0)?,
                at_least_once: guarantee == DeliveryGuarantee::AtLeastOnce,
            },
        };
        Ok(Self {
            settings,
            context,
            mode,
            writes_since_poll: 0,
        })
    }

    fn transactional_producer(&self, id: &str) -> Result<TrackedProducer, KafkaError> {
        let timeout_ms =
            u64::try_from(self.settings.transaction_timeout.as_millis()).unwrap_or(u64::MAX);
        let producer = TrackedProducer::create(&self.settings.connection, Some(id), timeout_ms)?;
        producer
            .init_transactions(self.settings.operation_timeout)
            .map_err(|e| match e {
                KafkaError::Client { source, .. }
                    if matches!(
                        source.rdkafka_error_code(),
                        Some(rdkafka::types::RDKafkaErrorCode::OperationTimedOut)
                            | Some(rdkafka::types::RDKafkaErrorCode::AllBrokersDown)
                    ) =>
                {
                    KafkaError::BrokerUnreachable {
                        servers: self.settings.connection.bootstrap_servers.clone(),
                        detail: format!("initializing transactional id {id}: {source}"),
                    }
                }
                other => other,
            })?;
        Ok(producer)
    }
}

/// Checks delivery reports: fills in the partition each record went to and returns the
/// probe (the first record's position); fails on the first undelivered record.
fn apply_deliveries(
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
                records.len() - delivered,
                records.len()
            ),
        });
    }
    Ok(probe)
}

/// Sends `records` again in a new transaction on `producer` and commits it.
fn resend(
    producer: &TrackedProducer,
    records: &mut [BufferedRecord],
    timeout: std::time::Duration,
) -> Result<(), KafkaError> {
    producer.begin_transaction()?;
    for (index, record) in records.iter().enumerate() {
        producer.send(record, index)?;
    }
    let reports = producer.flush(timeout)?;
    apply_deliveries(records, reports)?;
    producer.commit_transaction(timeout)
}

impl Transactional {
    /// Makes sure the data of `pending` is committed: it is, or it is sent again now.
    /// `producer` carries the transaction's own id and has been fenced already.
    fn resolve(
        &mut self,
        producer: &TrackedProducer,
        pending: &mut PendingTransaction,
        timeout: std::time::Duration,
    ) -> Result<(), KafkaError> {
        let Some(probe) = &pending.probe else {
            return Ok(());
        };
        let outcome = self.log_reader.await_transaction_outcome(
            &probe.topic,
            probe.partition,
            probe.offset,
            timeout,
        )?;
        match outcome {
            TransactionOutcome::Committed => {
                tracing::info!(
                    checkpoint_id = pending.checkpoint_id,
                    transactional_id = producer.name(),
                    "transaction of a completed checkpoint is committed"
                );
                Ok(())
            }
            TransactionOutcome::Aborted => {
                tracing::warn!(
                    checkpoint_id = pending.checkpoint_id,
                    transactional_id = producer.name(),
                    records = pending.records.len(),
                    "the broker aborted the transaction of a completed checkpoint; sending its records again"
                );
                resend(producer, &mut pending.records, timeout)
            }
            TransactionOutcome::Open => Err(KafkaError::Protocol {
                broker: format!("{}-{}", probe.topic, probe.partition),
                message: format!(
                    "the transaction of checkpoint {} on {} is still open after fencing",
                    pending.checkpoint_id,
                    producer.name()
                ),
            }),
        }
    }
}

impl<T: Send + 'static> SinkWriter<T> for KafkaSinkWriter<T> {
    fn initialize_state(&mut self, ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
        if !matches!(self.mode, Mode::ExactlyOnce(_)) {
            return Ok(());
        }
        let restored: Vec<SubtaskTransactions> =
            ctx.operator_state().get_union_list(TRANSACTIONS_STATE)?;
        let subtask = self.context.subtask_index();
        let parallelism = self.context.parallelism();
        let pool_size = self.settings.pool_size;
        let timeout = self.settings.operation_timeout;
        let own_base = match &self.mode {
            Mode::ExactlyOnce(t) => t.id_base.clone(),
            Mode::Plain { .. } => return Ok(()),
        };
        let handled = restored_for_subtask(&restored, subtask, parallelism);
        // Fencing every id first aborts whatever the failed run left open, before any
        // pending transaction is judged by its markers.
        let mut fenced: HashMap<String, TrackedProducer> = HashMap::new();
        for id in ids_to_fence(&own_base, subtask, pool_size, &handled) {
            let producer = self.transactional_producer(&id)?;
            fenced.insert(id, producer);
        }
        let Mode::ExactlyOnce(transactional) = &mut self.mode else {
            return Ok(());
        };
        for entry in &handled {
            let mut pending = entry.pending.clone();
            pending.sort_by_key(|p| p.checkpoint_id);
            for mut p in pending {
                let id = transactional_id(&entry.id_base, entry.subtask, p.slot);
                let producer = fenced.get(&id).ok_or_else(|| {
                    KafkaError::Config(format!("restored transaction names unknown slot {id}"))
                })?;
                transactional.resolve(producer, &mut p, timeout)?;
            }
        }
        transactional.pool = (0..pool_size)
            .map(|slot| fenced.remove(&transactional_id(&own_base, subtask, slot)))
            .collect();
        ctx.operator_state()
            .update_union_list::<SubtaskTransactions>(TRANSACTIONS_STATE, &[])?;
        Ok(())
    }

    fn write(&mut self, record: T) -> Result<(), BoxError> {
        let produced = self
            .settings
            .serializer
            .serialize(&record)
            .map_err(|message| KafkaError::Serialize {
                sink: self.context.operator_name().to_string(),
                message,
            })?;
        let buffered = BufferedRecord {
            topic: produced.topic,
            partition: produced.partition.unwrap_or(-1),
            key: produced.key,
            value: produced.value,
            timestamp: produced.timestamp,
        };
        self.writes_since_poll += 1;
        let poll = self.writes_since_poll >= POLL_EVERY;
        if poll {
            self.writes_since_poll = 0;
        }
        match &mut self.mode {
            Mode::Plain {
                producer,
                at_least_once,
            } => {
                producer.send(&buffered, 0)?;
                if poll {
                    producer.poll();
                    check_plain_reports(producer, *at_least_once)?;
                }
            }
            Mode::ExactlyOnce(t) => {
                if t.current.is_none() {
                    let slot = free_slot(&t.pending, self.settings.pool_size).ok_or_else(|| {
                        KafkaError::Config(format!(
                            "all {} transactional producers hold transactions of pending checkpoints; raise the transaction pool size or lower max concurrent checkpoints",
                            self.settings.pool_size
                        ))
                    })?;
                    let producer = pool_producer(&t.pool, slot)?;
                    producer.begin_transaction()?;
                    t.current = Some(OpenTransaction {
                        slot,
                        records: Vec::new(),
                    });
                }
                if let Some(open) = t.current.as_mut() {
                    let producer = pool_producer(&t.pool, open.slot)?;
                    producer.send(&buffered, open.records.len())?;
                    open.records.push(buffered);
                    if poll {
                        producer.poll();
                    }
                }
            }
        }
        Ok(())
    }

    fn flush(&mut self, end_of_input: bool) -> Result<(), BoxError> {
        let timeout = self.settings.operation_timeout;
        match &mut self.mode {
            Mode::Plain {
                producer,
                at_least_once,
            } => {
                if *at_least_once || end_of_input {
                    let reports = producer.flush(timeout)?;
                    check_reports(reports, *at_least_once || end_of_input)?;
                }
                Ok(())
            }
            Mode::ExactlyOnce(t) => {
                if !end_of_input || self.context.is_checkpointing() {
                    // Pre-commit happens in snapshot_state; at the end of input the final
                    // checkpoint commits what is pending.
                    return Ok(());
                }
                // Without checkpoints nothing is replayed: commit everything now.
                if let Some(mut open) = t.current.take() {
                    let producer = pool_producer(&t.pool, open.slot)?;
                    let reports = producer.flush(timeout)?;
                    apply_deliveries(&mut open.records, reports)?;
                    producer.commit_transaction(timeout)?;
                }
                Ok(())
            }
        }
    }

    fn snapshot_state(&mut self, ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
        let Mode::ExactlyOnce(t) = &mut self.mode else {
            return Ok(());
        };
        let checkpoint_id = ctx
            .checkpoint_id()
            .ok_or("snapshot without a checkpoint id")?;
        if let Some(mut open) = t.current.take() {
            let producer = pool_producer(&t.pool, open.slot)?;
            let reports = producer.flush(self.settings.operation_timeout)?;
            let probe = apply_deliveries(&mut open.records, reports)?;
            t.pending.push(PendingTransaction {
                checkpoint_id,
                slot: open.slot,
                probe,
                records: open.records,
            });
        }
        let state = SubtaskTransactionsRef {
            id_base: &t.id_base,
            subtask: self.context.subtask_index(),
            pool_size: self.settings.pool_size,
            pending: &t.pending,
        };
        ctx.operator_state()
            .update_union_list(TRANSACTIONS_STATE, std::slice::from_ref(&state))?;
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), BoxError> {
        let timeout = self.settings.operation_timeout;
        let Mode::ExactlyOnce(t) = &mut self.mode else {
            return Ok(());
        };
        t.pending.sort_by_key(|p| p.checkpoint_id);
        while t
            .pending
            .first()
            .is_some_and(|p| p.checkpoint_id <= checkpoint_id)
        {
            let mut p = t.pending.remove(0);
            let producer = pool_producer(&t.pool, p.slot)?;
            if let Some(hook) = &self.settings.before_commit {
                hook(p.checkpoint_id, producer.name());
            }
            match producer.commit_transaction(timeout) {
                Ok(()) => {}
                Err(e) => {
                    // The broker may have aborted it, or a zombie fenced it: find out from the
                    // log and re-send if needed, under the same id.
                    tracing::warn!(checkpoint_id = p.checkpoint_id, error = %e, "commit failed; checking the transaction's fate");
                    let id = producer.name().to_string();
                    let slot = p.slot as usize;
                    if let Some(old) = t.pool.get_mut(slot) {
                        *old = None;
                    }
                    let fresh = {
                        let timeout_ms =
                            u64::try_from(self.settings.transaction_timeout.as_millis())
                                .unwrap_or(u64::MAX);
                        let fresh = TrackedProducer::create(
                            &self.settings.connection,
                            Some(&id),
                            timeout_ms,
                        )?;
                        fresh.init_transactions(timeout)?;
                        fresh
                    };
                    t.resolve(&fresh, &mut p, timeout)?;
                    if let Some(entry) = t.pool.get_mut(slot) {
                        *entry = Some(fresh);
                    }
                }
            }
        }
        Ok(())
    }

    fn close(&mut self) -> Result<(), BoxError> {
        if let Mode::ExactlyOnce(t) = &mut self.mode {
            if let Some(open) = t.current.take() {
                if let Ok(producer) = pool_producer(&t.pool, open.slot) {
                    // Best effort: a restart fences the id and aborts it anyway.
                    let _ = producer.abort_transaction(self.settings.operation_timeout);
                }
            }
        }
        Ok(())
    }
}

fn pool_producer(
    pool: &[Option<TrackedProducer>],
    slot: u32,
) -> Result<&TrackedProducer, KafkaError> {
    pool.get(slot as usize)
        .and_then(Option::as_ref)
        .ok_or_else(|| {
            KafkaError::Config(format!(
                "transactional producer slot {slot} is not initialized"
            ))
        })
}

fn check_plain_reports(producer: &TrackedProducer, fail: bool) -> Result<(), KafkaError> {
    check_reports(producer.take_reports(), fail)
}

/// Fails on an undelivered record when `fail`, else logs it.
fn check_reports(reports: Vec<(usize, Delivery)>, fail: bool) -> Result<(), KafkaError> {
    for (_, report) in reports {
        if let Err(message) = report {
            if fail {
                return Err(KafkaError::Delivery {
                    topic: message.topic,
                    message: message.reason,
                });
            }
            tracing::warn!(topic = %message.topic, reason = %message.reason, "Kafka record not delivered");
        }
    }
    Ok(())
}
