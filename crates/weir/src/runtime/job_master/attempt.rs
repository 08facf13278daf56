//! One run ("attempt") of a job's tasks: deployment, the event loop that drives it — task
//! events, client commands, checkpoint timers — and how it ended.

use std::collections::{BTreeSet, HashMap};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, Sender};

use super::{JobCommand, JobMaster};
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
use crate::runtime::stream_element::{SnapshotType, StopMode};
use crate::runtime::task::{TaskControl, TaskEvent};
use crate::runtime::task_executors::{DeployedRun, ReaderEndpoints, RunRequest};

/// How one run of the job's tasks ended.
pub(super) enum AttemptEnd {
    /// Ran to its end; the final checkpoint, if one was taken.
    Finished(Vec<OperatorMetrics>, Option<u64>),
    /// Stopped with the savepoint of this id, at this location.
    Stopped(Vec<OperatorMetrics>, u64, String),
    Cancelled(Vec<OperatorMetrics>),
    Failed(WeirError),
}

/// The running tasks of one attempt and what the job manager tracks about them.
pub(super) struct Attempt {
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
    pub(super) job_error: Option<WeirError>,
    pub(super) threads: Vec<JoinHandle<()>>,
    /// The pending savepoint of a stop-with-savepoint, and how it stops the job.
    pub(super) stop_savepoint: Option<(u64, StopMode)>,
    /// The savepoint a stop-with-savepoint completed: id and location.
    pub(super) stopped_with: Option<(u64, String)>,
    pub(super) cancelled: bool,
    /// Set once the tasks are being cancelled or stopped.
    pub(super) stopping: bool,
    /// Source subtasks, and those that have read all their input.
    pub(super) source_tasks: BTreeSet<SubtaskRef>,
    pub(super) sources_at_end: BTreeSet<SubtaskRef>,
    /// The final checkpoint, once triggered.
    pub(super) final_checkpoint: Option<u64>,
    /// All input is read but the final checkpoint waits for a pending one to finish, so
    /// that its barrier never overtakes the previous checkpoint's completion notice (a
    /// sink's pre-commit may need the previous transaction committed).
    pub(super) final_due: bool,
}

impl Attempt {
    pub(super) fn cancel_tasks(&mut self) {
        self.stopping = true;
        drop(self.cancel.take());
        if let Some(run) = self.run.as_mut() {
            run.cancel();
        }
    }

    /// Asks every task to stop after the messages already sent to it (stop-with-savepoint:
    /// the savepoint's completion notice is delivered first, and ends the tasks waiting at
    /// its barrier).
    pub(super) fn stop_tasks(&mut self) {
        self.stopping = true;
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

    pub(super) fn is_stopping(&self) -> bool {
        self.stopping
    }

    /// Whether `id` is the savepoint of a pending stop-with-savepoint.
    pub(super) fn is_stop_savepoint(&self, id: u64) -> bool {
        self.stop_savepoint.is_some_and(|(stop, _)| stop == id)
    }
}

impl JobMaster {
    pub(super) fn spawn(
        &mut self,
        restore: Option<&RestorePoint>,
    ) -> Result<(Attempt, Receiver<TaskEvent>), DeployError> {
        let (cancel_handle, cancel) = cancel_pair();
        let coordinators = create_coordinators(&self.job, &cancel, restore)?;
        let (events_tx, events) = crossbeam_channel::unbounded();
        let mut attempt = Attempt {
            cancel: Some(cancel_handle),
            run: None,
            coordinator_controls: Vec::new(),
            names: HashMap::new(),
            running: BTreeSet::new(),
            checkpoints_disabled: false,
            metrics: Vec::new(),
            root_cause: None,
            secondary: None,
            job_error: None,
            threads: Vec::new(),
            stop_savepoint: None,
            stopped_with: None,
            cancelled: false,
            stopping: false,
            source_tasks: BTreeSet::new(),
            sources_at_end: BTreeSet::new(),
            final_checkpoint: None,
            final_due: false,
        };
        let mut readers = ReaderEndpoints::new();
        let mut runners = Vec::new();
        for c in coordinators {
            readers.insert(c.node, c.readers.into_iter().map(Some).collect());
            runners.push((c.node, c.name, c.runner));
        }
        self.runs += 1;
        let run = self.executors.start_run(RunRequest {
            job: &self.job,
            run: RunId {
                epoch: self.fencing.epoch(),
                attempt: self.runs,
            },
            restore,
            storage: self
                .store
                .as_ref()
                .map(crate::checkpoint::completed_store::CompletedCheckpointStore::storage),
            fencing: &self.fencing,
            events: events_tx.clone(),
            readers,
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
                    attempt.cancel_tasks();
                    return Err(e);
                }
            }
        }
        Ok((attempt, events))
    }

    pub(super) fn run_attempt(
        &mut self,
        restore: Option<&RestorePoint>,
    ) -> Result<AttemptEnd, DeployError> {
        let (mut attempt, events) = self.spawn(restore)?;
        if let Some(point) = restore {
            self.restored_from.push(point.checkpoint_id);
        }
        tracing::info!(job = %self.job_name(), tasks = attempt.running.len(),
            restored_from = restore.map(|r| r.checkpoint_id), "job running");
        self.coordinator.reset_timer(Instant::now());
        while !attempt.running.is_empty() {
            let now = Instant::now();
            // A due checkpoint that cannot start must not make this loop spin.
            let may_trigger =
                self.may_trigger_periodic(&attempt) && self.coordinator.has_capacity();
            let due = self.coordinator.next_due().filter(|_| may_trigger);
            let wake = [due, self.coordinator.next_expiry()]
                .into_iter()
                .flatten()
                .min()
                .map_or(Duration::from_millis(200), |t| {
                    t.saturating_duration_since(now)
                })
                .min(Duration::from_millis(200));
            select! {
                recv(events) -> event => match event {
                    Ok(event) => self.on_event(event, &mut attempt),
                    Err(_) => break,
                },
                recv(self.commands) -> command => match command {
                    Ok(command) => self.on_command(command, &mut attempt),
                    // The client is gone: the job runs on, detached.
                    Err(_) => self.commands = crossbeam_channel::never(),
                },
                default(wake) => {}
            }
            self.on_timers(&mut attempt);
        }
        // Source coordinators serve until their attempt ends; release them, then join.
        attempt.coordinator_controls.clear();
        attempt.cancel_tasks();
        if let Some(run) = attempt.run.take() {
            run.join();
        }
        for thread in std::mem::take(&mut attempt.threads) {
            let _ = thread.join();
        }
        Ok(self.attempt_end(attempt))
    }

    pub(super) fn attempt_end(&mut self, attempt: Attempt) -> AttemptEnd {
        if let Some(error) = attempt.job_error {
            return AttemptEnd::Failed(error);
        }
        if let Some((task_name, task, error)) = attempt.root_cause.or(attempt.secondary) {
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
        if let Some((id, path)) = attempt.stopped_with {
            return AttemptEnd::Stopped(attempt.metrics, id, path);
        }
        if attempt.cancelled {
            return AttemptEnd::Cancelled(attempt.metrics);
        }
        AttemptEnd::Finished(attempt.metrics, attempt.final_checkpoint)
    }

    pub(super) fn on_event(&mut self, event: TaskEvent, attempt: &mut Attempt) {
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
                for pending in self.coordinator.abort_awaiting(
                    Participant::Task(task),
                    &reason,
                    Instant::now(),
                ) {
                    attempt.notify(CheckpointNotification::Aborted(pending.id()));
                    self.discard(&pending.location);
                    self.answer_savepoint(pending.id(), Err(reason.clone()), attempt);
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
                self.record_failure(attempt, name, task, error);
            }
            TaskEvent::CoordinatorFailed { node, error } => {
                let vertex = self.job.plan.job_graph.vertex_of_node[node.index()];
                let name = format!(
                    "{} (coordinator)",
                    self.job.plan.stream_graph.node(node).name
                );
                self.record_failure(attempt, name, SubtaskRef { vertex, subtask: 0 }, error);
            }
            TaskEvent::Acknowledge {
                task,
                checkpoint_id,
                ack,
            } => self.on_ack(checkpoint_id, Participant::Task(task), ack, attempt),
            TaskEvent::CoordinatorAcknowledge {
                node,
                checkpoint_id,
                state,
            } => self.on_ack(
                checkpoint_id,
                Participant::Coordinator(node),
                Acknowledgement::Coordinator { state },
                attempt,
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
                    attempt,
                );
            }
            TaskEvent::Lost {
                tasks,
                taskmanager,
                reason,
            } => {
                for task in tasks {
                    if attempt.running.remove(&task) {
                        let name = attempt.names.get(&task).cloned().unwrap_or_default();
                        let error = TaskError::TaskManagerLost {
                            taskmanager: taskmanager.clone(),
                            reason: reason.clone(),
                        };
                        self.record_failure(attempt, name, task, error);
                    }
                }
            }
            TaskEvent::EndOfInput { task } => {
                attempt.sources_at_end.insert(task);
                if attempt.sources_at_end == attempt.source_tasks
                    && attempt.final_checkpoint.is_none()
                    && !attempt.is_stopping()
                {
                    if self.coordinator.pending_ids().is_empty() {
                        self.trigger_final(attempt);
                    } else {
                        attempt.final_due = true;
                    }
                }
            }
        }
    }

    pub(super) fn record_failure(
        &mut self,
        attempt: &mut Attempt,
        name: String,
        task: SubtaskRef,
        error: TaskError,
    ) {
        if attempt.is_stopping() && error.is_secondary() {
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
        attempt.cancel_tasks();
    }

    pub(super) fn on_command(&mut self, command: JobCommand, attempt: &mut Attempt) {
        match command {
            JobCommand::TriggerSavepoint(reply) => {
                match self.trigger(SnapshotType::Savepoint, attempt) {
                    Ok(id) => {
                        self.savepoint_waiters.insert(id, reply);
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            JobCommand::StopWithSavepoint(mode, reply) => match self.trigger_stop(mode, attempt) {
                Ok(id) => {
                    tracing::info!(job = %self.job_name(), savepoint = id, ?mode, "stopping with a savepoint");
                    attempt.stop_savepoint = Some((id, mode));
                    self.savepoint_waiters.insert(id, reply);
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            },
            JobCommand::Cancel => {
                tracing::info!(job = %self.job_name(), "cancelling job");
                attempt.cancelled = true;
                attempt.cancel_tasks();
                self.fail_pending("job cancelled");
            }
            JobCommand::History(reply) => {
                let _ = reply.send(self.coordinator.history().clone());
            }
        }
    }

    /// Whether periodic checkpoints may be triggered in this attempt.
    pub(super) fn may_trigger_periodic(&self, attempt: &Attempt) -> bool {
        // Nothing may complete after a stop-with-savepoint's savepoint: the job ends there.
        attempt.stop_savepoint.is_none()
            && !attempt.is_stopping()
            && !attempt.checkpoints_disabled
            && attempt.final_checkpoint.is_none()
            && !attempt.final_due
    }

    pub(super) fn on_timers(&mut self, attempt: &mut Attempt) {
        if attempt.is_stopping() {
            return;
        }
        if attempt.final_due && self.coordinator.pending_ids().is_empty() {
            attempt.final_due = false;
            self.trigger_final(attempt);
        }
        let now = Instant::now();
        for id in self.coordinator.expired(now) {
            let timeout = self.job.config.checkpoint.timeout;
            self.abort_checkpoint(id, &format!("expired after {timeout:?}"), true, attempt);
        }
        if self.may_trigger_periodic(attempt) && self.coordinator.should_trigger(now) {
            match self.trigger(SnapshotType::Checkpoint, attempt) {
                Ok(_) => {}
                // Another process holds the job now: this one stops.
                Err(WeirError::Fenced(fenced)) => self.fenced(fenced, attempt),
                Err(e) => {
                    let reason = format!("cannot trigger checkpoint: {e}");
                    tracing::warn!("{reason}");
                    self.check_tolerance(&reason, attempt);
                }
            }
        }
    }
}
