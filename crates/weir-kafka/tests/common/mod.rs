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
