//! Stop-with-savepoint stops at the savepoint's barrier (as Flink's `stop`): sources emit
//! nothing after it, so a stop and a restore read every source record exactly once and the
//! transactional sinks keep no temporary files; with drain, operators end their input before
//! the savepoint; a failed stop leaves the job running.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use weir::WatermarkStrategy;

use common::{committed, committed_lines, diff, hidden_files, multiset, CommittingSink, MarkEnd};
use weir::connectors::file_sink::{committed_files, FileSink};
use weir::connectors::generator::GeneratorSource;
use weir::connectors::sink::Sink;
use weir::connectors::write_ahead_log::{FileBatchCommitter, WriteAheadLog};
use weir::{
    BoxError, CheckpointConfig, CheckpointStorageConfig, Collector, ExecutionConfig,
    JobExecutionResult, JobStatus, ProcessContext, ProcessFunction, StreamExecutionEnvironment,
};

/// Enough records at the rate limit for the job to run about two seconds: it is stopped
/// long before its end.
const RECORDS: u64 = 40_000;
const RATE: f64 = 20_000.0;
/// The source's name in job results.
const SOURCE: &str = "Source: numbers";

fn config(checkpoints: &Path, restore: Option<&weir::Savepoint>) -> ExecutionConfig {
    let mut config = ExecutionConfig::default()
        .with_parallelism(2)
        .with_buffer_size(64)
        .with_buffer_timeout(Duration::from_millis(5))
        .with_checkpointing(
            CheckpointConfig::default()
                .with_interval(Duration::from_millis(50))
                .with_storage(CheckpointStorageConfig::FileSystem(
                    checkpoints.to_path_buf(),
                )),
        );
    if let Some(savepoint) = restore {
        config = config.with_restore(savepoint);
    }
    config
}

/// Records the named operator emitted.
fn records_out(result: &JobExecutionResult, operator: &str) -> u64 {
    result
        .operators
        .iter()
        .find(|o| o.name == operator)
        .unwrap_or_else(|| panic!("no operator `{operator}` in {:?}", result.operators))
        .records_out
}

/// Waits until some output is committed (a checkpoint completed mid-way through the input).
fn await_committed_output(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while committed_files(dir).map_or(true, |f| f.is_empty()) {
        assert!(Instant::now() < deadline, "no output committed in 300 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// numbers → (another task) → lines → `sink`.
fn build<S: Sink<String>>(env: &StreamExecutionEnvironment, sink: S) {
    env.from_source(
        GeneratorSource::new(RECORDS, |i| i).with_rate_limit(RATE),
        WatermarkStrategy::no_watermarks(),
        "numbers",
    )
    .uid("numbers")
    .rebalance()
    .map(|i: u64| i.to_string())
    .uid("format")
    .sink_to(sink, "output")
    .uid("output");
}

/// Stops the job mid-way with a savepoint, checks what the stop left in `out`, restores it
/// and runs it to its end: every source record is read once in total, and the committed
/// output is exactly the input.
fn stop_and_restore<S: Sink<String>>(out: &Path, make_sink: impl Fn() -> S) {
    let checkpoints = tempfile::tempdir().unwrap();
    let env = StreamExecutionEnvironment::new(config(checkpoints.path(), None)).unwrap();
    build(&env, make_sink());
    let client = env.execute_async("stop at barrier").unwrap();
    await_committed_output(out);
    let (savepoint, stopped) = client.stop_with_savepoint().unwrap();
    assert_eq!(stopped.status, JobStatus::Stopped);
    assert_eq!(stopped.savepoint.as_ref(), Some(&savepoint));
    let read_before = records_out(&stopped, SOURCE);
    assert!(
        read_before > 0 && read_before < RECORDS,
        "stopped mid-way: {read_before} of {RECORDS} read"
    );
    // Everything the savepoint covers is committed, and nothing after it was written.
    assert!(
        hidden_files(out).is_empty(),
        "temporary files after the stop: {:?}",
        hidden_files(out)
    );
    assert_eq!(
        committed_lines(out).len() as u64,
        read_before,
        "the stop commits exactly what the sources read"
    );

    let env =
        StreamExecutionEnvironment::new(config(checkpoints.path(), Some(&savepoint))).unwrap();
    build(&env, make_sink());
    let finished = env.execute("stop at barrier").unwrap();
    assert_eq!(finished.status, JobStatus::Finished);
    let read_after = records_out(&finished, SOURCE);
    assert_eq!(
        read_before + read_after,
        RECORDS,
        "source records read across the stop ({read_before}) and the restore ({read_after})"
    );
    let expected = multiset(&(0..RECORDS).map(|i| i.to_string()).collect::<Vec<_>>());
    if let Some(d) = diff(&expected, &multiset(&committed_lines(out))) {
        panic!("committed output after stop and restore: {d}");
    }
    assert!(hidden_files(out).is_empty(), "{:?}", hidden_files(out));
}

#[test]
fn stop_with_savepoint_reads_each_record_once_with_the_file_sink() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().to_path_buf();
    stop_and_restore(out.path(), || FileSink::<String>::lines(&dir));
}

#[test]
fn stop_with_savepoint_reads_each_record_once_with_the_write_ahead_log_sink() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().to_path_buf();
    stop_and_restore(out.path(), || {
        WriteAheadLog(FileBatchCommitter::<String>::lines(&dir))
    });
}

/// Runs numbers → (another task) → `MarkEnd` → file sink, stops it with a savepoint
/// (drained or not), and returns the committed lines, the source's count and the number
/// of `end_input` calls.
fn stop_marked(drain: bool) -> (Vec<String>, u64, usize) {
    let (lines, read, end_inputs, _) = stop_marked_then(drain, false);
    (lines, read, end_inputs)
}

/// As [`stop_marked`], and when `restore` is set, runs the job again from the savepoint to
/// its end into the same directory; also returns every line committed then.
fn stop_marked_then(drain: bool, restore: bool) -> (Vec<String>, u64, usize, Vec<String>) {
    let out = tempfile::tempdir().unwrap();
    let checkpoints = tempfile::tempdir().unwrap();
    let end_inputs = Arc::new(AtomicUsize::new(0));
    let build = |env: &StreamExecutionEnvironment, out: &Path| {
        env.from_source(
            GeneratorSource::new(RECORDS, |i| i).with_rate_limit(RATE),
            WatermarkStrategy::no_watermarks(),
            "numbers",
        )
        .uid("numbers")
        .rebalance()
        .process(MarkEnd {
            end_inputs: end_inputs.clone(),
        })
        .uid("mark end")
        .sink_to(FileSink::<String>::lines(out), "output")
        .uid("output");
    };
    let env = StreamExecutionEnvironment::new(config(checkpoints.path(), None)).unwrap();
    build(&env, out.path());
    let client = env.execute_async("drain").unwrap();
    await_committed_output(out.path());
    let (savepoint, result) = if drain {
        client.stop_with_savepoint_and_drain().unwrap()
    } else {
        client.stop_with_savepoint().unwrap()
    };
    assert_eq!(result.status, JobStatus::Stopped);
    assert!(
        hidden_files(out.path()).is_empty(),
        "{:?}",
        hidden_files(out.path())
    );
    let first = committed_lines(out.path());
    let mut second = Vec::new();
    if restore {
        let env =
            StreamExecutionEnvironment::new(config(checkpoints.path(), Some(&savepoint))).unwrap();
        build(&env, out.path());
        env.execute("drain").unwrap();
        second = committed_lines(out.path());
    }
    (
        first,
        records_out(&result, SOURCE),
        end_inputs.load(Ordering::SeqCst),
        second,
    )
}

#[test]
fn a_job_restored_from_a_drained_savepoint_does_not_end_its_input_again() {
    let (first, read, end_inputs, all) = stop_marked_then(true, true);
    assert_eq!(end_inputs, 2, "end_input ran again after the restore");
    let markers = all.iter().filter(|l| l.starts_with("end-")).count();
    assert_eq!(markers, 2, "the end markers of the drained run only");
    // The rest of the input is still read, once.
    assert!(read < RECORDS && (first.len() as u64) < RECORDS + 2);
    assert_eq!(all.len() as u64, RECORDS + 2);
}

#[test]
fn drain_ends_the_input_before_the_savepoint() {
    let (lines, read, end_inputs) = stop_marked(true);
    assert_eq!(end_inputs, 2, "end_input runs once per subtask under drain");
    // What end_input emitted belongs to the savepoint, so its completion committed it.
    let mut markers: Vec<&String> = lines.iter().filter(|l| l.starts_with("end-")).collect();
    markers.sort();
    assert_eq!(markers, ["end-input-0", "end-input-1"]);
    assert!(read < RECORDS, "stopped mid-way: {read} of {RECORDS}");
    assert_eq!(lines.len() as u64, read + 2);
}

#[test]
fn stop_without_drain_does_not_end_the_input() {
    let (lines, read, end_inputs) = stop_marked(false);
    assert_eq!(end_inputs, 0, "end_input must not run without drain");
    assert!(!lines.iter().any(|l| l.starts_with("end-")), "{lines:?}");
    assert_eq!(lines.len() as u64, read);
}

/// Holds every record while closed, so that no barrier passes and a checkpoint expires.
#[derive(Clone, Default)]
struct Gate {
    state: Arc<(Mutex<(bool, usize)>, Condvar)>,
}

impl Gate {
    fn set_closed(&self, closed: bool) {
        let (lock, changed) = &*self.state;
        lock.lock().unwrap().0 = closed;
        changed.notify_all();
    }

    /// Waits while the gate is closed.
    fn pass(&self) {
        let (lock, changed) = &*self.state;
        let mut state = lock.lock().unwrap();
        if state.0 {
            state.1 += 1;
            changed.notify_all();
            while state.0 {
                state = changed.wait(state).unwrap();
            }
            state.1 -= 1;
        }
    }

    /// Waits until a record is held.
    fn await_held(&self) {
        let (lock, changed) = &*self.state;
        let deadline = Instant::now() + Duration::from_secs(300);
        let mut state = lock.lock().unwrap();
        while state.1 == 0 {
            assert!(
                Instant::now() < deadline,
                "no record reached the closed gate"
            );
            state = changed
                .wait_timeout(state, Duration::from_millis(100))
                .unwrap()
                .0;
        }
    }
}

#[derive(Clone)]
struct Held {
    gate: Gate,
}

impl ProcessFunction<u64, u64> for Held {
    fn process_element(
        &mut self,
        value: u64,
        _ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_, u64>,
    ) -> Result<(), BoxError> {
        self.gate.pass();
        out.collect(value);
        Ok(())
    }
}

#[test]
fn a_failed_stop_with_savepoint_leaves_the_job_running() {
    const N: u64 = 10_000;
    let checkpoints = tempfile::tempdir().unwrap();
    let gate = Gate::default();
    let (sink, store) = CommittingSink::<u64>::new();
    // No periodic checkpoint: the stop's savepoint is the only one until the final one.
    let config = ExecutionConfig::default()
        .with_parallelism(2)
        .with_buffer_size(64)
        .with_buffer_timeout(Duration::from_millis(5))
        .with_checkpointing(
            CheckpointConfig::default()
                .with_interval(Duration::from_secs(3600))
                .with_timeout(Duration::from_secs(2))
                .with_storage(CheckpointStorageConfig::FileSystem(
                    checkpoints.path().to_path_buf(),
                )),
        );
    let env = StreamExecutionEnvironment::new(config).unwrap();
    env.from_source(
        GeneratorSource::new(N, |i| i).with_rate_limit(RATE),
        WatermarkStrategy::no_watermarks(),
        "numbers",
    )
    .rebalance()
    .process(Held { gate: gate.clone() })
    .sink_to(sink, "committed");
    let client = env.execute_async("failed stop").unwrap();
    gate.set_closed(true);
    gate.await_held();
    // The savepoint's barrier cannot pass the held record: the savepoint expires.
    let err = client
        .stop_with_savepoint()
        .expect_err("the savepoint cannot complete while a record is held");
    assert!(err.to_string().contains("expired"), "{err}");
    gate.set_closed(false);
    // The job runs on, still under this client: the sources resume reading and the job ends
    // with its final checkpoint, which commits every record once.
    let result = client.wait().unwrap();
    assert_eq!(result.status, JobStatus::Finished);
    assert_eq!(committed(&store).len() as u64, N);
    let expected: HashMap<u64, usize> = (0..N).map(|i| (i, 1)).collect();
    if let Some(d) = diff(&expected, &multiset(&committed(&store))) {
        panic!("output after the failed stop: {d}");
    }
}
