//! Local mode: the job manager and the task managers in one process, one thread per subtask,
//! talking through the same channels and messages that would cross processes in a cluster.

use std::thread::JoinHandle;

use crossbeam_channel::Sender;

use crate::checkpoint::stats::CheckpointHistory;
use crate::error::WeirError;
use crate::runtime::job_definition::JobDefinition;
use crate::runtime::job_master::{JobCommand, JobMaster};
use crate::runtime::job_result::JobExecutionResult;

/// Runs jobs in this process.
pub struct MiniCluster;

impl MiniCluster {
    /// Starts `job` on its own job manager thread and returns its client.
    pub fn submit(job: JobDefinition) -> Result<JobClient, WeirError> {
        let job_name = job.plan.stream_graph.job_name.clone();
        let (commands, inbox) = crossbeam_channel::unbounded();
        let master = JobMaster::new(job, inbox)?;
        let handle = std::thread::Builder::new()
            .name(format!("jobmanager {job_name}"))
            .spawn(move || master.run())
            .map_err(|source| WeirError::Spawn {
                what: format!("job manager of {job_name}"),
                source,
            })?;
        Ok(JobClient {
            job_name,
            commands,
            handle,
        })
    }
}

/// A handle to a running job (Flink's `JobClient`).
pub struct JobClient {
    job_name: String,
    commands: Sender<JobCommand>,
    handle: JoinHandle<Result<JobExecutionResult, WeirError>>,
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

    /// Takes a savepoint and returns its location once it is complete.
    pub fn trigger_savepoint(&self) -> Result<String, WeirError> {
        self.request(JobCommand::TriggerSavepoint)?
    }

    /// Takes a savepoint, then stops the job; returns the savepoint's location and the
    /// job's result.
    pub fn stop_with_savepoint(self) -> Result<(String, JobExecutionResult), WeirError> {
        let path = self.request(JobCommand::StopWithSavepoint)??;
        Ok((path, self.wait()?))
    }

    /// Cancels the job and returns its result (status `Cancelled`).
    pub fn cancel(self) -> Result<JobExecutionResult, WeirError> {
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
        self.handle.is_finished()
    }

    /// Waits for the job to end.
    pub fn wait(self) -> Result<JobExecutionResult, WeirError> {
        self.handle
            .join()
            .map_err(|_| WeirError::Internal("the job manager thread panicked".into()))?
    }
}
