//! The Kafka source against a real broker: offsets restored exactly through a savepoint,
//! offsets committed to the group on checkpoint completion, partitions added while running,
//! starting offsets, malformed records, and an unreachable broker.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use weir::connectors::collect::collect_sink;
use weir::connectors::malformed::{MalformedRecordPolicy, RecordOrigin};
use weir::WatermarkStrategy;
use weir::{
    CheckpointConfig, CheckpointStorageConfig, ExecutionConfig, RestartStrategyConfig,
    StreamExecutionEnvironment,
};
use weir_kafka::client_config::KafkaConnection;
use weir_kafka::{KafkaSource, OffsetResetStrategy, StartingOffsets, StringValue};

fn values(range: std::ops::Range<u64>) -> Vec<String> {
    range.map(|i| i.to_string()).collect()
}

fn config(checkpoints: Option<&std::path::Path>) -> ExecutionConfig {
    let storage =
        CheckpointStorageConfig::directory_or_memory(checkpoints.map(|d| d.to_path_buf()));
    ExecutionConfig::default()
        .with_parallelism(2)
        .with_buffer_timeout(Duration::from_millis(5))
        .with_checkpointing(
            CheckpointConfig::default()
                .with_interval(Duration::from_millis(100))
                .with_storage(storage),
        )
        .with_restart_strategy(RestartStrategyConfig::None)
}

fn source(topic: &str) -> weir_kafka::source::KafkaSourceBuilder<String> {
    KafkaSource::builder(common::bootstrap(), StringValue)
        .topics([topic.to_string()])
        .partition_discovery_interval(Some(Duration::from_millis(200)))
}

#[test]
fn offsets_are_restored_exactly_through_a_savepoint_taken_mid_stream() {
    let topic = common::topic("restore", 3);
    // The first run has only the first 3 000 of the 7 000 numbers to read: its savepoint is
    // mid-stream however fast or slow it reads.
    common::produce(&topic, None, &values(0..3000));
    let dir = tempfile::tempdir().unwrap();
    let run = |restore: Option<weir::Savepoint>| {
        let mut config = config(Some(dir.path()));
        if let Some(savepoint) = restore {
            config = config.with_restore(savepoint);
        }
        let env = StreamExecutionEnvironment::new(config).unwrap();
        let sink = common::CommittingSink::default();
        // Throttled, so that the savepoint usually lands while fetched records wait to be
        // emitted (the test does not depend on it).
        env.from_source(
            source(&topic).with_rate_limit(3000.0).build().unwrap(),
            WatermarkStrategy::no_watermarks(),
            "kafka",
        )
        .uid("kafka")
        .sink_to(sink.clone(), "committing")
        .uid("committing");
        (env.execute_async("restore").unwrap(), sink)
    };

    // First run: stop with a savepoint once it committed something (it runs then); only
    // what the savepoint covers counts.
    let (client, first) = run(None);
    common::collect_until(
        || first.committed(),
        |all| !all.is_empty(),
        Duration::from_secs(300),
    );
    let (savepoint, _) = client.stop_with_savepoint().unwrap();
    let first = first.committed();
    assert!(
        !first.is_empty() && first.len() <= 3000,
        "the savepoint covers {} of the 3 000 numbers produced",
        first.len()
    );

    // More input arrives while the job is down; the second run resumes from the savepoint.
    common::produce(&topic, None, &values(3000..7000));
    let (client, second) = run(Some(savepoint));
    let remaining = 7000 - first.len();
    common::wait_until(
        || second.committed().len() >= remaining,
        Duration::from_secs(300),
        "the rest of the input",
    );
    // Two more checkpoints, so that duplicates read before them would show.
    let completed = client.checkpoint_history().unwrap().completed;
    common::wait_until(
        || client.checkpoint_history().unwrap().completed >= completed + 2,
        Duration::from_secs(300),
        "two more checkpoints",
    );
    client.cancel().unwrap();

    let second = second.committed();
    let (first_len, second_len) = (first.len(), second.len());
    let mut all: Vec<u64> = first
        .into_iter()
        .chain(second)
        .map(|v| v.parse().unwrap())
        .collect();
    all.sort_unstable();
    let duplicates = all.windows(2).filter(|w| w[0] == w[1]).count();
    let present: BTreeSet<u64> = all.iter().copied().collect();
    let missing: Vec<u64> = (0..7000).filter(|v| !present.contains(v)).collect();
    assert!(
        duplicates == 0 && missing.is_empty(),
        "first run {first_len}, second run {second_len}: {duplicates} duplicates, {} missing (first: {:?})",
        missing.len(),
        &missing[..missing.len().min(20)]
    );
}

#[test]
fn offsets_are_committed_to_the_group_when_checkpoints_complete() {
    let topic = common::topic("group", 2);
    common::produce(&topic, None, &values(0..2000));
    let group = common::unique("group");
    let env = StreamExecutionEnvironment::new(config(None)).unwrap();
    let (sink, handle) = collect_sink::<String>();
    env.from_source(
        source(&topic).group_id(&group).bounded().build().unwrap(),
        WatermarkStrategy::no_watermarks(),
        "kafka",
    )
    .sink_to(sink, "collect");
    env.execute("group").unwrap();
    assert_eq!(handle.take().len(), 2000);

    let consumer: BaseConsumer = KafkaConnection::new(common::bootstrap())
        .client_config(&[("group.id", group.as_str())])
        .create()
        .unwrap();
    let mut partitions = TopicPartitionList::new();
    partitions.add_partition(&topic, 0);
    partitions.add_partition(&topic, 1);
    let committed = consumer
        .committed_offsets(partitions, Duration::from_secs(10))
        .unwrap();
    let total: i64 = committed
        .elements()
        .iter()
        .map(|e| match e.offset() {
            Offset::Offset(o) => o,
            other => panic!("no committed offset: {other:?}"),
        })
        .sum();
    assert_eq!(
        total, 2000,
        "the final checkpoint's offsets are the group's"
    );

    // A new job starting from the group's committed offsets reads only what came after.
    common::produce(&topic, None, &values(2000..2100));
    let env = StreamExecutionEnvironment::new(config(None)).unwrap();
    let (sink, handle) = collect_sink::<String>();
    env.from_source(
        source(&topic)
            .group_id(&group)
            .starting_offsets(StartingOffsets::Committed {
                reset: OffsetResetStrategy::None,
            })
            .bounded()
            .build()
            .unwrap(),
        WatermarkStrategy::no_watermarks(),
        "kafka",
    )
    .sink_to(sink, "collect");
    env.execute("group").unwrap();
    let got: BTreeSet<String> = handle.take().into_iter().collect();
    assert_eq!(got, values(2000..2100).into_iter().collect());
}

/// Partitions that appear while the job runs are found by discovery and read from their
/// start. (The test broker cannot add partitions to a topic — tansu lacks CreatePartitions —
/// so the new partitions come with a new topic matching the subscribed pattern; discovery
/// treats both the same way: a metadata diff against the known partitions.)
#[test]
fn partitions_that_appear_while_running_are_discovered_and_read() {
    let base = common::unique("grow");
    let first = format!("{base}-a");
    weir_kafka::admin::ensure_topic(&KafkaConnection::new(common::bootstrap()), &first, 1).unwrap();
    common::produce(&first, Some(0), &values(0..100));
    let env = StreamExecutionEnvironment::new(config(None)).unwrap();
    let (sink, handle) = collect_sink::<String>();
    let source = KafkaSource::builder(common::bootstrap(), StringValue)
        .topic_pattern(&format!("{}-.*", regex::escape(&base)))
        .unwrap()
        .partition_discovery_interval(Some(Duration::from_millis(200)))
        .build()
        .unwrap();
    env.from_source(source, WatermarkStrategy::no_watermarks(), "kafka")
        .sink_to(sink, "collect");
    let client = env.execute_async("grow").unwrap();
    let mut seen = common::collect_until(
        || handle.take(),
        |all| all.len() >= 100,
        Duration::from_secs(60),
    );
    let second = format!("{base}-b");
    weir_kafka::admin::ensure_topic(&KafkaConnection::new(common::bootstrap()), &second, 2)
        .unwrap();
    common::produce(&second, None, &values(100..200));
    seen.extend(common::collect_until(
        || handle.take(),
        |all| all.len() + 100 >= 200,
        Duration::from_secs(60),
    ));
    client.cancel().unwrap();
    let mut seen: Vec<u64> = seen.iter().map(|v| v.parse().unwrap()).collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..200).collect::<Vec<_>>());
}

#[test]
fn starting_offsets_latest_and_timestamp() {
    let topic = common::topic("start", 1);
    common::produce(&topic, Some(0), &values(0..50));
    std::thread::sleep(Duration::from_millis(50));
    let middle = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    std::thread::sleep(Duration::from_millis(50));
    common::produce(&topic, Some(0), &values(50..80));

    let run = |starting: StartingOffsets| -> Vec<String> {
        let env = StreamExecutionEnvironment::new(config(None)).unwrap();
        let (sink, handle) = collect_sink::<String>();
        env.from_source(
            source(&topic)
                .starting_offsets(starting)
                .bounded()
                .build()
                .unwrap(),
            WatermarkStrategy::no_watermarks(),
            "kafka",
        )
        .sink_to(sink, "collect");
        env.execute("start").unwrap();
        let mut got = handle.take();
        got.sort_by_key(|v| v.parse::<u64>().unwrap());
        got
    };
    assert_eq!(run(StartingOffsets::Earliest), values(0..80));
    assert_eq!(run(StartingOffsets::Latest), Vec::<String>::new());
    assert_eq!(run(StartingOffsets::Timestamp(middle)), values(50..80));
}

fn number(record: &weir_kafka::ConsumedRecord<'_>) -> Result<u64, String> {
    let text = std::str::from_utf8(record.value.unwrap_or_default()).map_err(|e| e.to_string())?;
    text.parse::<u64>()
        .map_err(|e| format!("`{text}` is not a number: {e}"))
}

#[test]
fn malformed_records_fail_naming_where_or_are_skipped_or_dead_lettered() {
    let topic = common::topic("malformed", 1);
    let input: Vec<String> = ["1", "2", "x", "4"].iter().map(|s| s.to_string()).collect();
    common::produce(&topic, Some(0), &input);
    let builder = || {
        KafkaSource::builder(common::bootstrap(), number)
            .topics([topic.clone()])
            .bounded()
    };

    let env = StreamExecutionEnvironment::new(config(None)).unwrap();
    env.from_source(
        builder().build().unwrap(),
        WatermarkStrategy::no_watermarks(),
        "kafka",
    )
    .sink_to(collect_sink::<u64>().0, "collect");
    let error = env.execute("malformed").unwrap_err();
    let bad = error
        .malformed_record()
        .expect("a typed malformed-record error");
    assert_eq!(
        bad.origin,
        RecordOrigin::Kafka {
            topic: topic.clone(),
            partition: 0,
            offset: 2
        }
    );
    assert!(bad.error.reason.contains("`x` is not a number"), "{error}");
    let error = error.to_string();
    assert!(
        error.contains(&format!("topic {topic}, partition 0, offset 2")),
        "{error}"
    );

    let env = StreamExecutionEnvironment::new(config(None)).unwrap();
    let (sink, handle) = collect_sink::<u64>();
    env.from_source(
        builder()
            .on_malformed(MalformedRecordPolicy::Skip)
            .build()
            .unwrap(),
        WatermarkStrategy::no_watermarks(),
        "kafka",
    )
    .sink_to(sink, "collect");
    let result = env.execute("malformed").unwrap();
    assert_eq!(result.operator("Source: kafka").unwrap().records_skipped, 1);
    assert!(
        result.to_string().contains("1 malformed records skipped"),
        "{result}"
    );
    let mut got = handle.take();
    got.sort_unstable();
    assert_eq!(got, vec![1, 2, 4]);

    let env = StreamExecutionEnvironment::new(config(None)).unwrap();
    let (sink, handle) = collect_sink();
    env.from_source(
        builder().with_dead_letters().build().unwrap(),
        WatermarkStrategy::no_watermarks(),
        "kafka",
    )
    .sink_to(sink, "collect");
    let result = env.execute("malformed").unwrap();
    let source = result.operator("Source: kafka").unwrap();
    assert_eq!(
        (source.records_dead_lettered, source.records_skipped),
        (1, 0)
    );
    let got = handle.take();
    let dead: Vec<_> = got.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(dead.len(), 1);
    assert!(
        matches!(
            &dead[0].origin,
            RecordOrigin::Kafka {
                partition: 0,
                offset: 2,
                ..
            }
        ),
        "{:?}",
        dead[0]
    );
    assert_eq!(dead[0].raw, "x");
    assert_eq!(got.iter().filter(|r| r.is_ok()).count(), 3);
}

/// A record that makes a function fail on every restart is named by topic, partition and
/// offset when the restart strategy gives up: the attempts after the first failure trace
/// each record's origin, across the shuffle.
#[test]
fn a_poison_record_is_named_by_topic_partition_and_offset_when_restarts_give_up() {
    let topic = common::topic("poison", 2);
    common::produce(&topic, Some(0), &values(0..300));
    let mut second: Vec<String> = values(300..600);
    second[123] = "poison".into();
    common::produce(&topic, Some(1), &second);
    let config = config(None).with_restart_strategy(RestartStrategyConfig::FixedDelay {
        attempts: 2,
        delay: Duration::from_millis(20),
    });
    let env = StreamExecutionEnvironment::new(config).unwrap();
    env.from_source(
        source(&topic).bounded().build().unwrap(),
        WatermarkStrategy::no_watermarks(),
        "kafka",
    )
    .rebalance()
    .map(|value: String| {
        if value == "poison" {
            panic!("cannot handle `{value}`");
        }
        value
    })
    .name("handler")
    .sink_to(collect_sink::<String>().0, "collect");
    let error = env.execute("poisoned").unwrap_err();
    assert_eq!(
        error.record_origin(),
        Some(&RecordOrigin::Kafka {
            topic: topic.clone(),
            partition: 1,
            offset: 123
        }),
        "{error}"
    );
    let text = error.to_string();
    assert!(
        text.contains(&format!(
            "the record was read at topic {topic}, partition 1, offset 123"
        )),
        "{text}"
    );
    assert!(text.contains("cannot handle `poison`"), "{text}");
}

#[test]
fn an_unreachable_broker_is_reported_clearly() {
    // Nothing listens on port 1.
    let env = StreamExecutionEnvironment::new(config(None)).unwrap();
    env.from_source(
        KafkaSource::builder("127.0.0.1:1", StringValue)
            .topics(["anything"])
            .request_timeout(Duration::from_secs(2))
            .build()
            .unwrap(),
        WatermarkStrategy::no_watermarks(),
        "kafka",
    )
    .sink_to(collect_sink::<String>().0, "collect");
    let error = env.execute("unreachable").unwrap_err().to_string();
    assert!(
        error.contains("127.0.0.1:1") && error.contains("unreachable"),
        "{error}"
    );
}

#[test]
fn a_missing_topic_is_reported_clearly() {
    let env = StreamExecutionEnvironment::new(config(None)).unwrap();
    let topic = common::unique("never-created");
    env.from_source(
        source(&topic).build().unwrap(),
        WatermarkStrategy::no_watermarks(),
        "kafka",
    )
    .sink_to(collect_sink::<String>().0, "collect");
    let error = env.execute("missing").unwrap_err().to_string();
    assert!(
        error.contains(&topic) && error.contains("does not exist"),
        "{error}"
    );
}

#[test]
fn a_bounded_source_reads_transactional_input_to_its_end() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let topic = common::topic("transactional-input", 2);
    let producer: BaseProducer = KafkaConnection::new(common::bootstrap())
        .client_config(&[("transactional.id", common::unique("input-txn").as_str())])
        .create()
        .unwrap();
    producer.init_transactions(Duration::from_secs(30)).unwrap();
    // Two committed transactions: the log ends with a COMMIT marker in each partition, which
    // a consumer never sees as a record.
    for batch in [0..300u64, 300..500] {
        producer.begin_transaction().unwrap();
        for i in batch {
            let value = i.to_string();
            producer
                .send(
                    BaseRecord::<[u8], [u8]>::to(&topic)
                        .partition((i % 2) as i32)
                        .payload(value.as_bytes()),
                )
                .map_err(|(e, _)| e)
                .unwrap();
        }
        producer
            .commit_transaction(Duration::from_secs(30))
            .unwrap();
    }
    let env = StreamExecutionEnvironment::new(config(None)).unwrap();
    let (sink, handle) = collect_sink::<String>();
    env.from_source(
        source(&topic).bounded().build().unwrap(),
        WatermarkStrategy::no_watermarks(),
        "kafka",
    )
    .sink_to(sink, "collect");
    env.execute("transactional-input").unwrap();
    let mut got: Vec<u64> = handle.take().iter().map(|v| v.parse().unwrap()).collect();
    got.sort_unstable();
    assert_eq!(got, (0..500).collect::<Vec<_>>());
}

/// The value of the user metric `name` with label `partition = p` summed over the source's
/// subtasks, as the JobManager last sampled it.
fn source_metric(client: &weir::JobClient, name: &str, partition: Option<&str>) -> Option<i64> {
    let details = client.details();
    let values: Vec<i64> = details
        .vertices
        .iter()
        .flat_map(|v| &v.subtasks)
        .flat_map(|s| &s.sample.operators)
        .filter(|o| o.name.contains("kafka"))
        .flat_map(|o| &o.user)
        .filter(|m| m.name == name)
        .filter(|m| {
            partition.is_none_or(|p| m.labels.iter().any(|(k, v)| k == "partition" && v == p))
        })
        .map(|m| m.value)
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

#[test]
fn consumer_lag_per_partition_is_reported_live_and_falls_to_zero() {
    let topic = common::topic("lag", 2);
    common::produce(&topic, Some(0), &values(0..4000));
    common::produce(&topic, Some(1), &values(4000..5000));
    let env = StreamExecutionEnvironment::new(
        config(None).with_metrics_update_interval(Duration::from_millis(100)),
    )
    .unwrap();
    // Slow enough that the lag shows before it is read away.
    env.from_source(
        source(&topic).with_rate_limit(2000.0).build().unwrap(),
        WatermarkStrategy::no_watermarks(),
        "kafka",
    )
    .sink_to(weir::connectors::discard::DiscardingSink, "discard");
    let client = env.execute_async("lag").unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    // While reading: both partitions have a lag; partition 0, with four times the records,
    // lags more.
    let (lag0, lag1) = loop {
        if let (Some(l0), Some(l1)) = (
            source_metric(&client, "recordsLag", Some("0")),
            source_metric(&client, "recordsLag", Some("1")),
        ) {
            if l0 > 1000 {
                break (l0, l1);
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no lag reported: {:#?}",
            client.details().vertices
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        lag0 <= 4000 && lag1 <= 1000,
        "lag within what was produced: {lag0} {lag1}"
    );
    assert!(source_metric(&client, "pendingRecords", None).unwrap() >= lag0);
    // Once everything is read, the lag is zero and the offsets are at the end.
    loop {
        if source_metric(&client, "recordsLag", Some("0")) == Some(0)
            && source_metric(&client, "recordsLag", Some("1")) == Some(0)
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline + Duration::from_secs(60),
            "the lag never fell to zero"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        source_metric(&client, "currentOffset", Some("0")),
        Some(4000)
    );
    assert_eq!(
        source_metric(&client, "currentOffset", Some("1")),
        Some(1000)
    );
    client.cancel().unwrap();
}
