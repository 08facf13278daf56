//! Making sure a pending transaction of a completed checkpoint ends up committed: fence its
//! transactional id, read its fate from the log, and send its records again if the broker
//! aborted it — unless an earlier recovery sent them again already and that re-send
//! committed, which the re-sent records' [`RESEND_HEADER`] tells.

use weir::FencingToken;

use super::producer::{apply_deliveries, TrackedProducer};
use super::transactions::PendingTransaction;
use super::{SinkSettings, UnknownOutcome};
use crate::error::KafkaError;
use crate::log_reader::{LogReader, TransactionOutcome, RESEND_HEADER};

/// A transactional producer for `id`, registered with the coordinator: this fences earlier
/// producers with the same id and aborts the transaction they left open.
pub(crate) fn fence<T>(
    settings: &SinkSettings<T>,
    id: &str,
) -> Result<TrackedProducer, KafkaError> {
    let timeout_ms = u64::try_from(settings.transaction_timeout.as_millis()).unwrap_or(u64::MAX);
    let producer = TrackedProducer::create(&settings.connection, Some(id), timeout_ms)?;
    producer
        .init_transactions(settings.operation_timeout)
        .map_err(|e| match e {
            KafkaError::Client { source, .. }
                if matches!(
                    source.rdkafka_error_code(),
                    Some(rdkafka::types::RDKafkaErrorCode::OperationTimedOut)
                        | Some(rdkafka::types::RDKafkaErrorCode::AllBrokersDown)
                ) =>
            {
                settings
                    .connection
                    .unreachable(format!("initializing transactional id {id}: {source}"))
            }
            other => other,
        })?;
    Ok(producer)
}

/// Makes sure the data of `pending` is committed: it is, or it is sent again now on
/// `producer`, which carries the transaction's own id and has been fenced already.
///
/// A re-send happens only while `token` says this process still holds the job, checked after
/// `producer` fenced the id and the fate was read: then the abort was proven by the broker
/// after this process took the id, and a successor that takes the id later fences this
/// re-send (its commit fails) or finds it committed by its marker. A process that lost the
/// job re-sends nothing: its successor restored the transaction and settles it.
pub(crate) fn resolve<T>(
    settings: &SinkSettings<T>,
    log_reader: &mut LogReader,
    producer: &TrackedProducer,
    pending: &mut PendingTransaction,
    token: &FencingToken,
) -> Result<(), KafkaError> {
    let Some(probe) = pending.probe.clone() else {
        return Ok(());
    };
    let outcome = log_reader.await_transaction_outcome(
        &probe.topic,
        probe.partition,
        probe.offset,
        settings.operation_timeout,
    )?;
    let checkpoint_id = pending.checkpoint_id;
    match outcome {
        TransactionOutcome::Committed => {
            tracing::info!(
                checkpoint_id,
                transactional_id = producer.name(),
                "transaction of a completed checkpoint is committed"
            );
            Ok(())
        }
        TransactionOutcome::Aborted => {
            let marker = resend_marker(&probe);
            if log_reader.resend_committed(&probe.topic, probe.partition, probe.offset, &marker)? {
                tracing::info!(
                    checkpoint_id,
                    transactional_id = producer.name(),
                    "the transaction of a completed checkpoint was sent again and committed by an earlier recovery"
                );
                return Ok(());
            }
            token.check()?;
            tracing::warn!(
                checkpoint_id,
                transactional_id = producer.name(),
                records = pending.records.len(),
                "the broker aborted the transaction of a completed checkpoint; sending its records again"
            );
            resend(settings, producer, pending, &marker)
        }
        TransactionOutcome::Unknown => match settings.unknown_outcome {
            UnknownOutcome::Fail => Err(KafkaError::UnknownTransactionOutcome {
                transactional_id: producer.name().to_string(),
                checkpoint_id,
                record: format!("{}-{}@{}", probe.topic, probe.partition, probe.offset),
            }),
            UnknownOutcome::AssumeCommitted => {
                tracing::warn!(checkpoint_id, transactional_id = producer.name(), "transaction's first record is gone from the log; assuming it committed, as configured");
                Ok(())
            }
            UnknownOutcome::Resend => {
                token.check()?;
                tracing::warn!(checkpoint_id, transactional_id = producer.name(), "transaction's first record is gone from the log; sending its records again, as configured");
                resend(settings, producer, pending, &resend_marker(&probe))
            }
        },
        TransactionOutcome::Open => Err(KafkaError::Protocol {
            broker: format!("{}-{}", probe.topic, probe.partition),
            message: format!(
                "the transaction of checkpoint {checkpoint_id} on {} is still open after fencing",
                producer.name()
            ),
        }),
    }
}

/// The value of [`RESEND_HEADER`] on the records sent again for the transaction whose probe
/// record is `probe`.
fn resend_marker(probe: &super::transactions::ProbeRecord) -> String {
    format!("{}/{}/{}", probe.topic, probe.partition, probe.offset)
}

/// Sends `pending`'s records again in a new transaction on `producer` and commits it. Every
/// re-sent record carries [`RESEND_HEADER`] = `marker`, so that a recovery after another
/// crash finds the re-send committed instead of sending the records a third time.
fn resend<T>(
    settings: &SinkSettings<T>,
    producer: &TrackedProducer,
    pending: &mut PendingTransaction,
    marker: &str,
) -> Result<(), KafkaError> {
    producer.begin_transaction()?;
    for (index, record) in pending.records.iter().enumerate() {
        producer.send_with_header(record, index, Some((RESEND_HEADER, marker)))?;
    }
    let reports = producer.flush(settings.operation_timeout)?;
    apply_deliveries(&mut pending.records, reports)?;
    producer.commit_transaction(settings.operation_timeout)
}
