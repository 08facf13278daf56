//! Local mode: the job manager and the task managers in one process, one thread per subtask,
//! talking through the same channels and messages that would cross processes in a cluster.
//!
//! A job can also run elsewhere: a [`PipelineExecutor`] set on the environment (cluster mode)
//! decides how `execute` runs it.

use std::sync::Mutex;
use std::thread::JoinHandle;

use crossbeam_channel::Sender;

use crate::checkpoint::savepoint::Savepoint;
use crate::checkpoint::stats::CheckpointHistory;
use crate::error::WeirError;
use crate::graph::explain::ExecutionPlan;
use crate::runtime::job_definition::JobDefinition;
use crate::runtime::job_master::{JobCommand, JobDetails, JobMaster, JobView};
use crate::runtime::job_result::JobExecutionResult;
use crate::runtime::stream_element::StopMode;
use crate::runtime::task_executors::{LocalTaskExecutors, TaskExecutors};

/// Runs a job somewhere other than the local mini-cluster (Flink's `PipelineExecutor`): set
/// with [`StreamExecutionEnvironment::set_executor`](crate::StreamExecutionEnvironment::set_executor),
/// for instance by the cluster mode's role flags. Every process of a cluster builds the same
/// job from the same code; the executor decides what this process does with it.
pub trait PipelineExecutor {
    /// Runs `job` to its end and returns its result.
    fn execute(&self, job: JobDefinition) -> Result<JobExecutionResult, WeirError>;

    /// Starts `job` and returns its client, if this executor runs the job's JobManager here.
    fn submit(&self, job: JobDefinition) -> Result<JobClient, WeirError> {
        let _ = job;
        Err(WeirError::InvalidRequest(
            "this process does not run the job's JobManager, so it has no job client; use `execute`"
                .into(),
        ))
    }
}

/// Runs jobs in this process.
pub struct MiniCluster;

impl MiniCluster {
    /// Starts `job` on its own job manager thread and returns its client.
    pub fn submit(job: JobDefinition) -> Result<JobClient, WeirError> {
        Self::submit_with(job, Box::new(LocalTaskExecutors::new()))
    }

    /// Starts `job` on its own job manager thread, its tasks running on `executors` (for a
    /// JobManager process, its TaskManagers), and returns its client.
    pub fn submit_with(
        job: JobDefinition,
        executors: Box<dyn TaskExecutors>,
    ) -> Result<JobClient, WeirError> {
        let job_name = job.plan.stream_graph.job_name.clone();
        let (commands, inbox) = crossbeam_channel::unbounded();
        let plan = std::sync::Arc::new(job.plan.clone());
        let master = JobMaster::new(job, inbox, executors)?;
        let view = master.view();
        let handle = std::thread::Builder::new()
            .name(format!("jobmanager {job_name}"))
            .spawn(move || master.run())
            .map_err(|source| WeirError::Spawn {
                what: format!("job manager of {job_name}"),
                source,
            })?;
        Ok(JobClient {
            job_name,
            view,
            plan,
            commands,
            handle: std::sync::Arc::new(Mutex::new(Some(handle))),
        })
    }
}

/// The job manager's thread, which returns the job's result.
type JobManagerThread = JoinHandle<Result<JobExecutionResult, WeirError>>;

/// A handle to a running job (Flink's `JobClient`); clones control the same job (its
/// result is handed out once, to the first that waits).
///
/// ```
/// use weir::prelude::*;
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// env.enable_checkpointing(std::time::Duration::from_millis(20));
/// env.from_source(GeneratorSource::unbounded(|i| i % 5).with_rate_limit(5000.0), WatermarkStrategy::no_watermarks(), "numbers")
///     .key_by(|k: &u64| *k)
///     .count()
///     .sink_to(DiscardingSink, "discard");
/// let client: JobClient = env.execute_async("running")?;
/// assert_eq!(client.job_name(), "running");
/// std::thread::sleep(std::time::Duration::from_millis(100));
/// let history = client.checkpoint_history()?; // completed, failed, the recent ones
/// let result = client.cancel()?;
/// assert_eq!(result.status, JobStatus::Cancelled);
/// # let _ = history;
/// # Ok::<(), WeirError>(())
/// ```
#[derive(Clone)]
pub struct JobClient {
    job_name: String,
    /// Where the JobManager publishes the job's details.
    view: JobView,
    /// The job's four graph layers.
    plan: std::sync::Arc<ExecutionPlan>,
    commands: Sender<JobCommand>,
    /// The job manager's thread, until its result is taken.
    handle: std::sync::Arc<Mutex<Option<JobManagerThread>>>,
}

impl JobClient {
    fn ended(&self) -> WeirError {
        WeirError::InvalidRequest(format!("job `{}` has already ended", self.job_name))
    }

    fn request<T>(&self, make: impl FnOnce(Sender<T>) -> JobCommand) -> Result<T, WeirError> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.commands.send(make(tx)).map_err(|_| self.ended())?;
        rx.recv().map_err(|_| self.ended())
    }

    /// The job's name.
    pub fn job_name(&self) -> &str {
        &self.job_name
    }

    /// The job's id: 32 hex digits, fresh per submission (Flink's `JobID`).
    pub fn job_id(&self) -> String {
        self.view.latest().job_id.clone()
    }

    /// The job's latest details as its JobManager published them: state, vertices with
    /// their live metrics, checkpoints, exceptions. They stay readable after the job ends.
    pub fn details(&self) -> std::sync::Arc<JobDetails> {
        self.view.latest()
    }

    /// The job's four graph layers.
    pub fn plan(&self) -> &ExecutionPlan {
        &self.plan
    }

    /// Takes a savepoint and returns it once it is complete.
    pub fn trigger_savepoint(&self) -> Result<Savepoint, WeirError> {
        self.request(JobCommand::TriggerSavepoint)?
    }

    /// Stops the job with a savepoint (Flink's `stop`): every source stops at the
    /// savepoint's barrier and emits nothing after it, nothing after the barrier is processed
    /// anywhere, and once the savepoint completes its output is committed and the tasks end
    /// (no end of input: functions' `end_input` does not run). Returns the savepoint and the
    /// job's result (status `Stopped`).
    ///
    /// If the savepoint fails (declined, expired) the job keeps running and the error is
    /// returned; the client still controls it (stop again, cancel, wait).
    pub fn stop_with_savepoint(&self) -> Result<(Savepoint, JobExecutionResult), WeirError> {
        self.stop(StopMode::NoDrain)
    }

    /// Stops the job with a savepoint after draining it (Flink's `stop --drain`): every
    /// source ends its input at the savepoint's barrier, every operator processes the end of
    /// its input (functions' `end_input` runs) before its snapshot, and once the savepoint
    /// completes its output — including what `end_input` emitted — is committed and the job
    /// ends. Meant for a job that will not be resumed. Returns the savepoint and the
    /// job's result (status `Stopped`).
    ///
    /// If the savepoint fails, the operators have already ended their input, so the job fails
    /// over to its latest restore point (per its restart strategy) and the error is returned.
    pub fn stop_with_savepoint_and_drain(
        &self,
    ) -> Result<(Savepoint, JobExecutionResult), WeirError> {
        self.stop(StopMode::Drain)
    }

    fn stop(&self, mode: StopMode) -> Result<(Savepoint, JobExecutionResult), WeirError> {
        let path = self.request_stop(mode)?;
        Ok((path, self.wait()?))
    }

    /// Stops the job with a savepoint (as [`stop_with_savepoint`](Self::stop_with_savepoint),
    /// with drain or not) and returns the savepoint without waiting for the job's end; its
    /// result goes to whoever [`wait`](Self::wait)s for it.
    pub fn request_stop(&self, mode: StopMode) -> Result<Savepoint, WeirError> {
        self.request(|reply| JobCommand::StopWithSavepoint(mode, reply))?
    }

    /// Asks the job to cancel without waiting for its end; its result goes to whoever
    /// [`wait`](Self::wait)s for it.
    pub fn request_cancel(&self) {
        // If the job already ended there is nothing to cancel.
        let _ = self.commands.send(JobCommand::Cancel);
    }

    /// Cancels the job and returns its result (status `Cancelled`).
    pub fn cancel(&self) -> Result<JobExecutionResult, WeirError> {
        // If the job already ended, `wait` reports how.
        let _ = self.commands.send(JobCommand::Cancel);
        self.wait()
    }

    /// The statistics of the job's recent checkpoints.
    pub fn checkpoint_history(&self) -> Result<CheckpointHistory, WeirError> {
        self.request(JobCommand::History)
    }

    /// Whether the job has ended.
    pub fn is_finished(&self) -> bool {
        self.handle
            .lock()
            .map_or(true, |h| h.as_ref().is_none_or(JoinHandle::is_finished))
    }

    /// Waits for the job to end and returns its result; the result is handed out once.
    pub fn wait(&self) -> Result<JobExecutionResult, WeirError> {
        let handle = self
            .handle
            .lock()
            .map_err(|_| WeirError::Internal("the job client's lock is poisoned".into()))?
            .take()
            .ok_or_else(|| {
                WeirError::InvalidRequest(format!(
                    "the result of job `{}` was already taken",
                    self.job_name
                ))
            })?;
        handle
            .join()
            .map_err(|_| WeirError::Internal("the job manager thread panicked".into()))?
    }
}
