//! Starting a job over on purpose (`weir reset`): the one way to run a job from empty state
//! where it ran before, since a start without a restore point over an earlier run is refused
//! (see [`crate::checkpoint::recovery::plan_start`]).

use std::path::Path;

use crate::checkpoint::completed_store::{CompletedCheckpointStore, ResetOutcome};
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
