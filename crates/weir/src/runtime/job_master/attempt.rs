//! One run ("attempt") of a job's tasks: deploying it, the tasks' reports, and what its end
//! means.

use std::collections::{BTreeSet, HashMap};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::{JobMaster, JobPhase};
use crate::checkpoint::coordinator::{Acknowledgement, Participant};
use crate::error::{OperatorFailure, SubtaskDisplay, TaskError, WeirError};
use crate::graph::execution_graph::SubtaskRef;
use crate::graph::ids::NodeId;
use crate::runtime::channel::{cancel_pair, CancelHandle};
use crate::runtime::deployment::{create_coordinators, DeployError, RestorePoint};
use crate::runtime::network::frame::RunId;
use crate::runtime::output::OperatorMetrics;
use crate::runtime::snapshot::CheckpointNotification;
use crate::runtime::source_task::CoordinatorControl;
use crate::runtime::task::{DeployFailureKind, TaskControl, TaskEvent};
use crate::runtime::task_executors::{DeployedRun, ReaderEndpoints, RunRequest};

/// How one run of the job's tasks ended.
pub(super) enum AttemptEnd {
    /// Ran to its end; the final checkpoint, if one was taken.
    Finished(Option<u64>),
    /// Stopped with the savepoint of this id, at this location.
    Stopped(u64, String),
    Cancelled,
    Failed(WeirError),
    /// A TaskManager found a state file of the restore point damaged.
    CorruptState {
        /// The restore point.
        id: u64,
        /// Its location.
        location: String,
        /// What is damaged.
        problem: String,
    },
    /// The job cannot run (a TaskManager could not create an operator).
    Fatal(WeirError),
}

/// The running tasks of one run and what the job manager tracks about them.
pub(super) struct Attempt {
    /// Which run (the attempt number of its `RunId`).
    pub(super) number: u64,
    /// The tasks' reports.
    pub(super) events: Receiver<TaskEvent>,
    /// Cancels the source coordinators.
    pub(super) cancel: Option<CancelHandle>,
    /// The run's tasks, wherever they run.
    pub(super) run: Option<Box<dyn DeployedRun>>,
    pub(super) coordinator_controls: Vec<(NodeId, Sender<CoordinatorControl>)>,
    pub(super) names: HashMap<SubtaskRef, String>,
    pub(super) running: BTreeSet<SubtaskRef>,
    /// Set once a task that is not a source has finished: its state could no longer be
    /// checkpointed, so no checkpoint is taken after that.
    pub(super) checkpoints_disabled: bool,
    pub(super) metrics: Vec<OperatorMetrics>,
    pub(super) root_cause: Option<(String, SubtaskRef, TaskError)>,
    pub(super) secondary: Option<(String, SubtaskRef, TaskError)>,
    pub(super) threads: Vec<JoinHandle<()>>,
    /// Source subtasks, and those that have read all their input.
    pub(super) source_tasks: BTreeSet<SubtaskRef>,
    pub(super) sources_at_end: BTreeSet<SubtaskRef>,
    /// The restore point the run started from: id and location.
    pub(super) restored_from: Option<(u64, String)>,
    /// The first failed deployment of the run: what and of what kind.
    pub(super) deploy_failure: Option<(String, DeployFailureKind)>,
    /// When the run was deployed (on the JobMaster's clock).
    pub(super) started: Instant,
    /// A run that traces record origins after a failure stops tracing at this time (see
    /// [`tracing_window`]); `None`: it does not trace, or traces to its end.
    pub(super) tracing_until: Option<Instant>,
}

/// How long a run after a failure of user code traces record origins, given how long the
/// failed run lived: twice that, and at least [`MIN_TRACING`]. A record that fails
/// deterministically is met again after about as much input as the failed run read since the
/// same restore point; tracing is slower (bench/README.md) and restoring takes time, hence
/// the margin. A record met after the window still fails the run, and the next run traces
/// again.
pub(super) fn tracing_window(failed_run_lived: Duration) -> Duration {
    (failed_run_lived * 2).max(MIN_TRACING)
}

/// The shortest tracing window.
pub(super) const MIN_TRACING: Duration = Duration::from_secs(10);

impl Attempt {
    /// Cancels the tasks and the coordinators.
    pub(super) fn cancel_tasks(&mut self) {
        drop(self.cancel.take());
        if let Some(run) = self.run.as_mut() {
            run.cancel();
        }
    }

    /// Asks every task to stop after the messages already sent to it (stop-with-savepoint:
    /// the savepoint's completion notice is delivered first, and ends the tasks waiting at
    /// its barrier).
    pub(super) fn stop_tasks(&mut self) {
        if let Some(run) = &self.run {
            run.broadcast(TaskControl::Stop);
        }
    }

    pub(super) fn notify(&self, notification: CheckpointNotification) {
        // Tasks that have ended no longer listen; that is fine.
        if let Some(run) = &self.run {
            run.broadcast(TaskControl::Notify(notification));
        }
        for (_, control) in &self.coordinator_controls {
            let _ = control.send(CoordinatorControl::Notify(notification));
        }
    }

    pub(super) fn participants(&self) -> BTreeSet<Participant> {
        self.running
            .iter()
            .map(|t| Participant::Task(*t))
            .chain(
                self.coordinator_controls
                    .iter()
                    .map(|(n, _)| Participant::Coordinator(*n)),
            )
            .collect()
    }

    /// Whether every source has read all its input.
    pub(super) fn sources_all_at_end(&self) -> bool {
        self.sources_at_end == self.source_tasks
    }

    /// Releases the coordinators, cancels what still runs, and waits for every thread.
    fn tear_down(&mut self) {
        // Source coordinators serve until their attempt ends.
        self.coordinator_controls.clear();
        self.cancel_tasks();
        if let Some(run) = self.run.take() {
            run.join();
        }
        for thread in std::mem::take(&mut self.threads) {
            let _ = thread.join();
        }
    }
}

impl JobMaster {
    /// Deploys a run of the job's tasks from `restore` and starts its coordinators.
    pub(super) fn spawn(&mut self, restore: Option<&RestorePoint>) -> Result<Attempt, DeployError> {
        let (cancel_handle, cancel) = cancel_pair();
        let coordinators = create_coordinators(&self.job, &cancel, restore)?;
        let (events_tx, events) = crossbeam_channel::unbounded();
        self.runs += 1;
        let mut attempt = Attempt {
            number: self.runs,
            events,
            cancel: Some(cancel_handle),
            run: None,
            coordinator_controls: Vec::new(),
            names: HashMap::new(),
            running: BTreeSet::new(),
            checkpoints_disabled: false,
            metrics: Vec::new(),
            root_cause: None,
            secondary: None,
            threads: Vec::new(),
            source_tasks: BTreeSet::new(),
            sources_at_end: BTreeSet::new(),
            restored_from: restore.map(|r| (r.checkpoint_id, r.location.clone())),
            deploy_failure: None,
            started: self.clock.now(),
            tracing_until: self
                .trace_record_origins
                .then_some(self.tracing_window)
                .flatten()
                .map(|window| self.clock.now() + window),
        };
        let mut readers = ReaderEndpoints::new();
        let mut runners = Vec::new();
        for c in coordinators {
            readers.insert(c.node, c.readers.into_iter().map(Some).collect());
            runners.push((c.node, c.name, c.runner));
        }
        let run = self.executors.start_run(RunRequest {
            job: &self.job,
            run: RunId {
                epoch: self.fencing.epoch(),
                attempt: self.runs,
            },
            restore,
            storage: self.storage.as_ref(),
            fencing: &self.fencing,
            events: events_tx.clone(),
            readers,
            trace_record_origins: self.trace_record_origins,
        })?;
        attempt.run = Some(run);
        for ev in &self.job.plan.execution_graph.vertices {
            attempt.names.insert(ev.id, ev.name.clone());
            attempt.running.insert(ev.id);
            if self.job.plan.job_graph.vertices[ev.id.vertex.index()].is_source {
                attempt.source_tasks.insert(ev.id);
            }
        }
        // The coordinators start once their readers exist, so that no assignment can be
        // made for a reader that is never deployed.
        for (node, name, coordinator) in runners {
            let (control_tx, control) = crossbeam_channel::unbounded();
            attempt.coordinator_controls.push((node, control_tx));
            let tx = events_tx.clone();
            let handle = std::thread::Builder::new()
                .name(format!("{name} coordinator"))
                .spawn(move || {
                    if let Err(error) = coordinator.run(control, tx.clone()) {
                        let _ = tx.send(TaskEvent::CoordinatorFailed { node, error });
                    }
                })
                .map_err(|source| {
                    DeployError::Other(WeirError::Spawn {
                        what: format!("coordinator of {name}"),
                        source,
                    })
                });
            match handle {
                Ok(h) => attempt.threads.push(h),
                Err(e) => {
                    attempt.tear_down();
                    return Err(e);
                }
            }
        }
        Ok(attempt)
    }

    /// Every task of the run has ended: tears it down and decides what follows.
    pub(super) fn end_attempt(&mut self) {
        let Some(mut attempt) = self.attempt.take() else {
            return;
        };
        attempt.tear_down();
        self.last_run_lived = self.clock.now().saturating_duration_since(attempt.started);
        let end = self.attempt_end(&mut attempt);
        self.metrics = std::mem::take(&mut attempt.metrics);
        self.after_attempt(end);
    }

    /// What the run's end means, from the phase and what its tasks reported.
    fn attempt_end(&mut self, attempt: &mut Attempt) -> AttemptEnd {
        let phase = std::mem::replace(&mut self.phase, JobPhase::Ended);
        // A cancellation wins over the failures it causes or meets.
        if matches!(phase, JobPhase::Cancelling) {
            return AttemptEnd::Cancelled;
        }
        match (attempt.deploy_failure.take(), attempt.restored_from.take()) {
            (Some((problem, DeployFailureKind::CorruptState)), Some((id, location))) => {
                return AttemptEnd::CorruptState {
                    id,
                    location,
                    problem,
                }
            }
            (Some((reason, DeployFailureKind::Fatal)), _) => {
                return AttemptEnd::Fatal(WeirError::InvalidRequest(format!(
                    "job `{}` cannot be deployed: {reason}",
                    self.job_name()
                )))
            }
            _ => {}
        }
        if let JobPhase::Failing { error: Some(error) } = phase {
            return AttemptEnd::Failed(error);
        }
        if let Some((task_name, task, error)) =
            attempt.root_cause.take().or(attempt.secondary.take())
        {
            let vertex = &self.job.plan.job_graph.vertices[task.vertex.index()];
            let (operator, cause) = match error {
                TaskError::Operator { operator, cause } => (operator, *cause),
                other => (task_name, other),
            };
            return AttemptEnd::Failed(WeirError::JobFailed {
                job: self.job_name().to_string(),
                failure: Box::new(OperatorFailure {
                    operator,
                    subtask: task.subtask,
                    subtask_display: SubtaskDisplay {
                        index: task.subtask,
                        parallelism: vertex.parallelism,
                    },
                    cause,
                }),
            });
        }
        match phase {
            JobPhase::Stopping {
                savepoint,
                location,
            } => AttemptEnd::Stopped(savepoint, location),
            JobPhase::Finishing { final_checkpoint } => AttemptEnd::Finished(final_checkpoint),
            _ => AttemptEnd::Finished(None),
        }
    }

    pub(super) fn on_task_event(&mut self, event: TaskEvent) {
        let Some(attempt) = self.attempt.as_mut() else {
            return;
        };
        match event {
            TaskEvent::Finished { task, metrics } => {
                attempt.running.remove(&task);
                attempt.metrics.extend(metrics);
                // A finished source holds no state (all its splits are read), so later
                // checkpoints simply leave it out; a finished operator's state could not be
                // taken any more, so checkpointing stops.
                if !self.job.plan.job_graph.vertices[task.vertex.index()].is_source {
                    attempt.checkpoints_disabled = true;
                }
                let reason = format!(
                    "{} finished before acknowledging",
                    attempt.names.get(&task).map_or("a task", String::as_str)
                );
                let now = self.clock.now();
                for pending in
                    self.coordinator
                        .abort_awaiting(Participant::Task(task), &reason, now)
                {
                    self.notify(CheckpointNotification::Aborted(pending.id()));
                    self.discard_pending(&pending);
                    self.answer_savepoint(pending.id(), Err(reason.clone()));
                }
            }
            TaskEvent::Failed {
                task,
                error,
                metrics,
            } => {
                attempt.running.remove(&task);
                attempt.metrics.extend(metrics);
                let name = attempt.names.get(&task).cloned().unwrap_or_default();
                self.record_failure(name, task, error);
            }
            TaskEvent::Lost {
                tasks,
                taskmanager,
                reason,
            } => {
                for task in tasks {
                    let Some(attempt) = self.attempt.as_mut() else {
                        return;
                    };
                    if attempt.running.remove(&task) {
                        let name = attempt.names.get(&task).cloned().unwrap_or_default();
                        let error = TaskError::TaskManagerLost {
                            taskmanager: taskmanager.clone(),
                            reason: reason.clone(),
                        };
                        self.record_failure(name, task, error);
                    }
                }
            }
            TaskEvent::CoordinatorFailed { node, error } => {
                let vertex = self.job.plan.job_graph.vertex_of_node[node.index()];
                let name = format!(
                    "{} (coordinator)",
                    self.job.plan.stream_graph.node(node).name
                );
                self.record_failure(name, SubtaskRef { vertex, subtask: 0 }, error);
            }
            TaskEvent::Acknowledge {
                task,
                checkpoint_id,
                ack,
            } => self.on_ack(checkpoint_id, Participant::Task(task), ack),
            TaskEvent::CoordinatorAcknowledge {
                node,
                checkpoint_id,
                state,
            } => self.on_ack(
                checkpoint_id,
                Participant::Coordinator(node),
                Acknowledgement::Coordinator { state },
            ),
            TaskEvent::Decline {
                task,
                checkpoint_id,
                reason,
                subsumed,
            } => {
                let name = attempt.names.get(&task).cloned().unwrap_or_default();
                self.abort_checkpoint(
                    checkpoint_id,
                    &format!("declined by {name}: {reason}"),
                    !subsumed,
                );
            }
            TaskEvent::Deployed => {
                if matches!(self.phase, JobPhase::Deploying { .. }) {
                    self.run_deployed();
                }
            }
            TaskEvent::DeployFailed {
                tasks,
                taskmanager,
                reason,
                kind,
            } => {
                tracing::warn!(%taskmanager, %reason, ?kind, "deployment failed");
                if attempt.deploy_failure.is_none() {
                    attempt.deploy_failure = Some((reason.clone(), kind));
                }
                for task in tasks {
                    let Some(attempt) = self.attempt.as_mut() else {
                        return;
                    };
                    if attempt.running.remove(&task) {
                        let name = attempt.names.get(&task).cloned().unwrap_or_default();
                        let error = TaskError::Remote {
                            message: format!(
                                "TaskManager `{taskmanager}` could not deploy it: {reason}"
                            ),
                            secondary: false,
                        };
                        self.record_failure(name, task, error);
                    }
                }
            }
            TaskEvent::EndOfInput { task } => {
                attempt.sources_at_end.insert(task);
                if attempt.sources_all_at_end() && matches!(self.phase, JobPhase::Running) {
                    self.input_ended();
                }
            }
        }
    }

    /// A task failed (or was lost): the first real cause is kept for the report, and the
    /// run is torn down; failures that only follow from a teardown are no news.
    pub(super) fn record_failure(&mut self, name: String, task: SubtaskRef, error: TaskError) {
        let Some(attempt) = self.attempt.as_mut() else {
            return;
        };
        if self.phase.is_stopping() && error.is_secondary() {
            return;
        }
        let slot = if error.is_secondary() {
            &mut attempt.secondary
        } else {
            &mut attempt.root_cause
        };
        if slot.is_none() {
            *slot = Some((name, task, error));
        }
        if !matches!(self.phase, JobPhase::Cancelling | JobPhase::Failing { .. }) {
            self.phase = JobPhase::Failing { error: None };
        }
        attempt.cancel_tasks();
    }

    /// Ends the current run's tracing of record origins once its window has passed.
    pub(super) fn end_tracing_window(&mut self) {
        let now = self.clock.now();
        let Some(attempt) = self.attempt.as_mut() else {
            return;
        };
        if attempt.tracing_until.is_some_and(|until| now >= until) {
            attempt.tracing_until = None;
            if let Some(run) = &attempt.run {
                tracing::info!(job = %self.job.plan.stream_graph.job_name,
                    "the run read past where the failed one failed; record origins no longer traced");
                run.broadcast(TaskControl::StopTracingOrigins);
            }
        }
    }

    /// Sends `notification` to the current run's tasks and coordinators.
    pub(super) fn notify(&self, notification: CheckpointNotification) {
        if let Some(attempt) = &self.attempt {
            attempt.notify(notification);
        }
    }

    /// Fails the run with `error` (the job's, not a task's), unless it already fails.
    pub(super) fn fail_run(&mut self, error: WeirError) {
        if self.attempt.is_none() {
            self.fail_between_runs(error);
            return;
        }
        match &mut self.phase {
            JobPhase::Failing { error: slot @ None } => *slot = Some(error),
            JobPhase::Failing { .. } | JobPhase::Cancelling => {}
            _ => self.phase = JobPhase::Failing { error: Some(error) },
        }
        if let Some(attempt) = self.attempt.as_mut() {
            attempt.cancel_tasks();
        }
    }

    /// A failure reported while no run is on: a late reply about an ended run's checkpoint,
    /// as the worker's fencing check before completing it. Only a run's end leaves a
    /// `Failing` phase, so entering one now would wait forever. A process that lost its job
    /// stops (it must not restart: the new holder runs the job); anything else concerns a
    /// run whose end the restart strategy has judged already.
    fn fail_between_runs(&mut self, error: WeirError) {
        match error {
            WeirError::Fenced(fenced) if fenced.is_final() => {
                tracing::error!(job = %self.job_name(), error = %fenced, "stopping: {fenced}");
                self.phase = JobPhase::Ended;
                if self.outcome.is_none() {
                    self.outcome = Some(Err(WeirError::Fenced(fenced)));
                }
            }
            error => tracing::debug!(job = %self.job_name(), %error, phase = self.phase.name(),
                "a failure reported between runs; the restart strategy decided already"),
        }
    }
}
