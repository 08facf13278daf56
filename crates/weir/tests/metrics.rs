//! Live metrics against running jobs: what is counted equals what was processed, and
//! backpressure shows where a slow operator holds its producers back.

use std::time::{Duration, Instant};

use weir::metrics::{BackpressureLevel, SubtaskState};
use weir::prelude::*;
use weir::runtime::job_master::{JobDetails, JobState};

fn config(parallelism: u32) -> ExecutionConfig {
    ExecutionConfig::default()
        .with_parallelism(parallelism)
        .with_metrics_update_interval(Duration::from_millis(50))
}

fn vertex<'a>(
    details: &'a JobDetails,
    name_part: &str,
) -> &'a weir::runtime::job_master::VertexDetails {
    details
        .vertices
        .iter()
        .find(|v| v.name.contains(name_part))
        .unwrap_or_else(|| {
            panic!(
                "no vertex named like `{name_part}` in {:?}",
                details.vertices.iter().map(|v| &v.name).collect::<Vec<_>>()
            )
        })
}

/// Waits until `check` holds for the published details, or panics with the last ones.
fn await_details(
    client: &JobClient,
    what: &str,
    check: impl Fn(&JobDetails) -> bool,
) -> std::sync::Arc<JobDetails> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let details = client.details();
        if check(&details) {
            return details;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; last details: {details:#?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn records_counted_equal_records_processed() {
    const N: u64 = 100_000;
    let env = StreamExecutionEnvironment::new(config(2)).unwrap();
    env.generate(N, |i| i)
        .filter(|i| i % 4 != 0)
        .name("three quarters")
        .key_by(|i: &u64| i % 10)
        .reduce(|a, b| a + b)
        .name("running sum")
        .sink_to(DiscardingSink, "discard");
    let client = env.execute_async("counted").unwrap();
    let result = client.wait().unwrap();
    let details = client.details();
    assert_eq!(details.state, JobState::Finished, "{details:#?}");
    assert_eq!(details.job_id.len(), 32);
    assert_eq!(details.job_id, client.job_id());

    let source = vertex(&details, "three quarters");
    let sink = vertex(&details, "running sum");
    let (source_metrics, sink_metrics) = (
        source.metrics.clone().unwrap(),
        sink.metrics.clone().unwrap(),
    );
    // The source task reads N records, filters a quarter out, and sends the rest on.
    assert_eq!(source_metrics.records_in, N);
    assert_eq!(source_metrics.records_out, N * 3 / 4);
    assert_eq!(sink_metrics.records_in, N * 3 / 4);
    assert_eq!(
        sink_metrics.records_out, 0,
        "a sink's task sends nothing downstream"
    );
    assert_eq!(source.subtasks.len(), 2);
    for subtask in source.subtasks.iter().chain(&sink.subtasks) {
        assert_eq!(subtask.sample.state, SubtaskState::Finished);
    }
    // Per operator, the live counts agree with the result's.
    for op in &result.operators {
        let live: (u64, u64) = details
            .vertices
            .iter()
            .flat_map(|v| &v.subtasks)
            .flat_map(|s| &s.sample.operators)
            .filter(|o| o.node == op.node.0)
            .fold((0, 0), |(i, o), s| (i + s.records_in, o + s.records_out));
        assert_eq!(
            live,
            (op.records_in, op.records_out),
            "operator `{}`",
            op.name
        );
    }
}

/// A sink that takes 200 µs per record, as a slow database would.
#[derive(Clone)]
struct SlowSink;

struct SlowWriter;

impl Sink<u64> for SlowSink {
    type Writer = SlowWriter;
    fn commits_on_checkpoint_completion(&self) -> bool {
        false
    }
    fn create_writer(&self, _context: &RuntimeContext) -> Result<SlowWriter, BoxError> {
        Ok(SlowWriter)
    }
}

impl SinkWriter<u64> for SlowWriter {
    fn write(&mut self, _record: u64) -> Result<(), BoxError> {
        std::thread::sleep(Duration::from_micros(200));
        Ok(())
    }
    fn flush(&mut self, _end_of_input: bool) -> Result<(), BoxError> {
        Ok(())
    }
}

#[test]
fn backpressure_shows_when_a_sink_is_slowed() {
    let env = StreamExecutionEnvironment::new(config(1).with_chaining(false)).unwrap();
    env.from_source(
        GeneratorSource::unbounded(|i| i),
        WatermarkStrategy::no_watermarks(),
        "fast source",
    )
    .map(|i: u64| i + 1)
    .name("plus one")
    .sink_to(SlowSink, "slow sink");
    let client = env.execute_async("backpressured").unwrap();
    // The slow sink holds back the map, and the map the source.
    let details = await_details(
        &client,
        "the map and the source to be backpressured, the sink's queue full",
        |d| {
            vertex(d, "slow sink")
                .subtasks
                .first()
                .is_some_and(|s| s.sample.input_queue > 0)
                && ["fast source", "plus one"].iter().all(|name| {
                    d.vertices.iter().any(|v| {
                        v.name.contains(name)
                            && v.metrics
                                .as_ref()
                                .is_some_and(|m| m.backpressure_level() == BackpressureLevel::High)
                    })
                })
        },
    );
    let sink = vertex(&details, "slow sink").metrics.clone().unwrap();
    assert!(
        sink.rates.busy_time_ms_per_second > 500.0,
        "the slow sink is busy: {sink:?}"
    );
    assert_eq!(
        sink.backpressure_level(),
        BackpressureLevel::Ok,
        "nothing holds the sink back: {sink:?}"
    );
    assert!(
        sink.rates.idle_time_ms_per_second < 500.0,
        "the sink never waits for input: {sink:?}"
    );
    let source = vertex(&details, "fast source");
    assert!(
        source.subtasks[0].sample.output_queue > 0,
        "the source's output queue fills: {source:?}"
    );
    let sink_task = &vertex(&details, "slow sink").subtasks[0].sample;
    assert!(
        sink_task.input_queue > 0,
        "the sink's input queue fills: {sink_task:?}"
    );
    assert_eq!(details.state, JobState::Running);
    client.cancel().unwrap();
    assert_eq!(client.details().state, JobState::Canceled);
}

#[test]
fn failures_and_restarts_are_published() {
    let env = StreamExecutionEnvironment::new(config(1).with_restart_strategy(
        RestartStrategyConfig::FixedDelay {
            attempts: 1,
            delay: Duration::from_millis(10),
        },
    ))
    .unwrap();
    env.enable_checkpointing(Duration::from_millis(20));
    env.generate(1000, |i| i)
        .map(|i: u64| {
            if i == 500 {
                // Fails every run: the strategy gives up after one restart.
                panic!("poison record {i}");
            }
            i
        })
        .name("picky")
        .sink_to(DiscardingSink, "discard");
    let client = env.execute_async("failing").unwrap();
    assert!(client.wait().is_err());
    let details = client.details();
    assert_eq!(details.state, JobState::Failed);
    assert_eq!(details.metrics.restarts, 1);
    assert_eq!(details.exceptions.len(), 2, "{:#?}", details.exceptions);
    assert!(details.exceptions[0].restarted && !details.exceptions[1].restarted);
    assert!(
        details.exceptions[0]
            .exception
            .contains("poison record 500"),
        "{:#?}",
        details.exceptions
    );
    assert!(
        details.exceptions[0].exception.contains("picky"),
        "names the operator: {:#?}",
        details.exceptions
    );
}

/// The summed value of user metric `name` of operator `operator`.
fn user_metric(details: &JobDetails, operator: &str, name: &str) -> Option<i64> {
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
fn a_transactional_sink_reports_its_commits_and_pending_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamExecutionEnvironment::new(
        config(2).with_checkpointing(
            CheckpointConfig::default()
                .with_interval(Duration::from_millis(30))
                .with_storage(CheckpointStorageConfig::directory(
                    dir.path().join("checkpoints"),
                )),
        ),
    )
    .unwrap();
    env.from_source(
        GeneratorSource::new(6_000, |i| i).with_rate_limit(20_000.0),
        WatermarkStrategy::no_watermarks(),
        "numbers",
    )
    .map(|i: u64| i.to_string())
    .sink_to(
        FileSink::<String>::lines(dir.path().join("out")).into_two_phase_commit_sink(),
        "files",
    );
    let client = env.execute_async("committing").unwrap();
    let result = client.wait().unwrap();
    let details = client.details();
    let committed = user_metric(&details, "files", "numCommittedTransactions").unwrap();
    // Every checkpoint pre-commits one transaction per subtask; each is committed once.
    assert!(
        committed >= 2 * result.checkpoints.completed as i64 - 2,
        "{committed} commits for {} checkpoints",
        result.checkpoints.completed
    );
    assert_eq!(
        user_metric(&details, "files", "pendingTransactions"),
        Some(0),
        "nothing left pending at the end"
    );
    let latency = user_metric(&details, "files", "commitLatencyMs").unwrap();
    assert!(latency >= 0, "{latency}");
}

#[test]
fn skipped_malformed_records_are_counted_live() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.csv");
    std::fs::write(&input, "1\n2\nnot a number\n4\nfive\n6\n").unwrap();
    let env = StreamExecutionEnvironment::new(config(1)).unwrap();
    env.from_source(
        FileSource::<(u64,)>::csv(&input).on_malformed(MalformedRecordPolicy::Skip),
        WatermarkStrategy::no_watermarks(),
        "numbers file",
    )
    .sink_to(DiscardingSink, "discard");
    let client = env.execute_async("skipping").unwrap();
    let result = client.wait().unwrap();
    let source = result
        .operators
        .iter()
        .find(|o| o.name.contains("numbers file"))
        .unwrap();
    assert_eq!(source.records_skipped, 2);
    assert_eq!(
        user_metric(
            &client.details(),
            "numbers file",
            "numRecordsMalformedSkipped"
        ),
        Some(2)
    );
}

fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn watermarks_are_published_per_vertex_and_operator() {
    // Events stamped five seconds in the past: the watermark trails processing time by
    // about that much.
    let env = StreamExecutionEnvironment::new(
        config(1).with_auto_watermark_interval(Duration::from_millis(20)),
    )
    .unwrap();
    env.from_source(
        GeneratorSource::unbounded(|i| i).with_rate_limit(2_000.0),
        WatermarkStrategy::for_bounded_out_of_orderness(Duration::ZERO)
            .with_timestamp_assigner(|_: &u64, _| now_millis() - 5_000),
        "late events",
    )
    .key_by(|i: &u64| i % 4)
    .reduce(|a: u64, b: u64| a.wrapping_add(b))
    .name("sums")
    .sink_to(DiscardingSink, "discard");
    let client = env.execute_async("watermarked").unwrap();
    let details = await_details(&client, "a watermark downstream", |d| {
        d.vertices.iter().any(|v| {
            v.name.contains("sums") && v.metrics.as_ref().is_some_and(|m| m.watermark.is_some())
        })
    });
    let now = now_millis();
    let sums = vertex(&details, "sums");
    let watermark = sums.metrics.as_ref().unwrap().watermark.unwrap();
    assert!(
        (now - 8_000..now - 4_000).contains(&watermark),
        "the watermark trails by ~5 s: {}",
        now - watermark
    );
    let operator = sums.subtasks[0]
        .sample
        .operators
        .iter()
        .find(|o| o.name == "sums")
        .unwrap();
    assert!(operator.watermark.is_some());
    client.cancel().unwrap();
}

#[test]
fn a_starved_task_is_idle_while_it_waits() {
    let env = StreamExecutionEnvironment::new(config(1)).unwrap();
    env.from_source(
        GeneratorSource::unbounded(|i| i).with_rate_limit(5.0),
        WatermarkStrategy::no_watermarks(),
        "trickle",
    )
    .key_by(|i: &u64| i % 2)
    .reduce(|a: u64, b: u64| a.wrapping_add(b))
    .name("sums")
    .sink_to(DiscardingSink, "discard");
    let client = env.execute_async("starved").unwrap();
    // Wait until two samples a second apart exist, so that rates cover waits in progress.
    std::thread::sleep(Duration::from_millis(1500));
    let details = await_details(&client, "the starved task to be idle", |d| {
        vertex(d, "sums")
            .metrics
            .as_ref()
            .is_some_and(|m| m.rates.idle_time_ms_per_second > 800.0)
    });
    let sums = vertex(&details, "sums").metrics.clone().unwrap();
    assert!(sums.rates.busy_time_ms_per_second < 200.0, "{sums:?}");
    client.cancel().unwrap();
}
