//! The JobManager of one job: takes the job (its lock and epoch), decides where it starts,
//! deploys its runs, runs the checkpoint coordinator, restarts the job from its newest
//! restore point when a run fails, records how it ended, and answers the client's requests
//! (savepoints, cancellation, checkpoint statistics).
//!
//! Its loop is an explicit state machine ([`JobPhase`]) driven by events — task reports,
//! client commands, the storage worker's replies, and time from an injectable [`Clock`].
//! Nothing on the loop sleeps or touches storage: creating checkpoint locations, completing
//! checkpoints, deleting files, resolving restore points and recording the job's end run on
//! the storage worker and come back as events; the restart back-off is a deadline.
//!
//! - `mod.rs` (here): construction (where the job starts) and the loop;
//! - `phase.rs`: the phases and the decisions that depend on them;
//! - `attempt.rs`: one run of the job's tasks and their reports;
//! - `checkpointing.rs`: triggering, completing and aborting checkpoints and savepoints;
//! - `lifecycle.rs`: deploying, failing over, restarting and ending;
//! - `restore_points.rs`: which restore point a run starts from;
//! - `store_io.rs`: the storage worker;
//! - `clock.rs`: time.

mod attempt;
mod checkpointing;
pub mod clock;
pub mod details;
mod lifecycle;
pub mod phase;
mod restore_points;
mod store_io;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, Sender};

use crate::checkpoint::completed_store::CompletedCheckpointStore;
use crate::checkpoint::coordinator::{CheckpointCoordinator, PendingCheckpoint};
use crate::checkpoint::fencing::FencingToken;
use crate::checkpoint::job_record::{JobRecord, RecordedCheckpoint, RecordedStatus};
use crate::checkpoint::recovery::{plan_start, PreviousRecord, StartMode, StartPlan};
use crate::checkpoint::restart_strategy::RestartBackoff;
use crate::checkpoint::savepoint::Savepoint;
use crate::checkpoint::stats::CheckpointHistory;
use crate::checkpoint::storage::{create_storage, CheckpointStorage};
use crate::error::WeirError;
use crate::metrics::MetricStore;
use crate::runtime::deployment::RestorePoint;
use crate::runtime::job_definition::JobDefinition;
use crate::runtime::job_result::{JobExecutionResult, JobStart, JobStatus, OperatorSummary};
use crate::runtime::output::OperatorMetrics;
use crate::runtime::stream_element::{SnapshotType, StopMode};
use crate::runtime::task_executors::TaskExecutors;
use crate::time::Watermark;

use attempt::Attempt;
pub use clock::{Clock, ManualClock, SystemClock};
pub use details::{ExceptionEntry, JobDetails, JobState, JobView, VertexDetails};
pub use phase::JobPhase;
use restore_points::ResolveContext;
use store_io::{StoreContext, StoreIo};

/// The longest the loop waits without looking at its timers.
const MAX_WAIT: Duration = Duration::from_millis(200);

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

/// A checkpoint whose storage part the worker is completing.
struct Finalizing {
    pending: PendingCheckpoint,
    /// The run it belongs to: its notices go to that run's tasks only.
    run: u64,
    /// Whether it becomes a restore point (a checkpoint, or a stop's savepoint).
    recorded: bool,
}

/// Runs one job to its end.
pub struct JobMaster {
    job: JobDefinition,
    clock: Box<dyn Clock>,
    /// The storage worker, which owns the job's durable state.
    io: StoreIo,
    /// Where snapshots go (`None`: no checkpoint storage).
    storage: Option<Arc<dyn CheckpointStorage>>,
    fencing: FencingToken,
    coordinator: CheckpointCoordinator,
    restart: RestartBackoff,
    /// Whether the next attempt traces where every record was read: set after a failure
    /// that user code may have caused, so that a poison record failing again is named.
    trace_record_origins: bool,
    /// How long the next run traces (`None`: to its end).
    tracing_window: Option<Duration>,
    /// How long the last run lived, from deployment to its end.
    last_run_lived: Duration,
    commands: Receiver<JobCommand>,
    /// What resolving a restore point needs to know of the job.
    resolve: ResolveContext,
    /// Restore points found unusable; never tried again.
    bad: BTreeSet<u64>,
    savepoint_waiters: HashMap<u64, Sender<Result<Savepoint, WeirError>>>,
    restored_from: Vec<u64>,
    /// Where the first run started from: as decided at the start, then as the first run
    /// that deployed did (a damaged state file found while deploying falls back further).
    origin: JobStart,
    /// Whether a run has deployed.
    deployed_once: bool,
    /// What recovery skipped, and what that means for the output.
    recovery_notes: Vec<String>,
    /// Resuming a job that already ran to its end: there is nothing to do.
    already_finished: bool,
    /// Where the tasks run.
    executors: Box<dyn TaskExecutors>,
    /// Runs started so far (the attempt number of the next run's `RunId`).
    runs: u64,
    /// Where the job is.
    phase: JobPhase,
    /// The current run's tasks, while it has any.
    attempt: Option<Attempt>,
    /// The restore point of the next run, once resolved (`Some(None)`: empty state).
    next_restore: Option<Option<RestorePoint>>,
    /// A restore point is being resolved on the worker.
    resolving: bool,
    /// Checkpoints the worker is completing, by id.
    finalizing: BTreeMap<u64, Finalizing>,
    /// The checkpoint whose location the worker is creating.
    preparing: Option<checkpointing::Preparing>,
    /// Client commands waiting for that checkpoint to start.
    queued: VecDeque<JobCommand>,
    /// The last run's task metrics.
    metrics: Vec<OperatorMetrics>,
    /// How the job ends, once decided: status and savepoint, waiting for the record.
    ending: Option<(JobStatus, Option<Savepoint>)>,
    /// Whether the end being recorded may go unrecorded without harm: a finished job whose
    /// final checkpoint the record already names.
    end_unrecorded_is_safe: bool,
    /// The job failed for good: its error, once the failure is recorded.
    failed: Option<WeirError>,
    /// The result, once the job is over.
    outcome: Option<Result<JobExecutionResult, WeirError>>,
    started: Instant,
    /// The job's id (Flink's `JobID`: 32 hex digits), fresh per submission.
    job_id: String,
    /// When the job started, in milliseconds since the Unix epoch.
    start_time: u64,
    /// Recent failures, for the exception history.
    exceptions: details::ExceptionHistory,
    /// The tasks' latest metrics and the rates derived from them.
    metric_store: MetricStore,
    /// When the tasks' metrics are sampled next.
    next_sample: Instant,
    /// Where the job's details are published.
    view: JobView,
    /// What the last published details showed.
    published: details::Published,
}

/// A fresh job id: 32 hex digits, as Flink's `JobID`.
fn new_job_id(job_name: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SUBMITTED: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let seed = format!(
        "{job_name}/{nanos}/{}/{}",
        std::process::id(),
        SUBMITTED.fetch_add(1, Ordering::Relaxed)
    );
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(seed.as_bytes()))
}

/// Where the job starts, as read from storage before the loop runs.
struct Start {
    store: Option<CompletedCheckpointStore>,
    storage_description: String,
    fencing: FencingToken,
    initial: Option<RestorePoint>,
    explicit_restore: Option<u64>,
    bad: BTreeSet<u64>,
    first_id: u64,
    already_finished: bool,
    /// Where the first run starts from, for the result.
    origin: JobStart,
    /// What recovery skipped on the way, for the result.
    notes: Vec<String>,
}

/// Takes the job's storage (lock and epoch) and decides where it starts.
fn prepare(job: &JobDefinition) -> Result<Start, WeirError> {
    let config = &job.config;
    let job_name = job.plan.stream_graph.job_name.clone();
    let mut start = Start {
        store: None,
        storage_description: String::new(),
        fencing: FencingToken::unfenced(&job_name),
        initial: None,
        explicit_restore: None,
        bad: BTreeSet::new(),
        first_id: 1,
        already_finished: false,
        origin: JobStart::Fresh,
        notes: Vec::new(),
    };
    // A chosen directory means savepoints can be taken even without periodic
    // checkpoints, as in Flink.
    let needs_storage = config.checkpoint.interval.is_some()
        || config.restore.is_some()
        || config.resume_from_latest_checkpoint
        || config.checkpoint.storage.is_durable();
    if !needs_storage {
        return Ok(start);
    }
    let storage = create_storage(
        &config.checkpoint.storage,
        config.checkpoint.local_recovery.as_deref(),
        &job_name,
    )?;
    start.storage_description = storage.describe();
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
            start.explicit_restore = Some(metadata.checkpoint_id);
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
    let context = resolve_context(job, &start.storage_description, start.explicit_restore);
    let plan = plan_start(context.recovery(), &mode, &previous, &on_disk)?;
    // What sinks may hold only grows: a fresh start or a restore does not make output
    // already committed go away.
    let notified_through = match &previous {
        PreviousRecord::Found(r) => r.notified_through,
        _ => 0,
    };
    let candidates = match plan {
        StartPlan::AlreadyFinished => {
            tracing::info!(storage = %storage.describe(), "the job already ran to its end; nothing to resume");
            start.already_finished = true;
            start.origin = JobStart::AlreadyFinished {
                final_checkpoint: match &previous {
                    PreviousRecord::Found(JobRecord {
                        status: RecordedStatus::Finished { final_checkpoint },
                        ..
                    }) => *final_checkpoint,
                    _ => None,
                },
                storage: storage.describe(),
            };
            start.fencing = store.fencing().clone();
            // What a crash during its clean-up left is deleted now.
            if let Err(e) = store.clean_up_finished() {
                tracing::warn!(error = %e, "cannot clean up after the finished job");
            }
            start.store = Some(store);
            return Ok(start);
        }
        StartPlan::Fresh { note } => {
            if let Some(note) = note {
                tracing::warn!("{note}");
                start.notes.push(note);
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
                start.notes.push(note);
            }
            if let (StartMode::RestoreFrom { .. }, Some(first), Some(settings)) =
                (&mode, candidates.first_mut(), &config.restore)
            {
                first.allow_non_restored_state = settings.allows_non_restored_state();
            }
            candidates
        }
    };
    start.fencing = store.fencing().clone();
    // The restore point is read and matched to the job before the record is rewritten:
    // a restore that cannot work leaves the job's real restore points in place.
    start.initial = restore_points::resolve(
        &store,
        &context,
        &candidates,
        &mut start.bad,
        &mut start.notes,
    )?;
    if let Some(point) = &start.initial {
        let checkpoint_id = point.checkpoint_id;
        let location = crate::checkpoint::savepoint::absolute_location(point.location.clone());
        start.origin = match &mode {
            StartMode::RestoreFrom { .. } => JobStart::Restored {
                checkpoint_id,
                location,
            },
            StartMode::Resume | StartMode::Fresh => JobStart::Resumed {
                checkpoint_id,
                location,
            },
        };
    }
    let mut completed = candidates;
    completed.reverse();
    store.begin(completed, notified_through)?;
    let restored_id = start.initial.as_ref().map_or(0, |p| p.checkpoint_id);
    start.first_id = store.next_id().max(restored_id + 1);
    start.store = Some(store);
    Ok(start)
}

fn resolve_context(
    job: &JobDefinition,
    storage: &str,
    explicit_restore: Option<u64>,
) -> ResolveContext {
    let graph = &job.plan.stream_graph;
    ResolveContext {
        job: graph.job_name.clone(),
        storage: storage.to_string(),
        sinks: graph.committing_sinks(),
        policy: job.config.checkpoint.corrupt_checkpoint_policy,
        stream_graph: graph.clone(),
        explicit_restore,
    }
}

impl JobMaster {
    /// Prepares `job`: takes its checkpoint storage (lock and epoch), decides where it
    /// starts and reads that restore point.
    pub fn new(
        job: JobDefinition,
        commands: Receiver<JobCommand>,
        executors: Box<dyn TaskExecutors>,
    ) -> Result<Self, WeirError> {
        let mut start = prepare(&job)?;
        let storage = start.store.as_ref().map(|s| s.storage().clone());
        let io = StoreIo::worker(
            StoreContext {
                store: start.store.take(),
            },
            &job.plan.stream_graph.job_name,
        );
        Self::assemble(
            job,
            commands,
            executors,
            Box::new(SystemClock),
            start,
            storage,
            io,
        )
    }

    /// A job master whose time is `clock` and whose storage tasks run inline (unit tests).
    #[cfg(test)]
    pub(crate) fn for_test(
        job: JobDefinition,
        commands: Receiver<JobCommand>,
        executors: Box<dyn TaskExecutors>,
        clock: Box<dyn Clock>,
    ) -> Result<Self, WeirError> {
        let mut start = prepare(&job)?;
        let storage = start.store.as_ref().map(|s| s.storage().clone());
        let io = Ok(StoreIo::inline(StoreContext {
            store: start.store.take(),
        }));
        Self::assemble(job, commands, executors, clock, start, storage, io)
    }

    fn assemble(
        job: JobDefinition,
        commands: Receiver<JobCommand>,
        mut executors: Box<dyn TaskExecutors>,
        clock: Box<dyn Clock>,
        start: Start,
        storage: Option<Arc<dyn CheckpointStorage>>,
        io: Result<StoreIo, WeirError>,
    ) -> Result<Self, WeirError> {
        let io = io?;
        let now = clock.now();
        let config = &job.config;
        executors.on_job_epoch(start.fencing.epoch());
        let job_id = new_job_id(&job.plan.stream_graph.job_name);
        let view = JobView::new(JobDetails {
            job_id: job_id.clone(),
            name: job.plan.stream_graph.job_name.clone(),
            state: JobState::Created,
            start_time: clock.unix_millis(),
            end_time: None,
            metrics: Default::default(),
            vertices: Vec::new(),
            checkpoints: CheckpointHistory::new(0),
            exceptions: Vec::new(),
            throughput: Vec::new(),
        });
        let mut master = Self {
            coordinator: CheckpointCoordinator::new(config.checkpoint.clone(), start.first_id, now),
            restart: RestartBackoff::new(config.effective_restart_strategy(), clock.unix_millis()),
            trace_record_origins: config.record_origins
                == crate::config::RecordOriginTracing::Always,
            tracing_window: None,
            last_run_lived: Duration::ZERO,
            resolve: resolve_context(&job, &start.storage_description, start.explicit_restore),
            storage,
            fencing: start.fencing,
            bad: start.bad,
            savepoint_waiters: HashMap::new(),
            restored_from: Vec::new(),
            origin: start.origin,
            deployed_once: false,
            recovery_notes: start.notes,
            already_finished: start.already_finished,
            executors,
            runs: 0,
            phase: JobPhase::WaitingForResources { since: now },
            attempt: None,
            next_restore: Some(start.initial),
            resolving: false,
            finalizing: BTreeMap::new(),
            preparing: None,
            queued: VecDeque::new(),
            metrics: Vec::new(),
            ending: None,
            end_unrecorded_is_safe: false,
            failed: None,
            outcome: None,
            started: now,
            start_time: clock.unix_millis(),
            job_id,
            exceptions: Default::default(),
            metric_store: MetricStore::new(),
            next_sample: now,
            view,
            published: Default::default(),
            commands,
            clock,
            io,
            job,
        };
        master.publish_details(true);
        Ok(master)
    }

    /// Where the job's details are published.
    pub fn view(&self) -> JobView {
        self.view.clone()
    }

    fn job_name(&self) -> &str {
        &self.job.plan.stream_graph.job_name
    }

    /// The phase the job is in.
    pub fn phase(&self) -> &JobPhase {
        &self.phase
    }

    /// Runs the job, restarting it per the restart strategy, until it finishes, is stopped or
    /// cancelled, or fails for good.
    pub fn run(mut self) -> Result<JobExecutionResult, WeirError> {
        if self.already_finished {
            return Ok(self.summarize(JobStatus::Finished, None));
        }
        self.started = self.clock.now();
        self.try_deploy();
        loop {
            if let Some(outcome) = self.outcome.take() {
                self.io.drain();
                // The last word on the job: its final state and metrics.
                self.outcome = Some(outcome);
                self.sample_metrics();
                self.publish_details(true);
                return self.outcome.take().unwrap_or_else(|| {
                    Err(WeirError::Internal("the job's outcome vanished".into()))
                });
            }
            let wake = self.next_wake();
            self.step(Some(wake));
        }
    }

    /// Waits (until `deadline`, or not at all with `None`) for one event, handles it, then
    /// looks at the timers.
    fn step(&mut self, deadline: Option<Instant>) {
        let events = self
            .attempt
            .as_ref()
            .map_or_else(crossbeam_channel::never, |a| a.events.clone());
        let replies = self.io.replies().clone();
        let commands = self.commands.clone();
        let timeout = deadline.map_or(Duration::ZERO, |d| {
            d.saturating_duration_since(self.clock.now()).min(MAX_WAIT)
        });
        select! {
            recv(events) -> event => if let Ok(event) = event {
                self.on_task_event(event);
            },
            recv(replies) -> reply => if let Ok(reply) = reply {
                self.on_store_reply(reply);
            },
            recv(commands) -> command => match command {
                Ok(command) => self.on_command(command),
                // The client is gone: the job runs on, detached.
                Err(_) => self.commands = crossbeam_channel::never(),
            },
            default(timeout) => {}
        }
        self.on_timers();
    }

    /// When the loop must look at its timers next.
    fn next_wake(&self) -> Instant {
        let now = self.clock.now();
        let due = self
            .coordinator
            .next_due()
            .filter(|_| self.may_trigger_periodic() && self.coordinator.has_capacity());
        let restart = match &self.phase {
            JobPhase::Restarting { due, .. } => Some(*due),
            _ => None,
        };
        [
            due,
            self.coordinator.next_expiry(),
            restart,
            Some(self.next_sample),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(now + MAX_WAIT)
        .min(now + MAX_WAIT)
    }

    /// Looks at everything time decides: checkpoint triggers and timeouts, the restart
    /// back-off, the wait for slots, and whether the run's tasks have all ended.
    fn on_timers(&mut self) {
        self.end_tracing_window();
        let now = self.clock.now();
        if now >= self.next_sample {
            self.next_sample = now + self.job.config.metrics_update_interval;
            self.sample_metrics();
            self.publish_details(true);
        } else {
            self.publish_details(false);
        }
        match self.phase {
            JobPhase::Restarting {
                due,
                restore_ready: false,
            } if now >= due && !self.resolving => self.resolve_restart(),
            JobPhase::Restarting {
                due,
                restore_ready: true,
            } if now >= due => {
                self.phase = JobPhase::WaitingForResources { since: now };
                self.try_deploy();
            }
            JobPhase::WaitingForResources { .. } => self.try_deploy(),
            JobPhase::Deploying { since } => {
                let timeout = self.executors.deploy_timeout();
                if let Some(timeout) =
                    timeout.filter(|t| now.saturating_duration_since(since) >= *t)
                {
                    self.fail_run(WeirError::InvalidRequest(format!(
                        "the run's tasks were not all deployed within {timeout:?} (a TaskManager restoring or connecting too slowly); restarting"
                    )));
                }
            }
            _ => {}
        }
        if self.phase.has_tasks() {
            self.checkpoint_timers(now);
        }
        if self.attempt.as_ref().is_some_and(|a| a.running.is_empty()) {
            self.end_attempt();
        }
    }

    fn summarize(&self, status: JobStatus, savepoint: Option<Savepoint>) -> JobExecutionResult {
        let mut subtasks = self.metrics.clone();
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
            wall_time: self.clock.now().saturating_duration_since(self.started),
            operators,
            subtasks,
            restarts: self.restart.restarts(),
            start: Some(self.origin.clone()),
            recovery_notes: self.recovery_notes.clone(),
            restored_from: self.restored_from.clone(),
            checkpoints: self.coordinator.history().clone(),
            savepoint,
        }
    }
}
