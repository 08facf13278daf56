//! What the Kafka tests share: the broker's address and unique names.

#![allow(dead_code)]

use std::process::Output;
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

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use weir::connectors::sink::{Sink, SinkWriter};
use weir::{BoxError, RuntimeContext};

/// A sink that makes records visible only when their checkpoint completes — the exactly-once
/// oracle: what it shows is exactly what completed checkpoints account for.
#[derive(Clone, Default)]
pub struct CommittingSink {
    committed: Arc<Mutex<Vec<String>>>,
}

impl CommittingSink {
    /// Everything committed so far.
    pub fn committed(&self) -> Vec<String> {
        self.committed.lock().unwrap().clone()
    }
}

/// The writer of one [`CommittingSink`] subtask.
pub struct CommittingWriter {
    committed: Arc<Mutex<Vec<String>>>,
    open: Vec<String>,
    pending: BTreeMap<u64, Vec<String>>,
}

impl Sink<String> for CommittingSink {
    type Writer = CommittingWriter;
    fn create_writer(&self, _context: &RuntimeContext) -> Result<CommittingWriter, BoxError> {
        Ok(CommittingWriter {
            committed: self.committed.clone(),
            open: Vec::new(),
            pending: BTreeMap::new(),
        })
    }
}

impl SinkWriter<String> for CommittingWriter {
    fn write(&mut self, record: String) -> Result<(), BoxError> {
        self.open.push(record);
        Ok(())
    }
    fn flush(&mut self, _end_of_input: bool) -> Result<(), BoxError> {
        Ok(())
    }
    fn snapshot_state(&mut self, ctx: &mut weir::FunctionStateContext<'_>) -> Result<(), BoxError> {
        let id = ctx.checkpoint_id().ok_or("no checkpoint id")?;
        self.pending.insert(id, std::mem::take(&mut self.open));
        Ok(())
    }
    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), BoxError> {
        let later = self.pending.split_off(&(checkpoint_id + 1));
        let done = std::mem::replace(&mut self.pending, later);
        let mut committed = self.committed.lock().map_err(|_| "poisoned")?;
        for (_, records) in done {
            committed.extend(records);
        }
        Ok(())
    }
}

/// Waits until `done` holds, or fails after `limit`.
pub fn wait_until(mut done: impl FnMut() -> bool, limit: Duration, what: &str) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "gave up after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The last `error:` line a job printed (its final error), or an empty string.
pub fn last_error_line(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr)
        .lines()
        .rev()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_default()
        .to_string()
}

/// Runs `command` to its end (at most 3 minutes), its output captured in files so that a
/// hung job fails the test instead of hanging it.
pub fn run_job(mut command: std::process::Command, what: &str) -> Output {
    let captured = tempfile::tempdir().expect("capture dir");
    let file = |name: &str| std::fs::File::create(captured.path().join(name)).expect("capture");
    let mut child = command
        .stdout(file("stdout"))
        .stderr(file("stderr"))
        .spawn()
        .expect("spawn weir-kafka-count");
    let read = |name: &str| std::fs::read(captured.path().join(name)).expect("captured output");
    let limit = Duration::from_secs(180);
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for weir-kafka-count") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = String::from_utf8_lossy(&read("stderr")).into_owned();
            let tail: Vec<&str> = stderr.lines().rev().take(40).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            panic!(
                "{what}: the job did not finish within {limit:?}; the end of its log:\n{}",
                tail.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = Output {
        status,
        stdout: read("stdout"),
        stderr: read("stderr"),
    };
    eprintln!(
        "{what}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output
}
