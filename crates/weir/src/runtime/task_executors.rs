//! Where a job's tasks run. The JobManager asks its [`TaskExecutors`] to start each run
//! (attempt) of the job and talks to the run's tasks only through the returned
//! [`DeployedRun`] — by messages, never through shared memory — so that the same JobManager
//! drives tasks on threads of this process ([`LocalTaskExecutors`], the mini-cluster) or
//! on TaskManagers in other processes.

use std::collections::HashMap;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::Sender;

use crate::checkpoint::fencing::FencingToken;
use crate::checkpoint::storage::CheckpointStorage;
use crate::error::WeirError;
use crate::graph::execution_graph::SubtaskRef;
use crate::graph::ids::NodeId;
use crate::metrics::{MetricRegistry, SubtaskSample};
use crate::runtime::channel::{cancel_pair, CancelHandle, CancelToken};
use crate::runtime::deployment::{
    deploy_tasks, DeployError, DeployedTask, RestorePoint, TaskDeployment,
};
use crate::runtime::job_definition::JobDefinition;
use crate::runtime::network::frame::RunId;
use crate::runtime::source_task::ReaderEndpoint;
use crate::runtime::task::{run_task, TaskControl, TaskEnvironment, TaskEvent};
use crate::runtime::transport::LocalTransport;

/// The reader endpoints of every source, by source node and subtask; a deployment takes out
/// those of the readers it creates.
pub type ReaderEndpoints = HashMap<NodeId, Vec<Option<ReaderEndpoint>>>;

/// What a run needs to start.
pub struct RunRequest<'a> {
    /// The job.
    pub job: &'a JobDefinition,
    /// Which run.
    pub run: RunId,
    /// The state to start from.
    pub restore: Option<&'a RestorePoint>,
    /// Where snapshots go.
    pub storage: Option<&'a Arc<dyn CheckpointStorage>>,
    /// The JobManager's fencing token.
    pub fencing: &'a FencingToken,
    /// Where the tasks report.
    pub events: Sender<TaskEvent>,
    /// The source readers' lines to their coordinators.
    pub readers: ReaderEndpoints,
    /// Whether sources say where each record was read (the attempt after a failure of user
    /// code), so that an operator failing on a record names it.
    pub trace_record_origins: bool,
}

/// Starts runs of a job's tasks.
pub trait TaskExecutors: Send {
    /// The JobManager holds the job at `epoch` (its fencing token), known before any run
    /// starts; executors that talk to other processes stamp their messages with it.
    fn on_job_epoch(&mut self, epoch: u64) {
        let _ = epoch;
    }

    /// Slots offered now (`None`: as many as needed, as in this process). The JobManager
    /// waits for enough before it deploys a run.
    fn offered_slots(&self) -> Option<u32> {
        None
    }

    /// How long a run may take to deploy before it counts as failed (`None`: deployment is
    /// done when `start_run` returns).
    fn deploy_timeout(&self) -> Option<std::time::Duration> {
        None
    }

    /// How long the JobManager waits for enough slots before the run counts as failed.
    fn slot_timeout(&self) -> Option<std::time::Duration> {
        None
    }

    /// The latest metrics of the tasks, by TaskManager (`None`: this process).
    fn sample_metrics(&self) -> Vec<(Option<String>, Vec<SubtaskSample>)> {
        Vec::new()
    }

    /// Deploys and starts every task of a run. Returns once every task is deployed; an error
    /// leaves nothing of the run running.
    fn start_run(&mut self, request: RunRequest<'_>) -> Result<Box<dyn DeployedRun>, DeployError>;
}

/// The JobManager's handle on a started run.
pub trait DeployedRun: Send {
    /// Sends `control` to every task of the run (those that have ended ignore it).
    fn broadcast(&self, control: TaskControl);
    /// Cancels every task of the run; idempotent.
    fn cancel(&mut self);
    /// Waits until every task of the run has ended (they have reported, or are cancelled).
    fn join(self: Box<Self>);
    /// Whether every task is deployed already (otherwise a `TaskEvent::Deployed` or
    /// `DeployFailed` follows).
    fn is_deployed(&self) -> bool {
        true
    }
}

/// Tasks on threads of this process: the TaskManager of the local mini-cluster.
#[derive(Debug, Default, Clone)]
pub struct LocalTaskExecutors {
    metrics: Arc<MetricRegistry>,
}

impl LocalTaskExecutors {
    /// Executors whose tasks register their metrics in a registry of their own.
    pub fn new() -> Self {
        Self::default()
    }
}

impl TaskExecutors for LocalTaskExecutors {
    fn sample_metrics(&self) -> Vec<(Option<String>, Vec<SubtaskSample>)> {
        vec![(None, self.metrics.sample())]
    }

    fn start_run(&mut self, request: RunRequest<'_>) -> Result<Box<dyn DeployedRun>, DeployError> {
        let (handle, cancel) = cancel_pair();
        let mut readers = request.readers;
        let tasks = deploy_tasks(
            TaskDeployment {
                job: request.job,
                transport: &LocalTransport,
                cancel: &cancel,
                storage: request.storage,
                restore: request.restore,
                fencing: request.fencing,
                metrics: &self.metrics,
                attempt: request.run.attempt,
                trace_record_origins: request.trace_record_origins,
            },
            &mut readers,
        )?;
        let run = start_tasks(
            tasks,
            request.job,
            request.storage.cloned(),
            &request.events,
            handle,
            cancel,
        )?;
        Ok(Box::new(run))
    }
}

/// Tasks of one run running on threads of this process.
pub struct LocalRun {
    cancel: Option<CancelHandle>,
    controls: HashMap<SubtaskRef, Sender<TaskControl>>,
    threads: Vec<JoinHandle<()>>,
}

impl LocalRun {
    /// Sends `control` to `task`, if it runs here and has not ended.
    pub fn send(&self, task: SubtaskRef, control: TaskControl) {
        if let Some(tx) = self.controls.get(&task) {
            let _ = tx.send(control);
        }
    }

    /// Whether every task's thread has ended.
    pub fn is_finished(&self) -> bool {
        self.threads.iter().all(JoinHandle::is_finished)
    }
}

impl DeployedRun for LocalRun {
    fn broadcast(&self, control: TaskControl) {
        for tx in self.controls.values() {
            let _ = tx.send(control);
        }
    }

    fn cancel(&mut self) {
        drop(self.cancel.take());
    }

    fn join(mut self: Box<Self>) {
        // Tasks that wait for messages must see the line close.
        self.controls.clear();
        for thread in std::mem::take(&mut self.threads) {
            let _ = thread.join();
        }
    }
}

impl Drop for LocalRun {
    fn drop(&mut self) {
        // A run dropped without being joined is cancelled, never left running.
        self.cancel();
    }
}

/// Starts `tasks` on their own threads, reporting to `events`; `handle` cancels them. On an
/// error the tasks already started are cancelled.
pub fn start_tasks(
    tasks: Vec<DeployedTask>,
    job: &JobDefinition,
    storage: Option<Arc<dyn CheckpointStorage>>,
    events: &Sender<TaskEvent>,
    handle: CancelHandle,
    cancel: CancelToken,
) -> Result<LocalRun, WeirError> {
    let mut run = LocalRun {
        cancel: Some(handle),
        controls: HashMap::new(),
        threads: Vec::new(),
    };
    let mode = job.config.checkpoint.mode;
    let checkpointing = job.config.checkpoint.interval.is_some();
    for DeployedTask {
        task,
        name,
        body,
        metrics,
    } in tasks
    {
        let (control_tx, control) = crossbeam_channel::unbounded();
        run.controls.insert(task, control_tx);
        let env = TaskEnvironment {
            task,
            task_name: name.clone(),
            control,
            events: events.clone(),
            storage: storage.clone(),
            mode,
            checkpointing,
            state_file_threshold: job.config.checkpoint.state_file_threshold,
            unaligned: checkpointing && job.config.checkpoint.unaligned,
            aligned_checkpoint_timeout: job.config.checkpoint.aligned_checkpoint_timeout,
            cancel: cancel.clone(),
            snapshot_threads: std::cell::RefCell::new(Vec::new()),
            metrics,
        };
        let thread = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || run_task(body, env))
            .map_err(|source| WeirError::Spawn { what: name, source })?;
        run.threads.push(thread);
    }
    Ok(run)
}
