//! What the Kafka tests share: the broker's address and unique names.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The address of the Kafka-protocol broker the tests run against: `WEIR_KAFKA_BOOTSTRAP`,
/// which `scripts/test.sh` sets after starting one (`scripts/kafka-broker.sh start` starts it
/// by hand).
pub fn bootstrap() -> String {
    std::env::var("WEIR_KAFKA_BOOTSTRAP").unwrap_or_else(|_| {
        panic!(
            "WEIR_KAFKA_BOOTSTRAP is not set: these tests need a Kafka-protocol broker. \
             Run them through scripts/test.sh, or start one with \
             `eval $(scripts/kafka-broker.sh start)`"
        )
    })
}

/// A name no other test (or earlier run against the same broker) uses.
pub fn unique(name: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{name}-{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

use std::time::{Duration, Instant};

use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use weir_kafka::client_config::KafkaConnection;

/// Creates `topic` with `partitions` partitions.
pub fn topic(name: &str, partitions: i32) -> String {
    let topic = unique(name);
    weir_kafka::admin::ensure_topic(&KafkaConnection::new(bootstrap()), &topic, partitions)
        .expect("create topic");
    topic
}

/// Produces `values` to `topic` (to `partition`, or spread by key when `None`) and waits
/// until all are acknowledged.
pub fn produce(topic: &str, partition: Option<i32>, values: &[String]) {
    let producer: BaseProducer = KafkaConnection::new(bootstrap())
        .client_config(&[("enable.idempotence", "true")])
        .create()
        .expect("producer");
    for value in values {
        let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic)
            .key(value.as_bytes())
            .payload(value.as_bytes());
        if let Some(p) = partition {
            record = record.partition(p);
        }
        producer.send(record).map_err(|(e, _)| e).expect("send");
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// Polls `take` until `done` holds for everything taken so far, or fails after `limit`.
pub fn collect_until<T: Clone>(
    take: impl Fn() -> Vec<T>,
    mut done: impl FnMut(&[T]) -> bool,
    limit: Duration,
) -> Vec<T> {
    let deadline = Instant::now() + limit;
    let mut all = Vec::new();
    loop {
        all.extend(take());
        if done(&all) {
            return all;
        }
        assert!(
            Instant::now() < deadline,
            "gave up after {limit:?} with {} records",
            all.len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
