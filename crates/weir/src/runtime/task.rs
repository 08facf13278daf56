//! A running subtask: the unit the job manager starts, watches and cancels.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crossbeam_channel::Sender;

use crate::config::ExecutionConfig;
use crate::error::{panic_message, TaskError};
use crate::graph::execution_graph::SubtaskRef;
use crate::graph::ids::NodeId;
use crate::runtime::channel::CancelToken;
use crate::runtime::output::OperatorMetrics;
use crate::state::key_group::KeyGroupRange;

/// The body of a task: a source loop or an input-processing loop driving a chain.
pub trait Invokable: Send {
    /// Runs until the input ends, the job is cancelled, or something fails.
    fn invoke(&mut self) -> Result<(), TaskError>;
    /// Record counts of the chain's operators.
    fn report_metrics(&self, into: &mut Vec<OperatorMetrics>);
}

/// What an operator knows of the subtask it runs in.
#[derive(Debug, Clone)]
pub struct OperatorSetup {
    /// The operator.
    pub node: NodeId,
    /// Its name, for errors.
    pub name: Arc<str>,
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
}

/// A task's report to the job manager.
#[derive(Debug)]
pub enum TaskEvent {
    /// The task ended normally.
    Finished {
        /// Which subtask.
        task: SubtaskRef,
        /// Record counts of its operators.
        metrics: Vec<OperatorMetrics>,
    },
    /// The task failed.
    Failed {
        /// Which subtask.
        task: SubtaskRef,
        /// Why.
        error: TaskError,
    },
    /// A source coordinator (split enumerator) failed.
    CoordinatorFailed {
        /// The source.
        node: NodeId,
        /// Why.
        error: TaskError,
    },
}

/// Runs `body` to its end and reports the outcome; a panic escaping the body (a bug outside
/// user functions, which are guarded individually) is reported as a failure too.
pub fn run_task(task: SubtaskRef, mut body: Box<dyn Invokable>, events: Sender<TaskEvent>) {
    let outcome = catch_unwind(AssertUnwindSafe(|| body.invoke()));
    let event = match outcome {
        Ok(Ok(())) => {
            let mut metrics = Vec::new();
            body.report_metrics(&mut metrics);
            TaskEvent::Finished { task, metrics }
        }
        Ok(Err(error)) => TaskEvent::Failed { task, error },
        Err(payload) => TaskEvent::Failed {
            task,
            error: TaskError::UserPanic {
                message: panic_message(payload.as_ref()),
            },
        },
    };
    match &event {
        TaskEvent::Finished { .. } => tracing::debug!(?task, "task finished"),
        TaskEvent::Failed { error, .. } if error.is_secondary() => {
            tracing::debug!(?task, %error, "task stopped")
        }
        TaskEvent::Failed { error, .. } => tracing::warn!(?task, %error, "task failed"),
        TaskEvent::CoordinatorFailed { .. } => {}
    }
    // The job manager outlives its tasks; if it is gone there is nobody left to tell.
    let _ = events.send(event);
}
