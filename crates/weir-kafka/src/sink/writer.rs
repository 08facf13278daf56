//! The Kafka sink's per-subtask writer.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use weir::connectors::commit_metrics::CommitMetrics;
use weir::connectors::sink::SinkWriter;
use weir::{BoxError, FunctionStateContext, RuntimeContext};

use super::producer::{apply_deliveries, Delivery, TrackedProducer};
use super::recovery::{fence, resolve};
use super::transactions::{
    free_slot, id_base, ids_to_fence, restored_for_subtask, transactional_id, BufferedRecord,
    PendingTransaction, SubtaskTransactions, SubtaskTransactionsRef,
};
use super::{DeliveryGuarantee, SinkSettings};
use crate::error::KafkaError;
use crate::log_reader::LogReader;

/// Modulo-subtask list state: one [`SubtaskTransactions`] per subtask, handed after a
/// rescale to new subtask `old mod P` alone (not decoded by every subtask, as union state
/// would be) and, with its buffered records, written to a state file rather than into the
/// checkpoint's metadata.
const TRANSACTIONS_STATE: &str = "kafka-sink-transactions";

/// Writes between two polls of the producer's delivery callbacks.
const POLL_EVERY: u32 = 1024;

/// How long aborting the open transaction may take when the writer goes away.
const ABORT_ON_DROP_TIMEOUT: Duration = Duration::from_secs(5);

/// A transaction being written.
struct OpenTransaction {
    slot: u32,
    records: Vec<BufferedRecord>,
}

/// The exactly-once machinery of one subtask.
struct Transactional {
    id_base: String,
    /// One producer per slot (fenced in `initialize_state`; grown when all are held).
    pool: Vec<Option<TrackedProducer>>,
    current: Option<OpenTransaction>,
    pending: Vec<PendingTransaction>,
    /// `pendingTransactions`, `commitLatencyMs`, `numCommittedTransactions`.
    metrics: CommitMetrics,
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
    log_reader: LogReader,
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
                metrics: CommitMetrics::new(&context),
            })),
            guarantee => Mode::Plain {
                producer: TrackedProducer::create(&settings.connection, None, 0)?,
                at_least_once: guarantee == DeliveryGuarantee::AtLeastOnce,
            },
        };
        let log_reader =
            LogReader::for_connection(&settings.connection, settings.connection.request_timeout)?;
        Ok(Self {
            settings,
            context,
            mode,
            log_reader,
            writes_since_poll: 0,
        })
    }

    /// Commits the pending transactions of checkpoints up to `checkpoint_id`, oldest first.
    fn commit_up_to(&mut self, checkpoint_id: u64) -> Result<(), BoxError> {
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
            // A process that lost its job commits nothing more: the new holder settles this
            // transaction from its checkpoint.
            self.context.fencing_token().check()?;
            if let Some(hook) = &self.settings.before_commit {
                hook(p.checkpoint_id, producer.name());
            }
            let Err(e) = producer.commit_transaction(self.settings.operation_timeout) else {
                t.metrics.committed(Some(p.checkpoint_id));
                t.metrics.set_pending(t.pending.len());
                continue;
            };
            // The broker may have aborted it (timeout) or a zombie fenced it. Re-sending it
            // now is right only if nothing written after it is in the log yet, or the
            // re-sent records would follow newer ones for the same keys.
            if !t.pending.is_empty() {
                t.pending.insert(0, p);
                return Err(KafkaError::Protocol {
                    broker: self.settings.connection.bootstrap_servers.clone(),
                    message: format!(
                        "committing the transaction of checkpoint {checkpoint_id} failed ({e}) while later transactions are pending; failing so that recovery settles them in order"
                    ),
                }
                .into());
            }
            tracing::warn!(checkpoint_id = p.checkpoint_id, error = %e, "commit failed; checking the transaction's fate");
            // The open transaction's records go back in after the re-sent ones.
            if let Some(open) = &t.current {
                let producer = pool_producer(&t.pool, open.slot)?;
                producer.abort_transaction(self.settings.operation_timeout)?;
            }
            // A failed commit is often the sign that another process took the job over:
            // fencing the id again would fence the new holder's producer.
            self.context.fencing_token().check()?;
            let id = transactional_id(&t.id_base, self.context.subtask_index(), p.slot);
            if let Some(slot) = t.pool.get_mut(p.slot as usize) {
                *slot = None;
            }
            let fresh = fence(&self.settings, &id)?;
            resolve(
                &self.settings,
                &mut self.log_reader,
                &fresh,
                &mut p,
                self.context.fencing_token(),
            )?;
            t.metrics.committed(Some(p.checkpoint_id));
            t.metrics.set_pending(t.pending.len());
            if let Some(slot) = t.pool.get_mut(p.slot as usize) {
                *slot = Some(fresh);
            }
            if let Some(open) = &t.current {
                let producer = pool_producer(&t.pool, open.slot)?;
                producer.begin_transaction()?;
                for (index, record) in open.records.iter().enumerate() {
                    producer.send(record, index)?;
                }
            }
        }
        Ok(())
    }

    /// Aborts the open transaction (best effort): its records were never part of a
    /// checkpoint, and an open transaction would hold back `read_committed` consumers until
    /// the broker's timeout.
    fn abort_open(&mut self, timeout: Duration) {
        if let Mode::ExactlyOnce(t) = &mut self.mode {
            if let Some(open) = t.current.take() {
                if let Ok(producer) = pool_producer(&t.pool, open.slot) {
                    if let Err(e) = producer.abort_transaction(timeout) {
                        tracing::warn!(transactional_id = producer.name(), error = %e, "could not abort the open transaction; a restart fences it");
                    }
                }
            }
        }
    }
}

impl<T: Send + 'static> SinkWriter<T> for KafkaSinkWriter<T> {
    fn initialize_state(&mut self, ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
        // Fencing the transactional ids below would fence the job's current holder if this
        // process lost the job while it stalled: check first.
        self.context.fencing_token().check()?;
        // Restored transactions are settled whatever the guarantee is now: they belong to
        // completed checkpoints.
        let restored: Vec<SubtaskTransactions> = ctx
            .operator_state()
            .get_modulo_subtask_list(TRANSACTIONS_STATE)?;
        let subtask = self.context.subtask_index();
        let handled = restored_for_subtask(&restored, subtask, self.context.parallelism());
        let own = match &self.mode {
            Mode::ExactlyOnce(t) => Some((t.id_base.clone(), self.settings.pool_size)),
            Mode::Plain { .. } => None,
        };
        // Fencing every id first aborts whatever the failed run left open, before any
        // pending transaction is judged by its markers.
        let ids = ids_to_fence(
            own.as_ref()
                .map(|(base, size)| (base.as_str(), subtask, *size)),
            &handled,
        );
        let started = std::time::Instant::now();
        let count = ids.len();
        // One coordinator round trip each, independent of one another: in parallel.
        let settings = &self.settings;
        let results: Vec<(String, Result<TrackedProducer, KafkaError>)> =
            std::thread::scope(|scope| {
                let handles: Vec<_> = ids
                    .into_iter()
                    .map(|id| {
                        scope.spawn(move || {
                            let producer = fence(settings, &id);
                            (id, producer)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            (
                                String::new(),
                                Err(KafkaError::Config("fencing thread panicked".into())),
                            )
                        })
                    })
                    .collect()
            });
        let mut fenced: HashMap<String, TrackedProducer> = HashMap::new();
        for (id, producer) in results {
            fenced.insert(id, producer?);
        }
        tracing::info!(subtask, count, elapsed = ?started.elapsed(), "fenced transactional ids");
        for entry in &handled {
            let mut pending = entry.pending.clone();
            pending.sort_by_key(|p| p.checkpoint_id);
            for mut p in pending {
                let id = transactional_id(&entry.id_base, entry.subtask, p.slot);
                let producer = fenced.get(&id).ok_or_else(|| {
                    KafkaError::Config(format!("restored transaction names unknown slot {id}"))
                })?;
                resolve(
                    &self.settings,
                    &mut self.log_reader,
                    producer,
                    &mut p,
                    self.context.fencing_token(),
                )?;
                if let Mode::ExactlyOnce(t) = &mut self.mode {
                    t.metrics.committed(None);
                }
            }
        }
        if let (Mode::ExactlyOnce(t), Some((base, size))) = (&mut self.mode, own) {
            t.pool = (0..size)
                .map(|slot| fenced.remove(&transactional_id(&base, subtask, slot)))
                .collect();
        }
        ctx.operator_state()
            .update_modulo_subtask_list::<SubtaskTransactions>(TRANSACTIONS_STATE, &[])?;
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
                    check_reports(producer.take_reports(), *at_least_once)?;
                }
            }
            Mode::ExactlyOnce(t) => {
                if t.current.is_none() {
                    let slot = match free_slot(&t.pending, t.pool.len() as u32) {
                        Some(slot) => slot,
                        None => {
                            // Every producer holds a pending transaction (checkpoints have been
                            // failing): grow the pool rather than stop.
                            let slot = t.pool.len() as u32;
                            let id =
                                transactional_id(&t.id_base, self.context.subtask_index(), slot);
                            tracing::warn!(transactional_id = %id, pending = t.pending.len(), "all transactional producers hold pending transactions; adding one");
                            t.pool.push(Some(fence(&self.settings, &id)?));
                            slot
                        }
                    };
                    pool_producer(&t.pool, slot)?.begin_transaction()?;
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
            Mode::ExactlyOnce(_) => {
                if !end_of_input {
                    // Pre-commit happens in snapshot_state.
                    return Ok(());
                }
                if self.context.is_checkpointing() {
                    // The final checkpoint's barrier follows the end of input: it flushes the
                    // open transaction — with what operators emitted when their input ended —
                    // and its completion commits it (FLIP-147).
                    return Ok(());
                }
                // Without checkpoints nothing is replayed: commit everything now — the
                // transactions savepoints pre-committed first (a savepoint sends no completion
                // notice), then the open one.
                self.commit_up_to(u64::MAX)?;
                let Mode::ExactlyOnce(t) = &mut self.mode else {
                    return Ok(());
                };
                if let Some(mut open) = t.current.take() {
                    let producer = pool_producer(&t.pool, open.slot)?;
                    let reports = producer.flush(timeout)?;
                    apply_deliveries(&mut open.records, reports)?;
                    self.context.fencing_token().check()?;
                    producer.commit_transaction(timeout)?;
                    t.metrics.committed(None);
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
            t.metrics.pre_committed(checkpoint_id, t.pending.len());
        }
        let state = SubtaskTransactionsRef {
            id_base: &t.id_base,
            subtask: self.context.subtask_index(),
            pool_size: t.pool.len() as u32,
            pending: &t.pending,
        };
        ctx.operator_state()
            .update_modulo_subtask_list(TRANSACTIONS_STATE, std::slice::from_ref(&state))?;
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), BoxError> {
        self.commit_up_to(checkpoint_id)
    }

    fn close(&mut self) -> Result<(), BoxError> {
        self.abort_open(self.settings.operation_timeout);
        Ok(())
    }
}

impl<T> Drop for KafkaSinkWriter<T> {
    fn drop(&mut self) {
        // Cancelled, failed or stopped with a savepoint: what was written after the last
        // barrier belongs to no checkpoint.
        self.abort_open(ABORT_ON_DROP_TIMEOUT);
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

/// Fails on an undelivered record when `fail`, else logs it.
fn check_reports(reports: Vec<(usize, Delivery)>, fail: bool) -> Result<(), KafkaError> {
    for (_, report) in reports {
        if let Err(failure) = report {
            if fail {
                return Err(KafkaError::Delivery {
                    topic: failure.topic,
                    message: failure.reason,
                });
            }
            tracing::warn!(topic = %failure.topic, reason = %failure.reason, "Kafka record not delivered");
        }
    }
    Ok(())
}
