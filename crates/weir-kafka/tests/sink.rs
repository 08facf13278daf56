//! The Kafka sink in-process, against a real broker: the reference pipeline's
//! committed output is exact, also when transactions are fenced — and so aborted by the
//! broker — between their checkpoint's completion and their commit.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::producer::{BaseProducer, Producer};
use weir_kafka::client_config::KafkaConnection;
use weir_kafka::word_count::{self, WordCountOptions};
use weir_kafka::DeliveryGuarantee;

const PARTITIONS: i32 = 3;

fn options(input: &str, output: &str) -> WordCountOptions {
    let mut options = WordCountOptions::new(&common::bootstrap(), input, output);
    options.checkpoint_interval = Duration::from_millis(200);
    options.rate = Some(20_000.0);
    options
}

fn verify(options: &WordCountOptions, expected: &std::collections::HashMap<String, u64>) {
    let committed = word_count::committed_counts(
        &options.bootstrap_servers,
        &options.output_topic,
        PARTITIONS,
    )
    .expect("read output");
    let exactly = options.guarantee == DeliveryGuarantee::ExactlyOnce;
    if let Err(problems) = word_count::verify_counts(&committed, expected, exactly) {
        panic!("output of {} is wrong: {problems}", options.output_topic);
    }
}

fn setup(records: u64) -> (String, String, std::collections::HashMap<String, u64>) {
    let input = common::unique("words");
    let output = common::unique("counts");
    let connection = KafkaConnection::new(common::bootstrap());
    weir_kafka::admin::ensure_topic(&connection, &output, PARTITIONS).expect("output topic");
    let expected =
        word_count::produce_words(&common::bootstrap(), &input, PARTITIONS, records, 200)
            .expect("produce input");
    (input, output, expected)
}

#[test]
fn exactly_once_output_is_exact() {
    let (input, output, expected) = setup(20_000);
    let options = options(&input, &output);
    let result = word_count::build(&options)
        .expect("build")
        .execute(word_count::JOB_NAME)
        .expect("job runs");
    assert!(
        result.checkpoints.completed >= 2,
        "too few checkpoints: {}",
        result.checkpoints.completed
    );
    verify(&options, &expected);
}

#[test]
fn transactions_fenced_before_their_commit_are_sent_again_exactly_once() {
    fenced_transactions_are_sent_again_exactly_once(None);
}

// The sink's producer compresses as the user says; recovery then reads compressed batches
// back from the log (`LogReader::resend_committed`, and `committed_counts` to verify).
#[test]
fn gzip_compressed_transactions_fenced_before_their_commit_are_sent_again_exactly_once() {
    fenced_transactions_are_sent_again_exactly_once(Some("gzip"));
}

#[test]
fn snappy_compressed_transactions_fenced_before_their_commit_are_sent_again_exactly_once() {
    fenced_transactions_are_sent_again_exactly_once(Some("snappy"));
}

#[test]
fn lz4_compressed_transactions_fenced_before_their_commit_are_sent_again_exactly_once() {
    fenced_transactions_are_sent_again_exactly_once(Some("lz4"));
}

#[test]
fn zstd_compressed_transactions_fenced_before_their_commit_are_sent_again_exactly_once() {
    fenced_transactions_are_sent_again_exactly_once(Some("zstd"));
}

/// Every other commit is fenced, so the broker aborts it and the sink sends it again; the
/// output stays exact. `compression` is the sink's `compression.type`.
fn fenced_transactions_are_sent_again_exactly_once(compression: Option<&str>) {
    let (input, output, expected) = setup(20_000);
    let mut options = options(&input, &output);
    if let Some(codec) = compression {
        options
            .properties
            .insert("compression.type".into(), codec.into());
    }
    // A fenced producer's commit fails only when it times out on some brokers (tansu).
    options.operation_timeout = Duration::from_secs(5);
    let bootstrap = options.bootstrap_servers.clone();
    let fenced = Arc::new(AtomicU64::new(0));
    let counter = fenced.clone();
    // Every other commit: a new producer with the same transactional id fences the sink's
    // producer, and the broker aborts the pre-committed transaction.
    options.before_commit = Some(Arc::new(move |checkpoint_id, transactional_id| {
        if checkpoint_id % 2 == 1 {
            return;
        }
        let producer: BaseProducer = KafkaConnection::new(bootstrap.clone())
            .client_config(&[("transactional.id", transactional_id)])
            .create()
            .expect("zombie producer");
        producer
            .init_transactions(Duration::from_secs(30))
            .expect("fence");
        counter.fetch_add(1, Ordering::SeqCst);
    }));
    word_count::build(&options)
        .expect("build")
        .execute(word_count::JOB_NAME)
        .expect("job runs");
    assert!(
        fenced.load(Ordering::SeqCst) > 0,
        "no transaction was fenced"
    );
    verify(&options, &expected);
}

#[test]
fn at_least_once_output_loses_nothing() {
    let (input, output, expected) = setup(10_000);
    let mut options = options(&input, &output);
    options.guarantee = DeliveryGuarantee::AtLeastOnce;
    word_count::build(&options)
        .expect("build")
        .execute(word_count::JOB_NAME)
        .expect("job runs");
    verify(&options, &expected);
}

#[test]
fn an_unreachable_broker_fails_the_exactly_once_sink_clearly() {
    use weir::{ExecutionConfig, RestartStrategyConfig, StreamExecutionEnvironment};
    use weir_kafka::sink::StringKeyValueSerializer;
    let env = StreamExecutionEnvironment::new(
        ExecutionConfig::default()
            .with_parallelism(1)
            .with_restart_strategy(RestartStrategyConfig::None),
    )
    .unwrap();
    let sink = weir_kafka::KafkaSink::builder("127.0.0.1:1", StringKeyValueSerializer::new("out"))
        .delivery_guarantee(DeliveryGuarantee::ExactlyOnce)
        .transactional_id_prefix("unreachable")
        .operation_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    env.generate(10, |i| (i.to_string(), i.to_string()))
        .sink_to(sink, "kafka");
    let error = env.execute("unreachable").unwrap_err().to_string();
    assert!(
        error.contains("127.0.0.1:1") && error.contains("unreachable"),
        "{error}"
    );
}

#[test]
fn a_record_that_cannot_be_serialized_fails_the_job_naming_the_sink() {
    use weir::{ExecutionConfig, RestartStrategyConfig, StreamExecutionEnvironment};
    use weir_kafka::sink::ProducerRecord;
    let topic = common::topic("serialize", 1);
    let env = StreamExecutionEnvironment::new(
        ExecutionConfig::default()
            .with_parallelism(1)
            .with_restart_strategy(RestartStrategyConfig::None),
    )
    .unwrap();
    let sink = weir_kafka::KafkaSink::builder(common::bootstrap(), move |n: &u64| {
        if *n == 5 {
            return Err(format!("{n} is not allowed"));
        }
        Ok(ProducerRecord {
            topic: topic.clone(),
            partition: None,
            key: None,
            value: Some(n.to_string().into_bytes()),
            timestamp: None,
        })
    })
    .build()
    .unwrap();
    env.generate(10, |i| i).sink_to(sink, "numbers");
    let error = env.execute("serialize").unwrap_err().to_string();
    assert!(
        error.contains("Sink: numbers") && error.contains("5 is not allowed"),
        "{error}"
    );
}

#[test]
fn exactly_once_output_survives_rescaling_2_to_3_to_1_through_savepoints() {
    let (input, output, expected) = setup(30_000);
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(&input, &output);
    options.checkpoint_dir = Some(dir.path().to_path_buf());
    // Unbounded, so that no run can end before the test stops it, however slow the machine
    // (the last one is cancelled once its output is complete); throttled, so that the first
    // two usually read a part of the input each (the test does not depend on it).
    options.bounded = false;
    options.rate = Some(10_000.0);
    let mut savepoint = None;
    for parallelism in [2, 3] {
        options.parallelism = parallelism;
        options.restore_from = savepoint.take();
        let before = weir_testkit::latest_checkpoint(dir.path(), word_count::JOB_NAME);
        let client = word_count::build(&options)
            .expect("build")
            .execute_async(word_count::JOB_NAME)
            .expect("job starts");
        // Running, not merely started: two checkpoints of this run (a loaded machine once
        // took over a second to read its first record, which a fixed sleep did not cover).
        common::wait_until(
            || weir_testkit::latest_checkpoint(dir.path(), word_count::JOB_NAME) >= before + 2,
            Duration::from_secs(300),
            "two checkpoints of the run",
        );
        // And reading: the source reported records sent on.
        common::wait_until(
            || {
                client
                    .details()
                    .vertices
                    .iter()
                    .filter(|v| v.name.starts_with("Source: words"))
                    .filter_map(|v| v.metrics.as_ref())
                    .any(|m| m.records_out > 0)
            },
            Duration::from_secs(300),
            "records read",
        );
        let (path, result) = client.stop_with_savepoint().expect("stop with savepoint");
        assert!(
            result
                .operator("Source: words")
                .map_or(0, |o| o.records_out)
                > 0,
            "parallelism {parallelism}: nothing read before the savepoint"
        );
        savepoint = Some(path.location().to_string());
    }
    options.parallelism = 1;
    options.rate = None;
    options.restore_from = savepoint;
    let client = word_count::build(&options)
        .expect("build")
        .execute_async(word_count::JOB_NAME)
        .expect("final run starts");
    // Cancelled once every word's last count is committed.
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    while !last_counts_committed(&options, &expected) {
        assert!(
            std::time::Instant::now() < deadline,
            "gave up waiting for the last counts"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    client.cancel().expect("final run");
    verify(&options, &expected);
}

/// Whether every word's count in `expected` (or a higher one) is committed.
fn last_counts_committed(
    options: &WordCountOptions,
    expected: &std::collections::HashMap<String, u64>,
) -> bool {
    let committed = word_count::committed_counts(
        &options.bootstrap_servers,
        &options.output_topic,
        PARTITIONS,
    )
    .expect("read output");
    let mut last: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
    for (word, count) in &committed {
        let top = last.entry(word.as_str()).or_default();
        *top = (*top).max(*count);
    }
    expected
        .iter()
        .all(|(word, n)| last.get(word.as_str()).is_some_and(|top| top >= n))
}

/// The summed value of user metric `name` over the subtasks of the operators named like
/// `operator`.
fn user_metric(
    details: &weir::runtime::job_master::JobDetails,
    operator: &str,
    name: &str,
) -> Option<i64> {
    let values: Vec<i64> = details
        .vertices
        .iter()
        .flat_map(|v| &v.subtasks)
        .flat_map(|s| &s.sample.operators)
        .filter(|o| o.name.contains(operator))
        .flat_map(|o| &o.user)
        .filter(|m| m.name == name)
        .map(|m| m.value)
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

#[test]
fn the_exactly_once_sink_reports_commits_latency_and_pending_transactions() {
    use weir::prelude::*;
    use weir_kafka::sink::StringKeyValueSerializer;
    let output = common::unique("committed");
    let connection = KafkaConnection::new(common::bootstrap());
    weir_kafka::admin::ensure_topic(&connection, &output, PARTITIONS).expect("output topic");
    let dir = tempfile::tempdir().unwrap();
    let env = StreamExecutionEnvironment::new(
        ExecutionConfig::default()
            .with_parallelism(2)
            .with_metrics_update_interval(Duration::from_millis(50))
            .with_checkpointing(
                CheckpointConfig::default()
                    .with_interval(Duration::from_millis(100))
                    .with_storage(CheckpointStorageConfig::directory(
                        dir.path().join("checkpoints"),
                    )),
            ),
    )
    .unwrap();
    let sink = weir_kafka::KafkaSink::builder(
        common::bootstrap(),
        StringKeyValueSerializer::new(output.clone()),
    )
    .delivery_guarantee(DeliveryGuarantee::ExactlyOnce)
    .transactional_id_prefix(output.clone())
    .build()
    .unwrap();
    env.from_source(
        GeneratorSource::new(4_000, |i| (i.to_string(), i.to_string())).with_rate_limit(4_000.0),
        WatermarkStrategy::no_watermarks(),
        "numbers",
    )
    .sink_to(sink, "kafka out");
    let client = env.execute_async("kafka commit metrics").unwrap();
    // While it runs, transactions wait for their checkpoints and get committed.
    common::wait_until(
        || user_metric(&client.details(), "kafka out", "numCommittedTransactions") >= Some(2),
        Duration::from_secs(60),
        "commits reported while running",
    );
    let result = client.wait().expect("job runs");
    let details = client.details();
    let committed = user_metric(&details, "kafka out", "numCommittedTransactions").unwrap();
    // Each completed checkpoint's transaction of each subtask is committed once (a subtask
    // that wrote nothing since the last checkpoint pre-commits no transaction).
    assert!(
        committed >= 2 && committed <= 2 * result.checkpoints.completed as i64,
        "{committed} commits for {} checkpoints",
        result.checkpoints.completed
    );
    assert_eq!(
        user_metric(&details, "kafka out", "pendingTransactions"),
        Some(0),
        "nothing left pending at the end"
    );
    let latency = user_metric(&details, "kafka out", "commitLatencyMs").unwrap();
    assert!(latency >= 0, "{latency}");
}
