//! The job manager of one job: deploys its tasks, runs the checkpoint coordinator, restarts
//! the job from the latest completed checkpoint when a task fails, and answers the client's
//! requests (savepoints, cancellation, checkpoint statistics).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, Sender};

use crate::checkpoint::config::{CheckpointStorageConfig, RetentionOnCancel};
use crate::checkpoint::coordinator::{
    AckOutcome, Acknowledgement, CheckpointCoordinator, Participant, PendingCheckpoint,
};
use crate::checkpoint::restart_strategy::RestartBackoff;
use crate::checkpoint::restore::assign_state;
use crate::checkpoint::stats::CheckpointHistory;
use crate::checkpoint::storage::{create_storage, CheckpointStorage};
use crate::error::{OperatorFailure, SubtaskDisplay, TaskError, WeirError};
use crate::graph::execution_graph::SubtaskRef;
use crate::graph::ids::NodeId;
use crate::runtime::channel::{cancel_pair, CancelHandle};
use crate::runtime::deployment::{deploy, DeployError, RestorePoint};
use crate::runtime::job_definition::JobDefinition;
use crate::runtime::job_result::{JobExecutionResult, JobStatus, OperatorSummary};
use crate::runtime::output::OperatorMetrics;
use crate::runtime::snapshot::{now_millis, CheckpointNotification};
use crate::runtime::source_task::CoordinatorControl;
use crate::runtime::stream_element::SnapshotType;
use crate::runtime::task::{run_task, TaskControl, TaskEnvironment, TaskEvent};

/// A request from the job's client.
pub enum JobCommand {
    /// Take a savepoint; answer with its location.
    TriggerSavepoint(Sender<Result<String, WeirError>>),
    /// Take a savepoint, then stop the job; answer with its location.
    StopWithSavepoint(Sender<Result<String, WeirError>>),
    /// Cancel the job.
    Cancel,
    /// Answer with the checkpoint history.
    History(Sender<CheckpointHistory>),
}

/// How one run of the job's tasks ended.
enum AttemptEnd {
    Finished(Vec<OperatorMetrics>),
    Stopped(Vec<OperatorMetrics>, String),
    Cancelled(Vec<OperatorMetrics>),
    Failed(WeirError),
}

/// The running tasks of one attempt and what the job manager tracks about them.
struct Attempt {
    cancel: Option<CancelHandle>,
    task_controls: HashMap<SubtaskRef, Sender<TaskControl>>,
    coordinator_controls: Vec<(NodeId, Sender<CoordinatorControl>)>,
    names: HashMap<SubtaskRef, String>,
    running: BTreeSet<SubtaskRef>,
    /// Set once a task that is not a source has finished: its state could no longer be
    /// checkpointed, so no checkpoint is taken after that.
    checkpoints_disabled: bool,
    metrics: Vec<OperatorMetrics>,
    root_cause: Option<(String, SubtaskRef, TaskError)>,
    secondary: Option<(String, SubtaskRef, TaskError)>,
    job_error: Option<WeirError>,
    threads: Vec<JoinHandle<()>>,
    stop_savepoint: Option<u64>,
    stopped_with: Option<String>,
    cancelled: bool,
    /// Set once the tasks are being cancelled or stopped.
    stopping: bool,
    /// Source subtasks, and those that have read all their input.
    source_tasks: BTreeSet<SubtaskRef>,
    sources_at_end: BTreeSet<SubtaskRef>,
    /// The final checkpoint, once triggered.
    final_checkpoint: Option<u64>,
    /// All input is read but the final checkpoint waits for a pending one to finish, so
    /// that its barrier never overtakes the previous checkpoint's completion notice (a
    /// sink's pre-commit may need the previous transaction committed).
    final_due: bool,
}

impl Attempt {
    fn cancel_tasks(&mut self) {
        self.stopping = true;
        drop(self.cancel.take());
    }

    /// Asks every task to stop after the messages already sent to it (stop-with-savepoint:
    /// the savepoint's completion notice is delivered first).
    fn stop_tasks(&mut self) {
        self.stopping = true;
        for control in self.task_controls.values() {
            let _ = control.send(TaskControl::Stop);
        }
    }

    fn notify(&self, notification: CheckpointNotification) {
        // Tasks that have ended no longer listen; that is fine.
        for control in self.task_controls.values() {
            let _ = control.send(TaskControl::Notify(notification));
        }
        for (_, control) in &self.coordinator_controls {
            let _ = control.send(CoordinatorControl::Notify(notification));
        }
    }

    fn participants(&self) -> BTreeSet<Participant> {
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

    fn is_stopping(&self) -> bool {
        self.stopping
    }
}

/// Runs one job to its end.
pub struct JobMaster {
    job: JobDefinition,
    storage: Option<Arc<dyn CheckpointStorage>>,
    coordinator: CheckpointCoordinator,
    restart: RestartBackoff,
    commands: Receiver<JobCommand>,
    /// Completed checkpoints of this run still retained, oldest first.
    completed: VecDeque<(u64, String)>,
    /// Checkpoints found corrupt; never restored from.
    bad: BTreeSet<u64>,
    initial: Option<RestorePoint>,
    savepoint_waiters: HashMap<u64, Sender<Result<String, WeirError>>>,
    restored_from: Vec<u64>,
    /// Resuming a job that already ran to its end: there is nothing to do.
    already_finished: bool,
}

impl JobMaster {
    /// Prepares `job`: opens its checkpoint storage and reads the restore point, if any.
    pub fn new(job: JobDefinition, commands: Receiver<JobCommand>) -> Result<Self, WeirError> {
        let config = &job.config;
        let job_name = job.plan.stream_graph.job_name.clone();
        let needs_storage = config.checkpoint.interval.is_some()
            || config.restore.is_some()
            || config.resume_from_latest_checkpoint;
        let storage = if needs_storage {
            Some(create_storage(&config.checkpoint.storage, &job_name)?)
        } else {
            None
        };
        let mut first_id = 1;
        if let Some(storage) = &storage {
            first_id = storage.max_id()? + 1;
        }
        let mut already_finished = false;
        if let Some(storage) = &storage {
            if config.resume_from_latest_checkpoint
                && config.restore.is_none()
                && storage.is_finished()?
            {
                tracing::info!(storage = %storage.describe(), "the job already ran to its end; nothing to resume");
                already_finished = true;
            } else {
                // A new run (or one resuming unfinished work) may finish again later.
                storage.set_finished(false)?;
            }
        }
        let initial = match (&config.restore, &storage) {
            (Some(settings), Some(storage)) => {
                let metadata = storage.read_metadata(&settings.path)?;
                first_id = first_id.max(metadata.checkpoint_id + 1);
                let assignment = assign_state(
                    &metadata,
                    &job.plan.stream_graph,
                    settings.allow_non_restored_state,
                )
                .map_err(|e| WeirError::Restore {
                    checkpoint_id: metadata.checkpoint_id,
                    reason: e.to_string(),
                })?;
                tracing::info!(path = %settings.path, checkpoint = metadata.checkpoint_id, "restoring job");
                Some(RestorePoint {
                    checkpoint_id: metadata.checkpoint_id,
                    location: settings.path.clone(),
                    assignment,
                })
            }
            (None, Some(storage)) if config.resume_from_latest_checkpoint => {
                Self::latest_retained(storage.as_ref(), &job)?
            }
            _ => None,
        };
        if let Some(point) = &initial {
            first_id = first_id.max(point.checkpoint_id + 1);
        }
        let now = Instant::now();
        let seed = now_millis();
        Ok(Self {
            coordinator: CheckpointCoordinator::new(config.checkpoint.clone(), first_id, now),
            restart: RestartBackoff::new(config.effective_restart_strategy(), seed),
            storage,
            job,
            commands,
            completed: VecDeque::new(),
            bad: BTreeSet::new(),
            initial,
            savepoint_waiters: HashMap::new(),
            restored_from: Vec::new(),
            already_finished,
        })
    }

    /// The newest checkpoint in storage whose metadata verifies (older ones are tried when
    /// the newest is corrupt); `None` when the job has no checkpoint.
    fn latest_retained(
        storage: &dyn CheckpointStorage,
        job: &JobDefinition,
    ) -> Result<Option<RestorePoint>, WeirError> {
        let stored: Vec<_> = storage
            .list_checkpoints()?
            .into_iter()
            .filter(|c| c.has_metadata)
            .collect();
        let found = stored.len();
        for checkpoint in stored.into_iter().rev() {
            match storage.read_metadata(&checkpoint.location) {
                Ok(metadata) => {
                    let assignment = assign_state(&metadata, &job.plan.stream_graph, false)
                        .map_err(|e| WeirError::Restore {
                            checkpoint_id: checkpoint.id,
                            reason: e.to_string(),
                        })?;
                    tracing::info!(checkpoint = checkpoint.id, location = %checkpoint.location,
                        "resuming from the latest retained checkpoint");
                    return Ok(Some(RestorePoint {
                        checkpoint_id: checkpoint.id,
                        location: checkpoint.location,
                        assignment,
                    }));
                }
                Err(e) => tracing::warn!(checkpoint = checkpoint.id, error = %e,
                    "retained checkpoint is unreadable; trying the previous one"),
            }
        }
        if found > 0 {
            return Err(WeirError::Restore {
                checkpoint_id: 0,
                reason: format!("all {found} retained checkpoints are corrupt; refusing to start from empty state"),
            });
        }
        tracing::info!(storage = %storage.describe(), "no retained checkpoint: starting fresh");
        Ok(None)
    }

    fn job_name(&self) -> &str {
        &self.job.plan.stream_graph.job_name
    }

    /// Runs the job, restarting it per the restart strategy, until it finishes, is stopped or
    /// cancelled, or fails for good.
    pub fn run(mut self) -> Result<JobExecutionResult, WeirError> {
        let started = Instant::now();
        if self.already_finished {
            return Ok(self.summarize(JobStatus::Finished, started.elapsed(), Vec::new(), None));
        }
        let mut restore = self.initial.clone();
        loop {
            let end = match self.run_attempt(restore.as_ref()) {
                Ok(end) => end,
                Err(DeployError::CorruptState(e)) => {
                    let Some(point) = &restore else {
                        return Err(e);
                    };
                    tracing::warn!(checkpoint = point.checkpoint_id, error = %e,
                        "restore point is corrupt; falling back to the previous retained checkpoint");
                    self.bad.insert(point.checkpoint_id);
                    restore = self.latest_restore_point()?;
                    continue;
                }
                Err(DeployError::Other(e)) => return Err(e),
            };
            let (status, metrics, savepoint) = match end {
                AttemptEnd::Finished(m) => (JobStatus::Finished, m, None),
                AttemptEnd::Stopped(m, path) => (JobStatus::Stopped, m, Some(path)),
                AttemptEnd::Cancelled(m) => (JobStatus::Cancelled, m, None),
                AttemptEnd::Failed(error) => {
                    self.fail_pending("job failed");
                    match self.restart.on_failure(Instant::now()) {
                        Some(delay) => {
                            tracing::warn!(job = %self.job_name(), %error, ?delay,
                                restarts = self.restart.restarts(), "job failed; restarting");
                            std::thread::sleep(delay);
                            restore = self.latest_restore_point()?;
                            continue;
                        }
                        None => {
                            tracing::error!(job = %self.job_name(), %error, "job failed; restart strategy gives up");
                            return Err(error);
                        }
                    }
                }
            };
            self.fail_pending("the job has ended");
            self.clean_up(status);
            return Ok(self.summarize(status, started.elapsed(), metrics, savepoint));
        }
    }

    /// The newest retained checkpoint of this run that verifies, else the initial restore
    /// point. Never silently empty: if checkpoints were completed but none is readable, an
    /// error.
    fn latest_restore_point(&mut self) -> Result<Option<RestorePoint>, WeirError> {
        let Some(storage) = self.storage.clone() else {
            return self.initial_unless_bad();
        };
        let candidates: Vec<(u64, String)> = self
            .completed
            .iter()
            .rev()
            .filter(|(id, _)| !self.bad.contains(id))
            .cloned()
            .collect();
        for (id, location) in candidates {
            match storage.read_metadata(&location) {
                Ok(metadata) => {
                    let assignment = assign_state(&metadata, &self.job.plan.stream_graph, false)
                        .map_err(|e| WeirError::Restore {
                            checkpoint_id: id,
                            reason: e.to_string(),
                        })?;
                    tracing::info!(checkpoint = id, "restoring from checkpoint");
                    return Ok(Some(RestorePoint {
                        checkpoint_id: id,
                        location,
                        assignment,
                    }));
                }
                Err(e) => {
                    tracing::warn!(checkpoint = id, error = %e,
                        "checkpoint is unreadable; falling back to the previous retained checkpoint");
                    self.bad.insert(id);
                }
            }
        }
        if !self.completed.is_empty() {
            return Err(WeirError::Restore {
                checkpoint_id: self.completed.back().map_or(0, |c| c.0),
                reason: format!(
                    "every retained checkpoint ({:?}) is corrupt; refusing to start from empty state",
                    self.completed.iter().map(|c| c.0).collect::<Vec<_>>()
                ),
            });
        }
        self.initial_unless_bad()
    }

    /// The restore point the job was started with, unless it proved corrupt.
    fn initial_unless_bad(&self) -> Result<Option<RestorePoint>, WeirError> {
        match &self.initial {
            Some(point) if self.bad.contains(&point.checkpoint_id) => Err(WeirError::Restore {
                checkpoint_id: point.checkpoint_id,
                reason: format!("the restore point `{}` is corrupt", point.location),
            }),
            other => Ok(other.clone()),
        }
    }

    fn fail_pending(&mut self, reason: &str) {
        let now = Instant::now();
        for pending in self.coordinator.abort_all(reason, now) {
            self.discard(&pending.location);
            if let Some(waiter) = self.savepoint_waiters.remove(&pending.id()) {
                let _ = waiter.send(Err(WeirError::InvalidRequest(format!(
                    "savepoint {} failed: {reason}",
                    pending.id()
                ))));
            }
        }
    }

    fn discard(&self, location: &str) {
        if let Some(storage) = &self.storage {
            if let Err(e) = storage.discard(location) {
                tracing::warn!(%location, error = %e, "cannot remove checkpoint files");
            }
        }
    }

    /// Checkpoints are discarded when the job finishes (Flink's behaviour), and on
    /// cancellation unless retained; savepoints are never discarded.
    fn clean_up(&mut self, status: JobStatus) {
        let discard = match status {
            JobStatus::Finished | JobStatus::Stopped => true,
            JobStatus::Cancelled => {
                self.job.config.checkpoint.retention_on_cancel == RetentionOnCancel::Delete
            }
        };
        if discard {
            for (_, location) in std::mem::take(&mut self.completed) {
                self.discard(&location);
            }
            // Checkpoints of earlier runs of this job (one this run resumed from) describe
            // work now complete: resuming from them would replay it. The marker makes a
            // later resume a no-op instead of a re-run.
            if let Some(storage) = self.storage.clone() {
                if status == JobStatus::Finished {
                    if let Err(e) = storage.set_finished(true) {
                        tracing::warn!(error = %e, "cannot record that the job finished");
                    }
                }
                if let Ok(stored) = storage.list_checkpoints() {
                    for checkpoint in stored {
                        self.discard(&checkpoint.location);
                    }
                }
            }
        }
        if let (true, CheckpointStorageConfig::FileSystem(_), Some(storage)) =
            (discard, &self.job.config.checkpoint.storage, &self.storage)
        {
            tracing::debug!(storage = %storage.describe(), "checkpoints cleaned up");
        }
    }

    fn summarize(
        &self,
        status: JobStatus,
        wall_time: Duration,
        mut subtasks: Vec<OperatorMetrics>,
        savepoint: Option<String>,
    ) -> JobExecutionResult {
        subtasks.sort_by_key(|m| (m.node, m.subtask));
        let operators = self
            .job
            .plan
            .stream_graph
            .nodes
            .iter()
            .map(|n| {
                let of_node = subtasks.iter().filter(|m| m.node == n.id);
                OperatorSummary {
                    node: n.id,
                    name: n.name.clone(),
                    parallelism: n.parallelism,
                    records_in: of_node.clone().map(|m| m.records_in).sum(),
                    records_out: of_node.map(|m| m.records_out).sum(),
                }
            })
            .collect();
        JobExecutionResult {
            job_name: self.job_name().to_string(),
            status,
            wall_time,
            operators,
            subtasks,
            restarts: self.restart.restarts(),
            restored_from: self.restored_from.clone(),
            checkpoints: self.coordinator.history().clone(),
            savepoint,
        }
    }

    fn spawn(
        &mut self,
        restore: Option<&RestorePoint>,
    ) -> Result<(Attempt, Receiver<TaskEvent>), DeployError> {
        let (cancel_handle, cancel) = cancel_pair();
        let deployment = deploy(&self.job, &cancel, self.storage.as_ref(), restore)?;
        let (events_tx, events) = crossbeam_channel::unbounded();
        let mut attempt = Attempt {
            cancel: Some(cancel_handle),
            task_controls: HashMap::new(),
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
        let spawn_error =
            |what: String| move |source| DeployError::Other(WeirError::Spawn { what, source });
        for (node, name, coordinator) in deployment.coordinators {
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
                .map_err(spawn_error(format!("coordinator of {name}")));
            match handle {
                Ok(h) => attempt.threads.push(h),
                Err(e) => {
                    attempt.cancel_tasks();
                    return Err(e);
                }
            }
        }
        let mode = self.job.config.checkpoint.mode;
        let checkpointing = self.job.config.checkpoint.interval.is_some();
        for (task, name, body) in deployment.tasks {
            let (control_tx, control) = crossbeam_channel::unbounded();
            attempt.task_controls.insert(task, control_tx);
            attempt.names.insert(task, name.clone());
            attempt.running.insert(task);
            if self.job.plan.job_graph.vertices[task.vertex.index()].is_source {
                attempt.source_tasks.insert(task);
            }
            let env = TaskEnvironment {
                task,
                task_name: name.clone(),
                control,
                events: events_tx.clone(),
                storage: self.storage.clone(),
                mode,
                checkpointing,
                cancel: cancel.clone(),
                snapshot_threads: std::cell::RefCell::new(Vec::new()),
            };
            let handle = std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || run_task(body, env))
                .map_err(spawn_error(name));
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

    fn run_attempt(&mut self, restore: Option<&RestorePoint>) -> Result<AttemptEnd, DeployError> {
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
        attempt.task_controls.clear();
        attempt.cancel_tasks();
        for thread in std::mem::take(&mut attempt.threads) {
            let _ = thread.join();
        }
        Ok(self.attempt_end(attempt))
    }

    fn attempt_end(&mut self, attempt: Attempt) -> AttemptEnd {
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
        if let Some(path) = attempt.stopped_with {
            return AttemptEnd::Stopped(attempt.metrics, path);
        }
        if attempt.cancelled {
            return AttemptEnd::Cancelled(attempt.metrics);
        }
        AttemptEnd::Finished(attempt.metrics)
    }

    fn on_event(&mut self, event: TaskEvent, attempt: &mut Attempt) {
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

    fn record_failure(
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

    fn on_command(&mut self, command: JobCommand, attempt: &mut Attempt) {
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
            JobCommand::StopWithSavepoint(reply) => {
                match self.trigger(SnapshotType::Savepoint, attempt) {
                    Ok(id) => {
                        attempt.stop_savepoint = Some(id);
                        self.savepoint_waiters.insert(id, reply);
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
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
    fn may_trigger_periodic(&self, attempt: &Attempt) -> bool {
        !attempt.is_stopping()
            && !attempt.checkpoints_disabled
            && attempt.final_checkpoint.is_none()
            && !attempt.final_due
    }

    fn on_timers(&mut self, attempt: &mut Attempt) {
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
            if let Err(e) = self.trigger(SnapshotType::Checkpoint, attempt) {
                tracing::warn!(error = %e, "cannot trigger checkpoint");
            }
        }
    }

    fn trigger(&mut self, kind: SnapshotType, attempt: &Attempt) -> Result<u64, WeirError> {
        if attempt.final_checkpoint.is_some() {
            return Err(WeirError::InvalidRequest(
                "the job has read all its input and is finishing; no more checkpoints can be taken"
                    .into(),
            ));
        }
        self.start_checkpoint(kind, attempt, false)
    }

    /// Starts a checkpoint or savepoint: the coordinator's bookkeeping, then the trigger to
    /// every source coordinator.
    fn start_checkpoint(
        &mut self,
        kind: SnapshotType,
        attempt: &Attempt,
        is_final: bool,
    ) -> Result<u64, WeirError> {
        let Some(storage) = self.storage.clone() else {
            return Err(WeirError::InvalidRequest(
                "checkpointing is not enabled: set a checkpoint interval to take checkpoints or savepoints".into(),
            ));
        };
        if attempt.checkpoints_disabled || attempt.is_stopping() {
            return Err(WeirError::InvalidRequest(
                "an operator has finished or the job is stopping; no more checkpoints can be taken"
                    .into(),
            ));
        }
        let id = self.coordinator.next_id();
        let location = storage.init_location(id, kind)?;
        let mut barrier = self.coordinator.start(
            Instant::now(),
            now_millis(),
            kind,
            attempt.participants(),
            location,
        );
        if is_final {
            barrier = self.coordinator.mark_final(id).unwrap_or(barrier);
        }
        tracing::debug!(checkpoint = id, ?kind, is_final, "triggering");
        for (_, control) in &attempt.coordinator_controls {
            let _ = control.send(CoordinatorControl::Trigger(barrier));
        }
        Ok(id)
    }

    fn on_ack(&mut self, id: u64, who: Participant, ack: Acknowledgement, attempt: &mut Attempt) {
        if let AckOutcome::AllAcknowledged(pending) = self.coordinator.acknowledge(id, who, ack) {
            self.finalize(*pending, attempt);
        }
    }

    fn abort_checkpoint(
        &mut self,
        id: u64,
        reason: &str,
        count_as_failure: bool,
        attempt: &mut Attempt,
    ) {
        let Some(pending) = self
            .coordinator
            .abort(id, reason, count_as_failure, Instant::now())
        else {
            return;
        };
        tracing::warn!(checkpoint = id, %reason, "checkpoint aborted");
        attempt.notify(CheckpointNotification::Aborted(id));
        self.discard(&pending.location);
        self.answer_savepoint(id, Err(reason.to_string()), attempt);
        self.check_tolerance(reason, attempt);
        self.check_final(id, reason, attempt);
    }

    /// The final checkpoint failed: the sinks' last transactions cannot be committed, so the
    /// job fails and recovers from its latest completed checkpoint.
    fn check_final(&mut self, id: u64, reason: &str, attempt: &mut Attempt) {
        if attempt.final_checkpoint == Some(id) && attempt.job_error.is_none() {
            attempt.job_error = Some(WeirError::InvalidRequest(format!(
                "the final checkpoint {id} of job `{}` failed: {reason}",
                self.job_name()
            )));
            attempt.cancel_tasks();
        }
    }

    /// Every source has read all its input: take the final checkpoint, after which the
    /// sources end and every task finishes once it completes.
    fn trigger_final(&mut self, attempt: &mut Attempt) {
        if self.storage.is_none() || self.job.config.checkpoint.interval.is_none() {
            return;
        }
        match self.start_checkpoint(SnapshotType::Checkpoint, attempt, true) {
            Ok(id) => {
                tracing::info!(job = %self.job_name(), checkpoint = id, "all input read; taking the final checkpoint");
                attempt.final_checkpoint = Some(id);
            }
            Err(e) => {
                attempt.job_error = Some(WeirError::InvalidRequest(format!(
                    "cannot take the final checkpoint: {e}"
                )));
                attempt.cancel_tasks();
            }
        }
    }

    fn check_tolerance(&mut self, reason: &str, attempt: &mut Attempt) {
        if self.coordinator.failures_exceed_tolerance() && attempt.job_error.is_none() {
            attempt.job_error = Some(WeirError::InvalidRequest(format!(
                "job `{}` exceeded the tolerable checkpoint failures ({} in a row); last: {reason}",
                self.job_name(),
                self.coordinator.consecutive_failures()
            )));
            attempt.cancel_tasks();
        }
    }

    fn answer_savepoint(&mut self, id: u64, result: Result<String, String>, attempt: &mut Attempt) {
        if let Some(waiter) = self.savepoint_waiters.remove(&id) {
            let _ = waiter.send(result.clone().map_err(|reason| {
                WeirError::InvalidRequest(format!("savepoint {id} failed: {reason}"))
            }));
        }
        if attempt.stop_savepoint == Some(id) {
            attempt.stop_savepoint = None;
            if let Ok(location) = result {
                tracing::info!(job = %self.job_name(), savepoint = %location, "stopping job after savepoint");
                attempt.stopped_with = Some(location);
                // Tasks see the savepoint's completion notice first, then stop: sinks commit
                // what the savepoint covers (Flink's synchronous savepoint).
                attempt.notify(CheckpointNotification::Complete(id));
                attempt.stop_tasks();
            }
        }
    }

    fn finalize(&mut self, pending: PendingCheckpoint, attempt: &mut Attempt) {
        let now = Instant::now();
        let id = pending.id();
        let graph = self.job.plan.stream_graph.clone();
        let metadata = pending.to_metadata(&graph.job_name, |node| {
            let n = graph.node(node);
            (
                n.effective_uid(),
                n.name.clone(),
                n.parallelism,
                n.max_parallelism,
            )
        });
        let written = match &self.storage {
            Some(storage) => storage
                .write_metadata(&pending.location, &metadata)
                .map_err(|e| e.to_string()),
            None => Err("no checkpoint storage".to_string()),
        };
        if let Err(reason) = written {
            self.coordinator.finalize_failed(&pending, &reason, now);
            tracing::warn!(checkpoint = id, %reason, "checkpoint metadata could not be written");
            attempt.notify(CheckpointNotification::Aborted(id));
            self.discard(&pending.location);
            self.answer_savepoint(id, Err(reason.clone()), attempt);
            self.check_tolerance(&reason, attempt);
            self.check_final(id, &reason, attempt);
            return;
        }
        for subsumed in self.coordinator.completed(&pending, now) {
            attempt.notify(CheckpointNotification::Aborted(subsumed.id()));
            self.discard(&subsumed.location);
            self.answer_savepoint(
                subsumed.id(),
                Err(format!("subsumed by checkpoint {id}")),
                attempt,
            );
        }
        if let Some(stats) = self.coordinator.history().recent.back() {
            tracing::info!(job = %graph.job_name, "{stats}");
        }
        match pending.barrier.snapshot_type {
            SnapshotType::Checkpoint => {
                attempt.notify(CheckpointNotification::Complete(id));
                self.completed.push_back((id, pending.location.clone()));
                while self.completed.len() > self.job.config.checkpoint.retained as usize {
                    if let Some((_, location)) = self.completed.pop_front() {
                        self.discard(&location);
                    }
                }
            }
            // A savepoint has no side effects (as in Flink since 1.15): its transactions stay
            // pending and are committed with the next checkpoint, unless this is a
            // stop-with-savepoint, which notifies before stopping.
            SnapshotType::Savepoint => {
                self.answer_savepoint(id, Ok(pending.location.clone()), attempt)
            }
        }
    }
}
