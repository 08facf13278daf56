//! Dead letters given to the exactly-once Kafka sink are committed once each, with the
//! checkpoint that covers the source's position past them, also when the job fails after
//! some of them were committed and replays from its last checkpoint.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use weir::connectors::discard::DiscardingSink;
use weir::connectors::malformed::{MalformedRecord, RecordOrigin};
use weir::{
    CheckpointConfig, ExecutionConfig, RestartStrategyConfig, StreamExecutionEnvironment,
    WatermarkStrategy,
};
use weir_kafka::sink::ProducerRecord;
use weir_kafka::{DeliveryGuarantee, KafkaSink, KafkaSource, LogReader};

const PER_PARTITION: u64 = 1_000;

fn number(record: &weir_kafka::ConsumedRecord<'_>) -> Result<u64, String> {
    let text = std::str::from_utf8(record.value.unwrap_or_default()).map_err(|e| e.to_string())?;
    text.parse::<u64>()
        .map_err(|e| format!("`{text}` is not a number: {e}"))
}

/// The value written at offset `i` of partition `p`: a number, or every 25th one malformed.
fn value(p: u64, i: u64) -> String {
    let n = p * PER_PARTITION + i;
    match n % 25 {
        0 => format!("bad-{n}"),
        _ => n.to_string(),
    }
}

#[test]
fn dead_letters_reach_the_exactly_once_kafka_sink_once_each_across_a_failure() {
    let input = common::topic("dead-letter-input", 2);
    let dead = common::topic("dead-letters", 1);
    for p in 0..2 {
        let values: Vec<String> = (0..PER_PARTITION).map(|i| value(p, i)).collect();
        common::produce(&input, Some(p as i32), &values);
    }
    let config = ExecutionConfig::default()
        .with_parallelism(2)
        .with_buffer_timeout(Duration::from_millis(5))
        .with_checkpointing(CheckpointConfig::default().with_interval(Duration::from_millis(100)))
        .with_restart_strategy(RestartStrategyConfig::FixedDelay {
            attempts: 1,
            delay: Duration::from_millis(10),
        });
    let env = StreamExecutionEnvironment::new(config).unwrap();
    let source = KafkaSource::builder(common::bootstrap(), number)
        .topics([input.clone()])
        .bounded()
        // Slow enough that checkpoints complete (and commit dead letters) before the failure.
        .with_rate_limit(1_000.0)
        .with_dead_letters()
        .build()
        .unwrap();
    let (numbers, dead_letters) = env
        .from_source(source, WatermarkStrategy::no_watermarks(), "numbers")
        .split_dead_letters();
    let failed = Arc::new(AtomicBool::new(false));
    let once = failed.clone();
    numbers
        .map(move |n: u64| {
            if n == PER_PARTITION + 701 && !once.swap(true, Ordering::SeqCst) {
                panic!("failing once at {n}");
            }
            n
        })
        .sink_to(DiscardingSink, "numbers");
    let topic = dead.clone();
    let sink = KafkaSink::builder(common::bootstrap(), move |letter: &MalformedRecord| {
        Ok(ProducerRecord {
            topic: topic.clone(),
            partition: Some(0),
            key: None,
            value: Some(serde_json::to_vec(letter).map_err(|e| e.to_string())?),
            timestamp: None,
        })
    })
    .delivery_guarantee(DeliveryGuarantee::ExactlyOnce)
    .transactional_id_prefix(common::unique("dead-letters"))
    .build()
    .unwrap();
    dead_letters.sink_to(sink, "dead letters");
    let result = env.execute("dead letters to kafka").unwrap();
    assert!(failed.load(Ordering::SeqCst), "the job did not fail");
    assert_eq!(result.restarts, 1, "{result}");

    let mut reader = LogReader::new(&common::bootstrap(), Duration::from_secs(30));
    let committed = reader.committed_records(&dead, 0).unwrap();
    let mut letters: Vec<(String, i32, i64)> = committed
        .iter()
        .map(|r| {
            let letter: MalformedRecord =
                serde_json::from_slice(r.value.as_deref().unwrap_or_default()).unwrap();
            let RecordOrigin::Kafka {
                topic,
                partition,
                offset,
            } = letter.origin
            else {
                panic!("not a Kafka origin: {}", letter.origin);
            };
            assert_eq!(topic, input);
            (letter.raw, partition, offset)
        })
        .collect();
    letters.sort();
    let mut expected: Vec<(String, i32, i64)> = (0..2)
        .flat_map(|p| (0..PER_PARTITION).map(move |i| (p, i)))
        .filter(|&(p, i)| value(p, i).starts_with("bad"))
        .map(|(p, i)| (value(p, i), p as i32, i as i64))
        .collect();
    expected.sort();
    assert_eq!(letters, expected);
}
