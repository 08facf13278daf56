//! The fencing token: the epoch of the process that holds a job, and the check that it still
//! does. Every process that takes a job writes a higher epoch into its job record before
//! anything else; a process that finds a higher epoch there has lost the job — it was stalled
//! while another one took over — and must commit nothing more. The job manager checks before
//! it completes a checkpoint, and sinks check before every commit (through
//! [`crate::RuntimeContext::fencing_token`]), so that a process that wakes up after losing
//! its job stops at its next step instead of committing output the new holder commits too.

use std::sync::{Arc, OnceLock};

use crate::checkpoint::storage::CheckpointStorage;

/// Why this process may not commit for its job any more.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FencedError {
    /// Another process holds the job now.
    #[error(
        "job `{job}`: this process (epoch {epoch}) lost the job to epoch {current} ({holder}); \
         it stops without committing anything more"
    )]
    Superseded {
        /// The job.
        job: String,
        /// This process's epoch.
        epoch: u64,
        /// The epoch in the job record now.
        current: u64,
        /// Who holds it now.
        holder: String,
    },
    /// The job record is gone: the job's checkpoint directory was removed or replaced.
    #[error(
        "job `{job}`: this process (epoch {epoch}) finds no job record in `{storage}` any more \
         (the checkpoint directory was removed or replaced); it stops without committing \
         anything more"
    )]
    RecordGone {
        /// The job.
        job: String,
        /// This process's epoch.
        epoch: u64,
        /// The checkpoint storage.
        storage: String,
    },
    /// The job record could not be read, so the check could not be made.
    #[error(
        "job `{job}`: cannot check that this process (epoch {epoch}) still holds the job: {reason}"
    )]
    Unverifiable {
        /// The job.
        job: String,
        /// This process's epoch.
        epoch: u64,
        /// Why.
        reason: String,
    },
}

impl FencedError {
    /// Whether this is final: the process lost the job (as opposed to a failed check).
    pub fn is_final(&self) -> bool {
        !matches!(self, FencedError::Unverifiable { .. })
    }
}

/// The epoch of the process holding a job, and the check that it still holds it. Cheap to
/// clone; clones share what they learned (once fenced, always fenced).
#[derive(Clone)]
pub struct FencingToken {
    job: Arc<str>,
    epoch: u64,
    storage: Option<Arc<dyn CheckpointStorage>>,
    fenced: Arc<OnceLock<FencedError>>,
}

impl std::fmt::Debug for FencingToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencingToken")
            .field("job", &self.job)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

impl PartialEq for FencingToken {
    fn eq(&self, other: &Self) -> bool {
        self.job == other.job && self.epoch == other.epoch
    }
}

impl FencingToken {
    /// The token of epoch `epoch`, checked against the job record in `storage`.
    pub fn new(job: &str, epoch: u64, storage: Arc<dyn CheckpointStorage>) -> Self {
        Self {
            job: job.into(),
            epoch,
            storage: Some(storage),
            fenced: Arc::default(),
        }
    }

    /// A token that is never fenced: a job without checkpoint storage has nothing another
    /// process could take over.
    pub fn unfenced(job: &str) -> Self {
        Self {
            job: job.into(),
            epoch: 0,
            storage: None,
            fenced: Arc::default(),
        }
    }

    /// The epoch: grows every time a process takes the job. Sinks put it into the names of
    /// their transactions, so that every transaction tells which process wrote it.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Succeeds while this process still holds its job; call it right before committing
    /// anything externally visible.
    pub fn check(&self) -> Result<(), FencedError> {
        if let Some(fenced) = self.fenced.get() {
            return Err(fenced.clone());
        }
        let Some(storage) = &self.storage else {
            return Ok(());
        };
        let fenced = match storage.read_job_record() {
            Ok(Some(record)) if record.epoch == self.epoch => return Ok(()),
            Ok(Some(record)) => FencedError::Superseded {
                job: self.job.to_string(),
                epoch: self.epoch,
                current: record.epoch,
                holder: record.holder,
            },
            Ok(None) => FencedError::RecordGone {
                job: self.job.to_string(),
                epoch: self.epoch,
                storage: storage.describe(),
            },
            Err(e) => {
                return Err(FencedError::Unverifiable {
                    job: self.job.to_string(),
                    epoch: self.epoch,
                    reason: e.to_string(),
                })
            }
        };
        tracing::error!(error = %fenced, "fenced");
        Err(self.fenced.get_or_init(|| fenced).clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::job_record::JobRecord;
    use crate::checkpoint::storage::MemoryCheckpointStorage;

    #[test]
    fn a_newer_epoch_fences_for_good_and_a_missing_record_fences_too() {
        let storage = Arc::new(MemoryCheckpointStorage::new("j"));
        let token = FencingToken::new("j", 3, storage.clone());
        assert!(matches!(token.check(), Err(FencedError::RecordGone { .. })));
        let fresh = FencingToken::new("j", 3, storage.clone());
        let mut record = JobRecord::new("j");
        record.epoch = 3;
        storage.write_job_record(&record).unwrap();
        fresh.check().unwrap();
        record.epoch = 4;
        record.holder = "pid 9".into();
        storage.write_job_record(&record).unwrap();
        let err = fresh.clone().check().unwrap_err();
        assert!(err.is_final());
        assert!(
            err.to_string().contains("lost the job to epoch 4 (pid 9)"),
            "{err}"
        );
        record.epoch = 3;
        storage.write_job_record(&record).unwrap();
        assert!(fresh.check().is_err(), "once fenced, always fenced");
        FencingToken::unfenced("j").check().unwrap();
    }
}
