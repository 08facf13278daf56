//! Making sure a pending transaction of a completed checkpoint ends up committed: fence its
//! transactional id, read its fate from the log, and send its records again if the broker
//! aborted it.

use super::producer::{apply_deliveries, TrackedProducer};
use super::transactions::PendingTransaction;
use super::{SinkSettings, UnknownOutcome};
use crate::error::KafkaError;
use crate::log_reader::{LogReader, TransactionOutcome};

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
                KafkaError::BrokerUnreachable {
                    servers: settings.connection.bootstrap_servers.clone(),
                    detail: format!("initializing transactional id {id}: {source}"),
                }
            }
            other => other,
        })?;
    Ok(producer)
}

/// Makes sure the data of `pending` is committed: it is, or it is sent again now on
/// `producer`, which carries the transaction's own id and has been fenced already.
pub(crate) fn resolve<T>(
    settings: &SinkSettings<T>,
    log_reader: &mut LogReader,
    producer: &TrackedProducer,
    pending: &mut PendingTransaction,
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
            tracing::warn!(
                checkpoint_id,
                transactional_id = producer.name(),
                records = pending.records.len(),
                "the broker aborted the transaction of a completed checkpoint; sending its records again"
            );
            let original =
                log_reader.producer_id_at(&probe.topic, probe.partition, probe.offset)?;
            resend(settings, log_reader, producer, pending, original)
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
                tracing::warn!(checkpoint_id, transactional_id = producer.name(), "transaction's first record is gone from the log; sending its records again, as configured");
                resend(settings, log_reader, producer, pending, None)
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

/// Sends `pending`'s records again in a new transaction on `producer` and commits it. The
/// re-sent records must carry the same producer id as the original ones (`original`), or a
/// second crash would not recognize the re-send as committed and would send them once more;
/// when the id changed (the transactional id expired, or its epochs ran out), the re-send is
/// aborted and the job fails unless that risk was accepted in the configuration.
fn resend<T>(
    settings: &SinkSettings<T>,
    log_reader: &mut LogReader,
    producer: &TrackedProducer,
    pending: &mut PendingTransaction,
    original: Option<i64>,
) -> Result<(), KafkaError> {
    producer.begin_transaction()?;
    for (index, record) in pending.records.iter().enumerate() {
        producer.send(record, index)?;
    }
    let reports = producer.flush(settings.operation_timeout)?;
    let probe = apply_deliveries(&mut pending.records, reports)?;
    if let (Some(original), Some(probe)) = (original, &probe) {
        let now = log_reader.producer_id_at(&probe.topic, probe.partition, probe.offset)?;
        if now != Some(original) && !settings.allow_resend_under_new_producer_id {
            let _ = producer.abort_transaction(settings.operation_timeout);
            return Err(KafkaError::ProducerIdChanged {
                transactional_id: producer.name().to_string(),
                checkpoint_id: pending.checkpoint_id,
                before: original,
                after: now.unwrap_or(-1),
            });
        }
    }
    producer.commit_transaction(settings.operation_timeout)
}
