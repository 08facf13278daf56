//! Starting a job over on purpose (`weir reset`): the one way to run a job from empty state
//! where it ran before, since a start without a restore point over an earlier run is refused
//! (see [`crate::checkpoint::recovery::plan_start`]).

use std::path::Path;

use crate::checkpoint::completed_store::CompletedCheckpointStore;
use crate::checkpoint::config::CheckpointConfig;
use crate::checkpoint::storage::{create_storage, StorageError};
use crate::connectors::output_epochs::remove_older_output;
use crate::error::WeirError;

/// Starts job `job_name` over: with its lock held (on a filesystem: refused while another
/// process, running or stalled, holds the job; object storage has no lock, and there a
/// JobManager still running the job is fenced, stopping at its next record write) it
/// records the reset — a new epoch and the `Reset` status,
/// written by compare-and-swap, the one step that decides the reset: a crash before it
/// leaves the old job, after it a reset one — then removes from each file-sink output
/// directory of `outputs` what the job's earlier epochs wrote (by the epoch in the names,
/// never the directory by its path: a process that took the job after the reset writes a
/// higher epoch, so a reset that wakes up late removes nothing of its), and deletes the
/// job's checkpoints. Savepoints stay, and so does output the job wrote to other systems
/// (Kafka topics, PostgreSQL tables). A reset cut short by a crash is finished by running
/// it again; a start from empty state refuses meanwhile, naming the old output it finds.
///
/// ```
/// use std::time::Duration;
/// use weir::prelude::*;
/// use weir::checkpoint::reset::reset_job;
///
/// let dir = tempfile::tempdir()?;
/// let out = dir.path().join("out");
/// let checkpoints = CheckpointConfig::default()
///     .with_interval(Duration::from_millis(50))
///     .with_storage(CheckpointStorageConfig::directory(dir.path().join("checkpoints")));
/// let run = || -> Result<JobExecutionResult, WeirError> {
///     let env = StreamExecutionEnvironment::new(
///         ExecutionConfig::default().with_checkpointing(checkpoints.clone()),
///     )?;
///     env.generate(10, |i| i).sink_to(FileSink::lines(&out), "numbers");
///     env.execute("numbers")
/// };
/// run()?;
/// // The job ran here: a second start from empty state would commit everything again.
/// assert!(run().unwrap_err().to_string().contains("ran here before"));
/// let reset = reset_job(&checkpoints, "numbers", &[out.as_path()])?;
/// assert!(reset.previous.is_some());
/// run()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn reset_job(
    checkpoint: &CheckpointConfig,
    job_name: &str,
    outputs: &[&Path],
) -> Result<ResetOutcome, WeirError> {
    let storage = create_storage(
        &checkpoint.storage,
        checkpoint.local_recovery.as_deref(),
        job_name,
    )?;
    CompletedCheckpointStore::reset(storage, job_name, |epoch| {
        for output in outputs {
            let removed =
                remove_older_output(output, epoch).map_err(|source| StorageError::Io {
                    action: "remove the earlier runs' output from",
                    path: output.display().to_string(),
                    source,
                })?;
            if !removed.is_empty() {
                tracing::info!(output = %output.display(), files = removed.len(),
                    "reset: removed the earlier runs' output");
            }
        }
        Ok(())
    })
}

/// What [`CompletedCheckpointStore::reset`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResetOutcome {
    /// The job's checkpoint storage.
    pub storage: String,
    /// The epoch the reset took the job with.
    pub epoch: u64,
    /// How the earlier run stood, in words (`None`: the job had no record).
    pub previous: Option<String>,
    /// The checkpoints deleted.
    pub removed_checkpoints: Vec<u64>,
    /// Savepoints of the job's directory, which stay (they belong to the user).
    pub savepoints: Vec<String>,
}

impl std::fmt::Display for ResetOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "reset `{}` (epoch {})", self.storage, self.epoch)?;
        match &self.previous {
            Some(previous) => write!(f, "; it held {previous}")?,
            None => write!(f, "; it held no job record")?,
        }
        if !self.removed_checkpoints.is_empty() {
            write!(f, "; deleted checkpoints {:?}", self.removed_checkpoints)?;
        }
        if !self.savepoints.is_empty() {
            write!(f, "; kept savepoints {}", self.savepoints.join(", "))?;
        }
        Ok(())
    }
}
