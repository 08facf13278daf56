//! The built-in metrics of a running subtask and of each operator in its chain, named as
//! Flink names them (`numRecordsIn`, `busyTimeMsPerSecond`, `currentInputWatermark`, …).
//!
//! The hot path never pays for them per record: operators keep plain counts and publish
//! them once per batch; time spent waiting is measured only where a thread blocks (for
//! input: idle; for output space or credit: backpressured), through the task thread's
//! [`CurrentTask`].

use std::cell::RefCell;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::handles::{Counter, Gauge, MetricGroup};
use super::sample::{OperatorSample, SubtaskSample, SubtaskState, UserMetricSample};
use crate::graph::execution_graph::SubtaskRef;
use crate::graph::ids::NodeId;
use crate::time::Watermark;

/// The live metrics of one operator subtask: its built-in record counts and watermark, and
/// the metrics its code registers.
#[derive(Debug, Clone)]
pub struct OperatorMetricGroup {
    node: NodeId,
    name: Arc<str>,
    pub(crate) records_in: Counter,
    pub(crate) records_out: Counter,
    /// The last watermark received (`i64::MIN`: none yet).
    pub(crate) watermark: Gauge,
    group: MetricGroup,
}

impl OperatorMetricGroup {
    /// A group that belongs to no task (unit tests, tools).
    pub fn detached(node: NodeId, name: &str) -> Self {
        let watermark = Gauge::default();
        watermark.set(i64::MIN);
        Self {
            node,
            name: name.into(),
            records_in: Counter::default(),
            records_out: Counter::default(),
            watermark,
            group: MetricGroup::detached(),
        }
    }

    /// Where the operator's code registers its own metrics.
    pub fn group(&self) -> &MetricGroup {
        &self.group
    }

    /// Publishes a watermark the operator received.
    pub(crate) fn set_watermark(&self, watermark: Watermark) {
        self.watermark.set(watermark.timestamp);
    }

    fn sample(&self) -> OperatorSample {
        let watermark = self.watermark.get();
        OperatorSample {
            node: self.node.0,
            name: self.name.to_string(),
            records_in: self.records_in.get(),
            records_out: self.records_out.get(),
            watermark: (watermark != i64::MIN).then_some(watermark),
            user: self
                .group
                .registered()
                .into_iter()
                .map(|m| UserMetricSample::of(&m))
                .collect(),
        }
    }
}

const RUNNING: u8 = 0;
const FINISHED: u8 = 1;
const FAILED: u8 = 2;
const CANCELED: u8 = 3;

/// The live metrics of one subtask (Flink's task metric group).
#[derive(Debug)]
pub struct TaskMetrics {
    task: SubtaskRef,
    name: String,
    attempt: u64,
    /// Whether the chain's head is a source.
    source: bool,
    started: Instant,
    state: AtomicU8,
    /// Milliseconds from start to end, once ended (0: running), so that an ended task's
    /// rates fall to zero instead of being spread over time it did not run.
    ended_ms: std::sync::atomic::AtomicU64,
    /// Nanoseconds spent waiting for input.
    pub(crate) idle_ns: Counter,
    /// The wait in progress, so that a sample counts a wait that has not ended (as Flink's
    /// `TimerGauge`): its kind (0 none, 1 idle, 2 backpressured) and its start, in
    /// nanoseconds since the task started.
    waiting: AtomicU8,
    waiting_since_ns: std::sync::atomic::AtomicU64,
    /// Nanoseconds spent waiting for room (or credit) downstream.
    pub(crate) backpressured_ns: Counter,
    /// Records the task's record writers sent downstream.
    pub(crate) records_out: Counter,
    /// Bytes received over the network.
    pub(crate) bytes_in: Counter,
    /// Bytes sent over the network.
    pub(crate) bytes_out: Counter,
    /// Elements waiting in the task's input channels.
    pub(crate) input_queue: Gauge,
    /// Elements waiting in the task's output channels.
    pub(crate) output_queue: Gauge,
    operators: Mutex<Vec<OperatorMetricGroup>>,
}

impl TaskMetrics {
    /// The metrics of `task` in run attempt `attempt`, named `name` (`chain (i/p)`);
    /// `source`: whether its chain starts with a source.
    pub fn new(task: SubtaskRef, name: impl Into<String>, attempt: u64, source: bool) -> Self {
        Self {
            task,
            name: name.into(),
            attempt,
            source,
            started: Instant::now(),
            state: AtomicU8::new(RUNNING),
            ended_ms: std::sync::atomic::AtomicU64::new(0),
            idle_ns: Counter::default(),
            waiting: AtomicU8::new(0),
            waiting_since_ns: std::sync::atomic::AtomicU64::new(0),
            backpressured_ns: Counter::default(),
            records_out: Counter::default(),
            bytes_in: Counter::default(),
            bytes_out: Counter::default(),
            input_queue: Gauge::default(),
            output_queue: Gauge::default(),
            operators: Mutex::new(Vec::new()),
        }
    }

    /// Which subtask.
    pub fn task(&self) -> SubtaskRef {
        self.task
    }

    /// The run attempt the task belongs to.
    pub fn attempt(&self) -> u64 {
        self.attempt
    }

    /// The metric group of operator `node` in this task's chain, created on first use.
    pub fn operator(&self, node: NodeId, name: &str) -> OperatorMetricGroup {
        let mut operators = self
            .operators
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(found) = operators.iter().find(|o| o.node == node) {
            return found.clone();
        }
        let group = OperatorMetricGroup::detached(node, name);
        operators.push(group.clone());
        group
    }

    /// Records how the task ended.
    pub(crate) fn set_ended(&self, outcome: TaskOutcome) {
        let state = match outcome {
            TaskOutcome::Finished => FINISHED,
            TaskOutcome::Failed => FAILED,
            TaskOutcome::Canceled => CANCELED,
        };
        let ran = (self.started.elapsed().as_millis() as u64).max(1);
        self.ended_ms.store(ran, Ordering::Relaxed);
        self.state.store(state, Ordering::Relaxed);
    }

    /// The values now.
    pub fn sample(&self) -> SubtaskSample {
        let operators: Vec<OperatorSample> = self
            .operators
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(OperatorMetricGroup::sample)
            .collect();
        // The chain's head receives what the task receives; a source task's input is what
        // its reader emits, as Flink counts it (FLIP-33).
        let records_in = operators.first().map_or(0, |head| {
            if self.source {
                head.records_out
            } else {
                head.records_in
            }
        });
        let input_watermark = operators.first().and_then(|head| head.watermark);
        // A wait still going on counts up to now.
        let waiting = self.waiting.load(Ordering::Relaxed);
        let since = self.waiting_since_ns.load(Ordering::Relaxed);
        let now = self.started.elapsed().as_nanos() as u64;
        let in_progress = |kind: u8| {
            if waiting == kind {
                now.saturating_sub(since)
            } else {
                0
            }
        };
        let state = match self.state.load(Ordering::Relaxed) {
            FINISHED => SubtaskState::Finished,
            FAILED => SubtaskState::Failed,
            CANCELED => SubtaskState::Canceled,
            _ => SubtaskState::Running,
        };
        SubtaskSample {
            vertex: self.task.vertex.0,
            subtask: self.task.subtask,
            name: self.name.clone(),
            attempt: self.attempt,
            state,
            uptime_ms: match self.ended_ms.load(Ordering::Relaxed) {
                0 => self.started.elapsed().as_millis() as u64,
                ended => ended,
            },
            records_in,
            records_out: self.records_out.get(),
            bytes_in: self.bytes_in.get(),
            bytes_out: self.bytes_out.get(),
            idle_ms: (self.idle_ns.get() + in_progress(1)) / 1_000_000,
            backpressured_ms: (self.backpressured_ns.get() + in_progress(2)) / 1_000_000,
            input_queue: self.input_queue.get().max(0) as u64,
            output_queue: self.output_queue.get().max(0) as u64,
            input_watermark,
            operators,
        }
    }
}

/// How a task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskOutcome {
    Finished,
    Failed,
    Canceled,
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<TaskMetrics>>> = const { RefCell::new(None) };
}

/// The task that runs on this thread, whose metrics its blocking waits are charged to.
pub(crate) struct CurrentTask;

impl CurrentTask {
    /// Charges this thread's waits to `metrics` until the returned guard is dropped.
    pub(crate) fn enter(metrics: Arc<TaskMetrics>) -> CurrentTaskGuard {
        CURRENT.with(|c| *c.borrow_mut() = Some(metrics));
        CurrentTaskGuard
    }

    fn with(f: impl FnOnce(&TaskMetrics)) {
        CURRENT.with(|c| {
            if let Some(metrics) = c.borrow().as_ref() {
                f(metrics);
            }
        });
    }

    /// Runs `wait`, a blocking wait of `kind` (1 idle, 2 backpressured), and counts its
    /// time; while it lasts, samples see it in progress.
    fn timed<R>(kind: u8, wait: impl FnOnce() -> R) -> R {
        Self::with(|m| {
            let since = m.started.elapsed().as_nanos() as u64;
            m.waiting_since_ns.store(since, Ordering::Relaxed);
            m.waiting.store(kind, Ordering::Relaxed);
        });
        let started = Instant::now();
        let result = wait();
        let spent = started.elapsed().as_nanos() as u64;
        Self::with(|m| {
            // The counter first: a sample in between may count the end twice, never miss it.
            if kind == 1 {
                m.idle_ns.inc_by(spent);
            } else {
                m.backpressured_ns.inc_by(spent);
            }
            m.waiting.store(0, Ordering::Relaxed);
        });
        result
    }

    /// Runs `wait`, a blocking wait for input, and counts its time as idle.
    pub(crate) fn idle<R>(wait: impl FnOnce() -> R) -> R {
        Self::timed(1, wait)
    }

    /// Runs `wait`, a blocking wait for room downstream, and counts its time as
    /// backpressured.
    pub(crate) fn backpressured<R>(wait: impl FnOnce() -> R) -> R {
        Self::timed(2, wait)
    }

    /// Publishes the number of elements waiting in the task's input channels.
    pub(crate) fn set_input_queue(queued: usize) {
        Self::with(|m| m.input_queue.set(queued as i64));
    }

    /// Counts `bytes` received over the network.
    pub(crate) fn received_bytes(bytes: u64) {
        Self::with(|m| m.bytes_in.inc_by(bytes));
    }

    /// Counts `bytes` sent over the network.
    pub(crate) fn sent_bytes(bytes: usize) {
        Self::with(|m| m.bytes_out.inc_by(bytes as u64));
    }
}

/// Stops charging the thread's waits to a task when dropped.
pub(crate) struct CurrentTaskGuard;

impl Drop for CurrentTaskGuard {
    fn drop(&mut self) {
        CURRENT.with(|c| *c.borrow_mut() = None);
    }
}
