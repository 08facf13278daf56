//! The job manager of one job: takes the job (its lock and epoch), decides where it starts,
//! deploys its tasks, runs the checkpoint coordinator, restarts the job from its newest
//! restore point when a task fails, records how it ended, and answers the client's requests
//! (savepoints, cancellation, checkpoint statistics).
//!
//! - `mod.rs` (here): construction, the restart loop and recovery — which restore point a
//!   run starts from, under the rules of [`crate::checkpoint::recovery`];
//! - `attempt.rs`: one run of the job's tasks and the event loop that drives it;
//! - `checkpointing.rs`: triggering, completing and aborting checkpoints and savepoints.

mod attempt;
mod checkpointing;

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::checkpoint::completed_store::CompletedCheckpointStore;
use crate::checkpoint::config::RetentionOnCancel;
use crate::checkpoint::coordinator::CheckpointCoordinator;
use crate::checkpoint::fencing::FencingToken;
use crate::checkpoint::job_record::{RecordedCheckpoint, RecordedStatus};
use crate::checkpoint::recovery::{
    on_unusable, plan_start, PreviousRecord, RecoveryContext, StartMode, StartPlan,
};
use crate::checkpoint::restart_strategy::RestartBackoff;
use crate::checkpoint::restore::assign_state;
use crate::checkpoint::savepoint::Savepoint;
use crate::checkpoint::stats::CheckpointHistory;
use crate::checkpoint::storage::{create_storage, CheckpointStorage};
use crate::error::WeirError;
use crate::runtime::deployment::{DeployError, RestorePoint};
use crate::runtime::job_definition::JobDefinition;
use crate::runtime::job_result::{JobExecutionResult, JobStatus, OperatorSummary};
use crate::runtime::output::OperatorMetrics;
use crate::runtime::snapshot::now_millis;
use crate::runtime::stream_element::{SnapshotType, StopMode};
use crate::runtime::task_executors::TaskExecutors;
use crate::time::Watermark;

use attempt::AttemptEnd;

/// A request from the job's client.
pub enum JobCommand {
    /// Take a savepoint; answer with it.
    TriggerSavepoint(Sender<Result<Savepoint, WeirError>>),
    /// Take a savepoint at which the sources stop, then end the job once it completes;
    /// answer with it. If the savepoint fails, a job stopped without drain runs
    /// on; a drained one fails over to its latest restore point (its operators have ended
    /// their input).
    StopWithSavepoint(StopMode, Sender<Result<Savepoint, WeirError>>),
    /// Cancel the job.
    Cancel,
    /// Answer with the checkpoint history.
    History(Sender<CheckpointHistory>),
}

/// Runs one job to its end.
pub struct JobMaster {
    job: JobDefinition,
    /// The job's durable state and lock; `None` for a job without checkpoint storage.
    store: Option<CompletedCheckpointStore>,
    fencing: FencingToken,
    coordinator: CheckpointCoordinator,
    restart: RestartBackoff,
    commands: Receiver<JobCommand>,
    /// Names of the sinks that commit output on checkpoint completion.
    committing_sinks: Vec<String>,
    /// The checkpoint storage, described, for messages.
    storage_description: String,
    /// Restore points found unusable; never tried again.
    bad: BTreeSet<u64>,
    /// The restore point the first run starts from.
    initial: Option<RestorePoint>,
    /// The id of a restore point given by path: it has no fallback.
    explicit_restore: Option<u64>,
    savepoint_waiters: HashMap<u64, Sender<Result<Savepoint, WeirError>>>,
    restored_from: Vec<u64>,
    /// Resuming a job that already ran to its end: there is nothing to do.
    already_finished: bool,
    /// Where the tasks run.
    executors: Box<dyn TaskExecutors>,
    /// Runs started so far (the attempt number of the next run's [`RunId`]).
    runs: u64,
}

impl JobMaster {
    /// Prepares `job`: takes its checkpoint storage (lock and epoch), decides where it
    /// starts and reads that restore point.
    pub fn new(
        job: JobDefinition,
        commands: Receiver<JobCommand>,
        executors: Box<dyn TaskExecutors>,
    ) -> Result<Self, WeirError> {
        let config = &job.config;
        let job_name = job.plan.stream_graph.job_name.clone();
        let committing_sinks = job.plan.stream_graph.committing_sinks();
        // A chosen directory means savepoints can be taken even without periodic
        // checkpoints, as in Flink.
        let needs_storage = config.checkpoint.interval.is_some()
            || config.restore.is_some()
            || config.resume_from_latest_checkpoint
            || config.checkpoint.storage.is_durable();
        let mut master = Self {
            coordinator: CheckpointCoordinator::new(config.checkpoint.clone(), 1, Instant::now()),
            restart: RestartBackoff::new(config.effective_restart_strategy(), now_millis()),
            store: None,
            fencing: FencingToken::unfenced(&job_name),
            commands,
            committing_sinks,
            storage_description: String::new(),
            bad: BTreeSet::new(),
            initial: None,
            explicit_restore: None,
            savepoint_waiters: HashMap::new(),
            restored_from: Vec::new(),
            already_finished: false,
            executors,
            runs: 0,
            job,
        };
        if !needs_storage {
            return Ok(master);
        }
        let config = master.job.config.clone();
        let storage = create_storage(
            &config.checkpoint.storage,
            config.checkpoint.local_recovery.as_deref(),
            &job_name,
        )?;
        master.storage_description = storage.describe();
        let (mut store, previous) = CompletedCheckpointStore::open(storage.clone(), &job_name)?;
        let mode = match &config.restore {
            Some(settings) => {
                let metadata =
                    storage
                        .read_metadata(&settings.path)
                        .map_err(|e| WeirError::Restore {
                            checkpoint_id: 0,
                            reason: format!("`{}` is unusable: {e}", settings.path),
                        })?;
                master.explicit_restore = Some(metadata.checkpoint_id);
                StartMode::RestoreFrom {
                    path: settings.path.clone(),
                    id: metadata.checkpoint_id,
                }
            }
            None if config.resume_from_latest_checkpoint => StartMode::Resume,
            None => StartMode::Fresh,
        };
        // Without a readable record, what is on disk (savepoints too) tells that the job ran.
        let mut on_disk: Vec<RecordedCheckpoint> = Vec::new();
        if !matches!(previous, PreviousRecord::Found(_)) {
            for (kind, stored) in [
                (SnapshotType::Checkpoint, storage.list_checkpoints()?),
                (SnapshotType::Savepoint, storage.list_savepoints()?),
            ] {
                on_disk.extend(
                    stored
                        .into_iter()
                        .filter(|c| c.has_metadata)
                        .map(|c| RecordedCheckpoint::new(c.id, kind, c.location)),
                );
            }
        }
        let plan = plan_start(master.recovery_context(), &mode, &previous, &on_disk)?;
        // What sinks may hold only grows: a fresh start or a restore does not make output
        // already committed go away.
        let notified_through = match &previous {
            PreviousRecord::Found(r) => r.notified_through,
            _ => 0,
        };
        let candidates = match plan {
            StartPlan::AlreadyFinished => {
                tracing::info!(storage = %storage.describe(), "the job already ran to its end; nothing to resume");
                master.already_finished = true;
                master.fencing = store.fencing().clone();
                // What a crash during its clean-up left is deleted now.
                if let Err(e) = store.clean_up_finished() {
                    tracing::warn!(error = %e, "cannot clean up after the finished job");
                }
                master.store = Some(store);
                return Ok(master);
            }
            StartPlan::Fresh { note } => {
                if let Some(note) = note {
                    tracing::warn!("{note}");
                } else if mode == StartMode::Resume {
                    tracing::info!(storage = %storage.describe(), "no restore point: starting fresh");
                }
                Vec::new()
            }
            StartPlan::Restore {
                mut candidates,
                note,
            } => {
                if let Some(note) = note {
                    tracing::warn!("{note}");
                }
                if let (StartMode::RestoreFrom { .. }, Some(first), Some(settings)) =
                    (&mode, candidates.first_mut(), &config.restore)
                {
                    first.allow_non_restored_state = settings.allows_non_restored_state();
                }
                candidates
            }
        };
        master.fencing = store.fencing().clone();
        master.store = Some(store);
        // The restore point is read and matched to the job before the record is rewritten:
        // a restore that cannot work leaves the job's real restore points in place.
        master.initial = master.resolve(&candidates)?;
        let mut completed = candidates;
        completed.reverse();
        if let Some(store) = master.store.as_mut() {
            store.begin(completed, notified_through)?;
        }
        let restored_id = master.initial.as_ref().map_or(0, |p| p.checkpoint_id);
        let first_id = master
            .store
            .as_ref()
            .map_or(1, CompletedCheckpointStore::next_id)
            .max(restored_id + 1);
        master.coordinator =
            CheckpointCoordinator::new(config.checkpoint.clone(), first_id, Instant::now());
        let epoch = master.fencing.epoch();
        master.executors.on_job_epoch(epoch);
        Ok(master)
    }

    fn job_name(&self) -> &str {
        &self.job.plan.stream_graph.job_name
    }

    fn storage(&self) -> Option<&std::sync::Arc<dyn CheckpointStorage>> {
        self.store.as_ref().map(CompletedCheckpointStore::storage)
    }

    fn recovery_context(&self) -> RecoveryContext<'_> {
        RecoveryContext {
            job: self.job_name(),
            storage: &self.storage_description,
            sinks: &self.committing_sinks,
            policy: self.job.config.checkpoint.corrupt_checkpoint_policy,
        }
    }

    /// The first usable of `candidates` (newest first), read and assigned to the job's
    /// operators; unusable ones are skipped only where the recovery rules allow it. `None`:
    /// start from empty state (no candidates, or falling back that far is allowed).
    fn resolve(
        &mut self,
        candidates: &[RecordedCheckpoint],
    ) -> Result<Option<RestorePoint>, WeirError> {
        let Some(store) = &self.store else {
            return Ok(None);
        };
        let candidates: Vec<&RecordedCheckpoint> = candidates
            .iter()
            .filter(|c| !self.bad.contains(&c.id))
            .collect();
        let mut newly_bad = Vec::new();
        let mut found = None;
        for (i, candidate) in candidates.iter().enumerate() {
            match store.read_metadata(&candidate.location) {
                Ok(metadata) => {
                    let assignment = assign_state(
                        &metadata,
                        &self.job.plan.stream_graph,
                        candidate.allow_non_restored_state,
                    )
                    .map_err(|e| WeirError::Restore {
                        checkpoint_id: candidate.id,
                        reason: e.to_string(),
                    })?;
                    tracing::info!(checkpoint = candidate.id, location = %candidate.location, "restoring");
                    found = Some(RestorePoint {
                        checkpoint_id: candidate.id,
                        location: candidate.location.clone(),
                        assignment,
                    });
                    break;
                }
                Err(e) => {
                    self.unusable(candidate, &e.to_string(), candidates.get(i + 1).copied())?;
                    newly_bad.push(candidate.id);
                }
            }
        }
        self.bad.extend(newly_bad);
        Ok(found)
    }

    /// Restore point `unusable` cannot be read (`problem` names the file and the copies
    /// checked): fails unless the recovery rules allow falling back to `fallback`.
    fn unusable(
        &self,
        unusable: &RecordedCheckpoint,
        problem: &str,
        fallback: Option<&RecordedCheckpoint>,
    ) -> Result<(), WeirError> {
        if Some(unusable.id) == self.explicit_restore && fallback.is_none() {
            return Err(WeirError::Restore {
                checkpoint_id: unusable.id,
                reason: format!("`{}` is unusable: {problem}", unusable.location),
            });
        }
        let warning = on_unusable(self.recovery_context(), unusable, problem, fallback)?;
        tracing::warn!("{warning}");
        Ok(())
    }

    /// The restore point of a restart: the newest recorded one that is usable.
    fn latest_restore_point(&mut self) -> Result<Option<RestorePoint>, WeirError> {
        let candidates = self
            .store
            .as_ref()
            .map(CompletedCheckpointStore::candidates)
            .unwrap_or_default();
        self.resolve(&candidates)
    }

    /// Deploying from `point` found a damaged state file: the same rules as for unreadable
    /// metadata decide whether an older restore point may be used.
    fn fall_back(
        &mut self,
        point: &RestorePoint,
        problem: &str,
    ) -> Result<Option<RestorePoint>, WeirError> {
        let candidates: Vec<RecordedCheckpoint> = self
            .store
            .as_ref()
            .map(CompletedCheckpointStore::candidates)
            .unwrap_or_default()
            .into_iter()
            .filter(|c| !self.bad.contains(&c.id))
            .collect();
        let position = candidates.iter().position(|c| c.id == point.checkpoint_id);
        let unusable = RecordedCheckpoint::new(
            point.checkpoint_id,
            SnapshotType::Checkpoint,
            point.location.clone(),
        );
        let rest = position.map_or(&[][..], |p| &candidates[p + 1..]);
        self.unusable(&unusable, problem, rest.first())?;
        self.bad.insert(point.checkpoint_id);
        self.resolve(rest)
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
            // A process that lost its job while it waited to restart must not deploy: its
            // sinks' recovery would settle the new holder's transactions.
            let attempt = match self.fencing.check() {
                Ok(()) => self.run_attempt(restore.as_ref()),
                Err(fenced) if fenced.is_final() => return Err(fenced.into()),
                Err(unverifiable) => Ok(AttemptEnd::Failed(unverifiable.into())),
            };
            let end = match attempt {
                Ok(end) => end,
                Err(DeployError::CorruptState(problem)) => {
                    let Some(point) = restore.take() else {
                        return Err(WeirError::Internal(format!(
                            "corrupt state without a restore point: {problem}"
                        )));
                    };
                    restore = self.fall_back(&point, &problem)?;
                    continue;
                }
                Err(DeployError::Other(e)) => return Err(e),
            };
            let (status, metrics, savepoint) = match end {
                AttemptEnd::Finished(m, final_checkpoint) => {
                    self.record_end(RecordedStatus::Finished { final_checkpoint })?;
                    (JobStatus::Finished, m, None)
                }
                AttemptEnd::Stopped(m, id, path) => {
                    self.record_end(RecordedStatus::Stopped {
                        savepoint: id,
                        location: path.clone(),
                    })?;
                    (JobStatus::Stopped, m, Some(Savepoint::new(id, path)))
                }
                AttemptEnd::Cancelled(m) => {
                    let retained =
                        self.job.config.checkpoint.retention_on_cancel == RetentionOnCancel::Retain;
                    self.record_end(RecordedStatus::Cancelled {
                        checkpoints_retained: retained,
                    })?;
                    (JobStatus::Cancelled, m, None)
                }
                AttemptEnd::Failed(error) => {
                    self.fail_pending("job failed");
                    // A process that lost its job must not restart it: the new holder runs it.
                    if let Err(fenced) = self.fencing.check() {
                        if fenced.is_final() {
                            tracing::error!(job = %self.job_name(), %error, "stopping: {fenced}");
                            return Err(fenced.into());
                        }
                    }
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
                            if let Err(e) = self.record_end(RecordedStatus::Failed) {
                                tracing::warn!(error = %e, "cannot record that the job failed");
                            }
                            return Err(error);
                        }
                    }
                }
            };
            return Ok(self.summarize(status, started.elapsed(), metrics, savepoint));
        }
    }

    /// Records how the job ended (before deleting what that makes unnecessary).
    fn record_end(&mut self, status: RecordedStatus) -> Result<(), WeirError> {
        self.fail_pending("the job has ended");
        match self.store.as_mut() {
            Some(store) => store.record_end(status),
            None => Ok(()),
        }
    }

    fn discard(&self, location: &str) {
        if let Some(store) = &self.store {
            store.discard(location);
        }
    }

    fn summarize(
        &self,
        status: JobStatus,
        wall_time: Duration,
        mut subtasks: Vec<OperatorMetrics>,
        savepoint: Option<Savepoint>,
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
                    records_out: of_node.clone().map(|m| m.records_out).sum(),
                    records_skipped: of_node.clone().map(|m| m.records_skipped).sum(),
                    records_dead_lettered: of_node.clone().map(|m| m.records_dead_lettered).sum(),
                    backward_watermarks: of_node.clone().map(|m| m.backward_watermarks).sum(),
                    late_records_dropped: of_node.clone().map(|m| m.late_records_dropped).sum(),
                    watermark: of_node
                        .map(|m| m.watermark)
                        .try_fold(None, |low: Option<Watermark>, w| {
                            w.map(|w| Some(low.map_or(w, |l| l.min(w))))
                        })
                        .flatten(),
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
}
