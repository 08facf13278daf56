//! Topic administration for jobs, examples and tests: create topics and add partitions.

use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::types::RDKafkaErrorCode;

use crate::client_config::KafkaConnection;
use crate::error::KafkaError;

fn admin(connection: &KafkaConnection) -> Result<AdminClient<DefaultClientContext>, KafkaError> {
    connection.validate()?;
    connection
        .client_config(&[])
        .create()
        .map_err(|e| KafkaError::client("creating an admin client", e))
}

fn options(connection: &KafkaConnection) -> AdminOptions {
    AdminOptions::new().operation_timeout(Some(connection.request_timeout))
}

/// Creates `topic` with `partitions` partitions (replication 1) unless it exists.
pub fn ensure_topic(
    connection: &KafkaConnection,
    topic: &str,
    partitions: i32,
) -> Result<(), KafkaError> {
    let admin = admin(connection)?;
    let new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let results =
        futures_executor::block_on(admin.create_topics([&new_topic], &options(connection)))
            .map_err(|e| broker_error(connection, format!("creating topic {topic}"), e))?;
    for result in results {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => {
                return Err(KafkaError::Protocol {
                    broker: connection.bootstrap_servers.clone(),
                    message: format!("creating topic {name} failed: {code}"),
                })
            }
        }
    }
    Ok(())
}

/// Grows `topic` to `total` partitions.
pub fn add_partitions(
    connection: &KafkaConnection,
    topic: &str,
    total: usize,
) -> Result<(), KafkaError> {
    let admin = admin(connection)?;
    let request = NewPartitions::new(topic, total);
    let results =
        futures_executor::block_on(admin.create_partitions([&request], &options(connection)))
            .map_err(|e| broker_error(connection, format!("adding partitions to {topic}"), e))?;
    for result in results {
        if let Err((name, code)) = result {
            return Err(KafkaError::Protocol {
                broker: connection.bootstrap_servers.clone(),
                message: format!("growing topic {name} to {total} partitions failed: {code}"),
            });
        }
    }
    Ok(())
}

fn broker_error(
    connection: &KafkaConnection,
    action: String,
    error: rdkafka::error::KafkaError,
) -> KafkaError {
    if matches!(
        error.rdkafka_error_code(),
        Some(RDKafkaErrorCode::OperationTimedOut | RDKafkaErrorCode::AllBrokersDown)
    ) {
        connection.unreachable(format!("{action}: {error}"))
    } else {
        KafkaError::client(action, error)
    }
}
