//! Backpressure: with a deliberately slow consumer, bounded channels stop the source, so the
//! records in flight stay under the configured bound whatever the source's speed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use weir::connectors::discard::DiscardingSink;
use weir::{ExecutionConfig, StreamExecutionEnvironment};

fn run_with_slow_consumer(config: ExecutionConfig, keyed: bool) -> (u64, u64) {
    let produced = Arc::new(AtomicU64::new(0));
    let consumed = Arc::new(AtomicU64::new(0));
    let max_in_flight = Arc::new(AtomicU64::new(0));
    let env = StreamExecutionEnvironment::new(config).unwrap();
    let p = produced.clone();
    let source = env.generate(2_000, move |i| {
        p.fetch_add(1, Ordering::SeqCst);
        i
    });
    let shuffled = if keyed {
        source.key_by(|i: &u64| *i).reduce(|_, b| b)
    } else {
        source.rebalance().map(|i| i)
    };
    let (c, m, p) = (consumed.clone(), max_in_flight.clone(), produced.clone());
    shuffled
        .map(move |i| {
            std::thread::sleep(Duration::from_micros(200));
            let done = c.fetch_add(1, Ordering::SeqCst) + 1;
            let in_flight = p.load(Ordering::SeqCst).saturating_sub(done);
            m.fetch_max(in_flight, Ordering::SeqCst);
            i
        })
        .name("slow")
        .sink_to(DiscardingSink, "discard");
    env.execute("backpressure").unwrap();
    assert_eq!(consumed.load(Ordering::SeqCst), 2_000);
    (
        max_in_flight.load(Ordering::SeqCst),
        produced.load(Ordering::SeqCst),
    )
}

#[test]
fn slow_consumer_bounds_records_in_flight() {
    let config = ExecutionConfig::default()
        .with_parallelism(1)
        .with_buffer_size(16)
        .with_channel_capacity(2)
        .with_buffer_timeout(Duration::from_secs(10));
    // One channel: its queued batches plus the batch its writer fills, plus the batch the
    // consumer is working through, plus the batch the source's chain gathers and the one
    // record the generator has made but not yet handed to it.
    let bound = config.records_per_channel_bound() as u64 + 2 * config.buffer_size as u64 + 1;
    let (max_in_flight, produced) = run_with_slow_consumer(config, false);
    assert_eq!(produced, 2_000);
    assert!(
        max_in_flight <= bound,
        "{max_in_flight} records in flight, bound is {bound}"
    );
}

#[test]
fn slow_consumer_bounds_records_in_flight_across_a_keyed_shuffle() {
    let config = ExecutionConfig::default()
        .with_parallelism(2)
        .with_buffer_size(8)
        .with_channel_capacity(2)
        .with_buffer_timeout(Duration::from_secs(10));
    // 2 producers x 2 consumers = 4 channels; each consumer works through one batch; each
    // producer's chain gathers one batch, and holds at most one record outside it.
    let bound = 4 * config.records_per_channel_bound() as u64 + 4 * config.buffer_size as u64 + 2;
    let (max_in_flight, _) = run_with_slow_consumer(config, true);
    assert!(
        max_in_flight <= bound,
        "{max_in_flight} records in flight, bound is {bound}"
    );
}
