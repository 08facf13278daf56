//! A running subtask: the unit the job manager starts, watches, checkpoints and cancels.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

use crate::checkpoint::config::CheckpointingMode;
use crate::checkpoint::coordinator::Acknowledgement;
use crate::checkpoint::storage::CheckpointStorage;
use crate::config::ExecutionConfig;
use crate::error::{panic_message, TaskError};
use crate::graph::execution_graph::SubtaskRef;
use crate::graph::ids::NodeId;
use crate::runtime::channel::CancelToken;
use crate::runtime::output::OperatorMetrics;
use crate::runtime::snapshot::{CheckpointNotification, RestoredOperatorState};
use crate::state::key_group::KeyGroupRange;

/// The body of a task: a source loop or an input-processing loop driving a chain.
pub trait Invokable: Send {
    /// Runs until the input ends, the job is cancelled, or something fails.
    fn invoke(&mut self, env: &TaskEnvironment) -> Result<(), TaskError>;
    /// Record counts of the chain's operators.
    fn report_metrics(&self, into: &mut Vec<OperatorMetrics>);
}

/// What a running task has of the outside world: its identity, its line from and to the
/// job manager, and the checkpoint storage its snapshots go to.
pub struct TaskEnvironment {
    /// Which subtask.
    pub task: SubtaskRef,
    /// Its name, `chain (i/p)`.
    pub task_name: String,
    /// Messages from the job manager.
    pub control: Receiver<TaskControl>,
    /// Reports to the job manager.
    pub events: Sender<TaskEvent>,
    /// Where snapshots are written (`None` without checkpointing).
    pub storage: Option<Arc<dyn CheckpointStorage>>,
    /// Barrier alignment mode.
    pub mode: CheckpointingMode,
    /// Whether periodic checkpoints are taken.
    pub checkpointing: bool,
    /// Whether unaligned checkpoints are on (tasks read their channels' priority lanes).
    pub unaligned: bool,
    /// How long a task aligns an unaligned-capable barrier before it snapshots unaligned.
    pub aligned_checkpoint_timeout: std::time::Duration,
    /// Operator list state above this many bytes per operator subtask goes into a state
    /// file instead of the metadata.
    pub state_file_threshold: u64,
    /// The job's cancellation signal.
    pub cancel: CancelToken,
    /// Snapshot threads started by this task; joined before the task reports its end, so
    /// that its acknowledgements always arrive before its end.
    pub snapshot_threads: std::cell::RefCell<Vec<std::thread::JoinHandle<()>>>,
    /// The task's live metrics; its thread's blocking waits are charged to them.
    pub metrics: Arc<crate::metrics::TaskMetrics>,
}

impl TaskEnvironment {
    /// Whether periodic checkpointing is on (sinks then commit only on checkpoint completion,
    /// and the job ends with a final checkpoint).
    pub fn checkpointing(&self) -> bool {
        self.checkpointing
    }
}

/// A message from the job manager to a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TaskControl {
    /// A checkpoint completed or was aborted.
    Notify(CheckpointNotification),
    /// Stop now (after the messages sent before this one). Sent after a stop-with-savepoint's
    /// completion notice, at which tasks waiting at its barrier end by themselves; it only
    /// reaches a task that did not.
    Stop,
    /// Sources stop saying where each record was read: the run traced record origins after
    /// a failure of user code and has read past where the failed run failed.
    StopTracingOrigins,
}

/// What an operator knows of the subtask it runs in.
#[derive(Debug, Clone)]
pub struct OperatorSetup {
    /// The operator.
    pub node: NodeId,
    /// Its name, for errors.
    pub name: Arc<str>,
    /// Its uid (given or derived), which names its state and external resources.
    pub uid: Arc<str>,
    /// Zero-based subtask index.
    pub subtask: u32,
    /// Parallelism of the operator.
    pub parallelism: u32,
    /// Number of key groups.
    pub max_parallelism: u32,
    /// Key groups this subtask owns.
    pub key_groups: KeyGroupRange,
    /// Job configuration.
    pub config: ExecutionConfig,
    /// Cancellation signal of the job.
    pub cancel: CancelToken,
    /// State to start from, when the job is restored.
    pub restored: Option<Arc<RestoredOperatorState>>,
    /// The job's fencing token (epoch), checked before commits.
    pub fencing: crate::checkpoint::fencing::FencingToken,
    /// The checkpoint the job was restored from (`None`: empty state).
    pub restored_from: Option<u64>,
    /// The run's attempt number in this process: 0 at its start, then one more per restart.
    pub attempt: u64,
    /// The operator's live metrics, and where its code registers its own.
    pub metrics: crate::metrics::OperatorMetricGroup,
    /// Whether sources say where each record was read, so that a failing operator names the
    /// record (the attempt after a failure of user code).
    pub trace_record_origins: bool,
}

#[cfg(any(test, feature = "testing"))]
impl OperatorSetup {
    /// The setup of subtask 0 of 1 of operator `name`, for unit tests of operators and
    /// chains; the cancellation handle is leaked, so the job never counts as cancelled.
    pub(crate) fn for_test(node: u32, name: &str) -> Self {
        let (handle, cancel) = crate::runtime::channel::cancel_pair();
        std::mem::forget(handle);
        Self {
            node: NodeId(node),
            name: name.into(),
            uid: name.into(),
            subtask: 0,
            parallelism: 1,
            max_parallelism: 128,
            key_groups: KeyGroupRange { start: 0, end: 127 },
            config: ExecutionConfig::default(),
            cancel,
            restored: None,
            fencing: crate::checkpoint::fencing::FencingToken::unfenced("test"),
            restored_from: None,
            attempt: 0,
            metrics: crate::metrics::OperatorMetricGroup::detached(NodeId(node), name),
            trace_record_origins: false,
        }
    }
}

/// A task's (or source coordinator's) report to the job manager.
#[derive(Debug)]
pub enum TaskEvent {
    /// The task ended normally.
    Finished {
        /// Which subtask.
        task: SubtaskRef,
        /// Record counts of its operators.
        metrics: Vec<OperatorMetrics>,
    },
    /// The task failed (or was cancelled).
    Failed {
        /// Which subtask.
        task: SubtaskRef,
        /// Why.
        error: TaskError,
        /// Record counts of its operators up to the failure.
        metrics: Vec<OperatorMetrics>,
    },
    /// A source coordinator (split enumerator) failed.
    CoordinatorFailed {
        /// The source.
        node: NodeId,
        /// Why.
        error: TaskError,
    },
    /// A task wrote its part of a checkpoint.
    Acknowledge {
        /// Which subtask.
        task: SubtaskRef,
        /// Which checkpoint.
        checkpoint_id: u64,
        /// Its states and timings.
        ack: Acknowledgement,
    },
    /// A source coordinator snapshotted its enumerator.
    CoordinatorAcknowledge {
        /// The source.
        node: NodeId,
        /// Which checkpoint.
        checkpoint_id: u64,
        /// The enumerator's state.
        state: Vec<u8>,
    },
    /// A task could not take its part of a checkpoint.
    Decline {
        /// Which subtask.
        task: SubtaskRef,
        /// Which checkpoint.
        checkpoint_id: u64,
        /// Why.
        reason: String,
        /// Whether a newer checkpoint overtook it (not a failure of checkpointing).
        subsumed: bool,
    },
    /// A source has read all its input and waits for the final checkpoint.
    EndOfInput {
        /// Which subtask.
        task: SubtaskRef,
    },
    /// Tasks that will never report again: the TaskManager running them was lost.
    Lost {
        /// The tasks.
        tasks: Vec<SubtaskRef>,
        /// The TaskManager.
        taskmanager: String,
        /// How it was lost.
        reason: String,
    },
    /// Every task of the run is deployed (executors that deploy asynchronously, as on
    /// TaskManagers, say so; until then no checkpoint is triggered).
    Deployed,
    /// A TaskManager could not deploy its tasks of the run: they never run.
    DeployFailed {
        /// Its tasks.
        tasks: Vec<SubtaskRef>,
        /// The TaskManager.
        taskmanager: String,
        /// What went wrong.
        reason: String,
        /// Whether a restart may help.
        kind: DeployFailureKind,
    },
}

/// What a failed deployment means for the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum DeployFailureKind {
    /// Something that may work next time (a connection, a TaskManager): a failure for the
    /// restart strategy.
    Retriable,
    /// A state file of the restore point is damaged: the recovery rules decide whether an
    /// older restore point may be used.
    CorruptState,
    /// The job cannot run (an operator cannot be created): restarting will not help.
    Fatal,
}

/// Runs `body` to its end and reports the outcome; a panic escaping the body (a bug outside
/// user functions, which are guarded individually) is reported as a failure too.
pub fn run_task(mut body: Box<dyn Invokable>, env: TaskEnvironment) {
    let task = env.task;
    let charged = crate::metrics::CurrentTask::enter(env.metrics.clone());
    let outcome = catch_unwind(AssertUnwindSafe(|| body.invoke(&env)));
    drop(charged);
    env.metrics.set_ended(match &outcome {
        Ok(Ok(())) => crate::metrics::TaskOutcome::Finished,
        Ok(Err(e)) if e.is_secondary() => crate::metrics::TaskOutcome::Canceled,
        _ => crate::metrics::TaskOutcome::Failed,
    });
    for thread in env.snapshot_threads.borrow_mut().drain(..) {
        let _ = thread.join();
    }
    let mut metrics = Vec::new();
    body.report_metrics(&mut metrics);
    let event = match outcome {
        Ok(Ok(())) => TaskEvent::Finished { task, metrics },
        Ok(Err(error)) => TaskEvent::Failed {
            task,
            error,
            metrics,
        },
        Err(payload) => TaskEvent::Failed {
            task,
            error: TaskError::UserPanic {
                message: panic_message(payload.as_ref()),
            },
            metrics,
        },
    };
    match &event {
        TaskEvent::Failed { error, .. } if error.is_secondary() => {
            tracing::debug!(task = %env.task_name, %error, "task stopped")
        }
        TaskEvent::Failed { error, .. } => {
            tracing::warn!(task = %env.task_name, %error, "task failed")
        }
        _ => tracing::debug!(task = %env.task_name, "task finished"),
    }
    // Drop the chain (and its channel ends) before reporting, so that when the job manager
    // hears of the end, this task holds nothing any more.
    drop(body);
    // The job manager outlives its tasks; if it is gone there is nobody left to tell.
    let _ = env.events.send(event);
}
