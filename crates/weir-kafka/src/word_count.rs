//! The reference pipeline — Kafka → key_by → running count → Kafka — shared by the
//! `weir-kafka-count` command, the process-kill tests and the benchmark, and the check of
//! its committed output.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use weir::connectors::held_end::HeldEnd;
use weir::WatermarkStrategy;
use weir::{
    CheckpointConfig, CheckpointStorageConfig, ExecutionConfig, RestartStrategyConfig,
    RetentionOnCancel, StreamExecutionEnvironment,
};

use crate::client_config::KafkaConnection;
use crate::deserializer::StringValue;
use crate::error::KafkaError;
use crate::log_reader::LogReader;
use crate::sink::{DeliveryGuarantee, KafkaSink, ProducerRecord};
use crate::source::KafkaSource;

/// How to run the pipeline.
#[derive(Clone)]
pub struct WordCountOptions {
    /// Brokers.
    pub bootstrap_servers: String,
    /// Topic of words (one per record value).
    pub input_topic: String,
    /// Topic of running counts: key = word, value = count so far.
    pub output_topic: String,
    /// The sink's guarantee.
    pub guarantee: DeliveryGuarantee,
    /// Transactional id prefix.
    pub transactional_id_prefix: String,
    /// Parallelism.
    pub parallelism: u32,
    /// Checkpoint interval.
    pub checkpoint_interval: Duration,
    /// Checkpoint directory (`None`: in memory).
    pub checkpoint_dir: Option<PathBuf>,
    /// Resume from the latest retained checkpoint.
    pub resume: bool,
    /// Start from this savepoint or checkpoint (Flink's `run -s`).
    pub restore_from: Option<String>,
    /// Stop at the end offsets seen at start (for tests and benchmarks).
    pub bounded: bool,
    /// Words per second over all subtasks (a throttle, so that kill tests hit mid-run).
    pub rate: Option<f64>,
    /// Called right before each transaction commits (fault injection).
    pub before_commit: Option<crate::sink::BeforeCommitHook>,
    /// How long the sink's flush, commit and fencing calls may take.
    pub operation_timeout: Duration,
    /// A second copy of every checkpoint file here (task-local recovery).
    pub local_recovery: Option<PathBuf>,
    /// Client properties for the source and the sink (`security.protocol`,
    /// `ssl.ca.location`, …), as librdkafka names them.
    pub properties: BTreeMap<String, String>,
    /// Hold the end of the input until a file exists here: every record is read, but the
    /// job does not finish before (for tests that must kill or stop a running job).
    pub hold_end_until: Option<PathBuf>,
}

impl WordCountOptions {
    /// Defaults for the given brokers and topics: exactly-once, parallelism 2, checkpoints
    /// every 500 ms in memory, bounded.
    pub fn new(bootstrap: &str, input: &str, output: &str) -> Self {
        Self {
            bootstrap_servers: bootstrap.into(),
            input_topic: input.into(),
            output_topic: output.into(),
            guarantee: DeliveryGuarantee::ExactlyOnce,
            transactional_id_prefix: format!("weir-count-{output}"),
            parallelism: 2,
            checkpoint_interval: Duration::from_millis(500),
            checkpoint_dir: None,
            resume: false,
            restore_from: None,
            bounded: true,
            rate: None,
            before_commit: None,
            operation_timeout: Duration::from_secs(60),
            local_recovery: None,
            properties: BTreeMap::new(),
            hold_end_until: None,
        }
    }
}

/// The job's name (and its checkpoint directory's).
pub const JOB_NAME: &str = "kafka-word-count";

/// Builds the pipeline in a new environment.
pub fn build(options: &WordCountOptions) -> Result<StreamExecutionEnvironment, KafkaError> {
    let storage = CheckpointStorageConfig::directory_or_memory(options.checkpoint_dir.clone());
    let mut checkpointing = CheckpointConfig::default()
        .with_interval(options.checkpoint_interval)
        .with_retained(2)
        .with_retention_on_cancel(RetentionOnCancel::Retain)
        .with_storage(storage);
    if let Some(dir) = &options.local_recovery {
        checkpointing = checkpointing.with_local_recovery(dir);
    }
    let mut config = ExecutionConfig::default()
        .with_parallelism(options.parallelism)
        .with_checkpointing(checkpointing)
        .with_restart_strategy(RestartStrategyConfig::FixedDelay {
            attempts: 3,
            delay: Duration::from_millis(200),
        })
        .with_resume_from_latest_checkpoint(options.resume);
    if let Some(path) = &options.restore_from {
        config = config.with_restore(weir::RestoreSettings::from_path(path));
    }
    let env =
        StreamExecutionEnvironment::new(config).map_err(|e| KafkaError::Config(e.to_string()))?;
    let mut source = KafkaSource::builder(&options.bootstrap_servers, StringValue)
        .topics([options.input_topic.clone()])
        .group_id(format!("{JOB_NAME}-{}", options.input_topic));
    if options.bounded {
        source = source.bounded();
    }
    for (key, value) in &options.properties {
        source = source.property(key, value);
    }
    if let Some(rate) = options.rate {
        source = source.with_rate_limit(rate);
    }
    let output_topic = options.output_topic.clone();
    let mut sink = KafkaSink::builder(
        &options.bootstrap_servers,
        move |(word, count): &(String, u64)| {
            Ok(ProducerRecord {
                topic: output_topic.clone(),
                partition: None,
                key: Some(word.as_bytes().to_vec()),
                value: Some(count.to_string().into_bytes()),
                timestamp: None,
            })
        },
    )
    .delivery_guarantee(options.guarantee)
    .operation_timeout(options.operation_timeout)
    .transactional_id_prefix(options.transactional_id_prefix.clone());
    for (key, value) in &options.properties {
        sink = sink.property(key, value);
    }
    if let Some(hook) = options.before_commit.clone() {
        sink = sink.before_commit(move |c, id| hook(c, id));
    }
    let hold = options.hold_end_until.clone();
    let source = HeldEnd::new(source.build()?, move || {
        hold.as_ref().is_none_or(|path| path.exists())
    });
    env.from_source(source, WatermarkStrategy::no_watermarks(), "words")
        .uid("kafka-words")
        .key_by(|w: &String| w.clone())
        .count()
        .name("count per word")
        .uid("count-per-word")
        .sink_to(sink.build()?, "counts")
        .uid("kafka-counts");
    Ok(env)
}

/// The committed `(word, count)` records of `topic`, read from the log with its
/// transaction markers (so aborted transactions are left out even where the broker does not
/// hide them).
pub fn committed_counts(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
) -> Result<Vec<(String, u64)>, KafkaError> {
    committed_counts_over(&KafkaConnection::new(bootstrap), topic, partitions)
}

/// [`committed_counts`] over a connection secured as `connection`'s properties say, each
/// request waiting up to its `request_timeout`.
pub fn committed_counts_over(
    connection: &KafkaConnection,
    topic: &str,
    partitions: i32,
) -> Result<Vec<(String, u64)>, KafkaError> {
    let mut reader = LogReader::for_connection(connection, connection.request_timeout)?;
    let mut out = Vec::new();
    for partition in 0..partitions {
        for record in reader.committed_records(topic, partition)? {
            let text = |b: Option<bytes::Bytes>| {
                b.map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default()
            };
            let word = text(record.key);
            let value = text(record.value);
            let count = value.parse::<u64>().map_err(|_| KafkaError::Deserialize {
                topic: topic.into(),
                partition,
                offset: record.offset,
                message: format!("count `{value}` is not a number"),
            })?;
            out.push((word, count));
        }
    }
    Ok(out)
}

/// Checks running counts (in log order) against the input's word frequencies: with
/// `exactly`, every `(word, i)` for `i` in `1..=n(word)` appears exactly once, in increasing
/// order of `i` (a word's counts all go to one partition), and nothing else appears;
/// otherwise each appears at least once (at-least-once: duplicates allowed, no loss).
pub fn verify_counts(
    committed: &[(String, u64)],
    expected: &HashMap<String, u64>,
    exactly: bool,
) -> Result<(), String> {
    let mut seen: BTreeMap<(&str, u64), u64> = BTreeMap::new();
    for (word, count) in committed {
        *seen.entry((word.as_str(), *count)).or_default() += 1;
    }
    let mut problems = Vec::new();
    for (word, n) in expected {
        for i in 1..=*n {
            match seen.get(&(word.as_str(), i)).copied().unwrap_or(0) {
                0 => problems.push(format!("missing ({word}, {i})")),
                1 => {}
                k if exactly => problems.push(format!("({word}, {i}) appears {k} times")),
                _ => {}
            }
        }
    }
    for (word, count) in seen.keys() {
        if expected.get(*word).is_none_or(|n| *count == 0 || count > n) {
            problems.push(format!("unexpected ({word}, {count})"));
        }
    }
    if exactly {
        let mut last: HashMap<&str, u64> = HashMap::new();
        for (word, count) in committed {
            let previous = last.insert(word.as_str(), *count).unwrap_or(0);
            if *count <= previous {
                problems.push(format!(
                    "({word}, {count}) comes after ({word}, {previous})"
                ));
            }
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    let total = problems.len();
    problems.truncate(10);
    Err(format!("{total} problems, first: {}", problems.join("; ")))
}

/// Word `i` of a deterministic input of `words` distinct words.
pub fn word(i: u64, words: u64) -> String {
    // A multiplicative hash spreads the words unevenly enough to be realistic.
    let w = (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) % words.max(1);
    format!("w{w}")
}

/// Produces `count` words to `topic` (created with `partitions` partitions if missing) and
/// returns each word's frequency.
pub fn produce_words(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    count: u64,
    words: u64,
) -> Result<HashMap<String, u64>, KafkaError> {
    produce_words_over(
        &KafkaConnection::new(bootstrap),
        topic,
        partitions,
        count,
        words,
    )
}

/// [`produce_words`] over a connection secured as `connection`'s properties say.
pub fn produce_words_over(
    connection: &KafkaConnection,
    topic: &str,
    partitions: i32,
    count: u64,
    words: u64,
) -> Result<HashMap<String, u64>, KafkaError> {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    crate::admin::ensure_topic(connection, topic, partitions)?;
    let producer: BaseProducer = connection
        .client_config(&[("linger.ms", "20"), ("enable.idempotence", "true")])
        .create()
        .map_err(|e| KafkaError::client("creating the input producer", e))?;
    let mut frequencies: HashMap<String, u64> = HashMap::new();
    for i in 0..count {
        let w = word(i, words);
        let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic)
            .key(w.as_bytes())
            .payload(w.as_bytes());
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((e, back)) => {
                    if e.rdkafka_error_code() != Some(rdkafka::types::RDKafkaErrorCode::QueueFull) {
                        return Err(KafkaError::client(format!("producing to {topic}"), e));
                    }
                    record = back;
                    producer.poll(Duration::from_millis(10));
                }
            }
        }
        *frequencies.entry(w).or_default() += 1;
        if i % 1024 == 0 {
            producer.poll(Duration::ZERO);
        }
    }
    producer
        .flush(Duration::from_secs(60))
        .map_err(|e| KafkaError::client(format!("flushing input to {topic}"), e))?;
    Ok(frequencies)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expected() -> HashMap<String, u64> {
        [("a".to_string(), 2), ("b".to_string(), 1)].into()
    }

    fn pairs(items: &[(&str, u64)]) -> Vec<(String, u64)> {
        items.iter().map(|(w, c)| (w.to_string(), *c)).collect()
    }

    #[test]
    fn exact_counts_pass_and_every_deviation_is_named() {
        let good = pairs(&[("a", 1), ("b", 1), ("a", 2)]);
        assert_eq!(verify_counts(&good, &expected(), true), Ok(()));
        let reordered = pairs(&[("a", 2), ("b", 1), ("a", 1)]);
        assert!(verify_counts(&reordered, &expected(), true)
            .unwrap_err()
            .contains("(a, 1) comes after (a, 2)"));
        assert_eq!(verify_counts(&reordered, &expected(), false), Ok(()));
        let missing = pairs(&[("a", 1), ("b", 1)]);
        assert!(verify_counts(&missing, &expected(), true)
            .unwrap_err()
            .contains("missing (a, 2)"));
        let duplicate = pairs(&[("a", 1), ("b", 1), ("a", 2), ("a", 2)]);
        assert!(verify_counts(&duplicate, &expected(), true)
            .unwrap_err()
            .contains("appears 2 times"));
        assert_eq!(verify_counts(&duplicate, &expected(), false), Ok(()));
        let extra = pairs(&[("a", 1), ("b", 1), ("a", 2), ("c", 1)]);
        assert!(verify_counts(&extra, &expected(), false)
            .unwrap_err()
            .contains("unexpected (c, 1)"));
    }

    #[test]
    fn words_are_deterministic_and_within_range() {
        assert_eq!(word(5, 100), word(5, 100));
        let distinct: std::collections::HashSet<String> =
            (0..10_000).map(|i| word(i, 50)).collect();
        assert!(distinct.len() <= 50 && distinct.len() > 40);
    }
}
