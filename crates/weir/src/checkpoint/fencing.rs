//! The fencing token: the epoch of the process that holds a job, and the check that it still
//! does. Every process that takes a job writes a higher epoch into its job record before
//! anything else; a process that finds a higher epoch there has lost the job — it was stalled
//! while another one took over — and must commit nothing more. The job manager checks before
//! it completes a checkpoint, and sinks check before every commit (through
//! [`crate::RuntimeContext::fencing_token`]), so that a process that wakes up after losing
//! its job stops at its next step instead of committing output the new holder commits too.

use std::sync::{Arc, OnceLock};

use crate::checkpoint::job_lock::LockIdentity;
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
    /// The lock file this process holds was removed or replaced: another process may take
    /// (or have taken) the job.
    #[error(
        "job `{job}`: this process (epoch {epoch}) lost the job: its lock file `{lock}` was \
         removed or replaced; it stops without committing anything more"
    )]
    LockLost {
        /// The job.
        job: String,
        /// This process's epoch.
        epoch: u64,
        /// The lock file.
        lock: String,
    },
    /// The job record is gone: the job's checkpoint directory was removed or replaced.
    #[error(
        "job `{job}`: this process (epoch {epoch}) lost the job: it finds no job record in \
         `{storage}` any more (the checkpoint directory was removed or replaced); it stops \
         without committing anything more"
    )]
    RecordGone {
        /// The job.
        job: String,
        /// This process's epoch.
        epoch: u64,
        /// The checkpoint storage.
        storage: String,
    },
    /// This process's write of the job record lost to another process's: that process took
    /// the job after this one last read the record (the write is a compare-and-swap).
    #[error(
        "job `{job}`: this process (epoch {epoch}) lost the job: {conflict}; it stops without \
         committing anything more"
    )]
    RecordOvertaken {
        /// The job.
        job: String,
        /// This process's epoch.
        epoch: u64,
        /// The failed write, naming the record and the version found.
        conflict: String,
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
    /// Who this process is, as its job record says (`pid … on host …, epoch …, since …`):
    /// with the epoch, it tells this process from any other, even one that got the same
    /// epoch because the record was lost.
    holder: Arc<str>,
    storage: Option<Arc<dyn CheckpointStorage>>,
    lock: Option<LockIdentity>,
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
    /// The token of `holder` at epoch `epoch`, checked against the lock it holds (if the
    /// storage has locks) and the job record in `storage`.
    pub fn new(
        job: &str,
        epoch: u64,
        holder: &str,
        storage: Arc<dyn CheckpointStorage>,
        lock: Option<LockIdentity>,
    ) -> Self {
        Self {
            job: job.into(),
            epoch,
            holder: holder.into(),
            storage: Some(storage),
            lock,
            fenced: Arc::default(),
        }
    }

    /// A token that is never fenced: a job without checkpoint storage has nothing another
    /// process could take over.
    pub fn unfenced(job: &str) -> Self {
        Self {
            job: job.into(),
            epoch: 0,
            holder: "".into(),
            storage: None,
            lock: None,
            fenced: Arc::default(),
        }
    }

    /// Who holds the job at this epoch (a process description).
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The epoch: grows every time a process takes the job. Sinks put it into the names of
    /// their transactions, so that every transaction tells which process wrote it.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Marks this process as fenced for good because its write of the job record lost to
    /// another process's (`conflict` says which); returns the error every later check gives.
    pub fn overtaken(&self, conflict: &impl std::fmt::Display) -> FencedError {
        let fenced = FencedError::RecordOvertaken {
            job: self.job.to_string(),
            epoch: self.epoch,
            conflict: conflict.to_string(),
        };
        tracing::error!(error = %fenced, "fenced");
        self.fenced.get_or_init(|| fenced).clone()
    }

    /// Succeeds while this process still holds its job — its lock file is the one it locked,
    /// and the primary job record names it — and fails for good once it does not; call it
    /// right before committing anything externally visible.
    pub fn check(&self) -> Result<(), FencedError> {
        if let Some(fenced) = self.fenced.get() {
            return Err(fenced.clone());
        }
        let Some(storage) = &self.storage else {
            return Ok(());
        };
        let lock_lost = self.lock.as_ref().filter(|lock| !lock.still_held());
        let fenced = match (lock_lost, storage.read_primary_job_record()) {
            (Some(lock), _) => FencedError::LockLost {
                job: self.job.to_string(),
                epoch: self.epoch,
                lock: lock.path.display().to_string(),
            },
            (None, Ok(Some(record)))
                if record.epoch == self.epoch && *record.holder == *self.holder =>
            {
                return Ok(())
            }
            (None, Ok(Some(record))) => FencedError::Superseded {
                job: self.job.to_string(),
                epoch: self.epoch,
                current: record.epoch,
                holder: record.holder,
            },
            (None, Ok(None)) => FencedError::RecordGone {
                job: self.job.to_string(),
                epoch: self.epoch,
                storage: storage.describe(),
            },
            (None, Err(e)) => {
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
        let token = FencingToken::new("j", 3, "pid 1", storage.clone(), None);
        assert!(matches!(token.check(), Err(FencedError::RecordGone { .. })));
        let fresh = FencingToken::new("j", 3, "pid 1", storage.clone(), None);
        let mut record = JobRecord::new("j");
        record.epoch = 3;
        record.holder = "pid 1".into();
        storage.write_job_record(&record).unwrap();
        fresh.check().unwrap();
        // Another process with the same epoch (its record was lost): still fenced.
        let twin = FencingToken::new("j", 3, "pid 2", storage.clone(), None);
        assert!(matches!(twin.check(), Err(FencedError::Superseded { .. })));
        record.epoch = 4;
        record.holder = "pid 9".into();
        record.sequence += 1;
        storage.write_job_record(&record).unwrap();
        let err = fresh.clone().check().unwrap_err();
        assert!(err.is_final());
        assert!(
            err.to_string().contains("lost the job to epoch 4 (pid 9)"),
            "{err}"
        );
        record.epoch = 3;
        record.holder = "pid 1".into();
        record.sequence += 1;
        storage.write_job_record(&record).unwrap();
        assert!(fresh.check().is_err(), "once fenced, always fenced");
        FencingToken::unfenced("j").check().unwrap();
    }

    #[test]
    fn an_overtaken_write_fences_for_good() {
        let storage = Arc::new(MemoryCheckpointStorage::new("j"));
        let mut record = JobRecord::new("j");
        record.epoch = 2;
        record.holder = "pid 1".into();
        storage.write_job_record(&record).unwrap();
        let token = FencingToken::new("j", 2, "pid 1", storage.clone(), None);
        token.check().unwrap();
        let err = token.overtaken(&"version 0 exists already");
        assert!(err.is_final());
        assert!(
            err.to_string()
                .contains("lost the job: version 0 exists already"),
            "{err}"
        );
        assert_eq!(token.clone().check(), Err(err), "clones share it");
    }

    #[test]
    fn a_removed_lock_file_fences_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let storage: Arc<dyn CheckpointStorage> = Arc::new(
            crate::checkpoint::storage::FsCheckpointStorage::new(dir.path(), "j").unwrap(),
        );
        let lock = storage.lock_job().unwrap().unwrap();
        let mut record = JobRecord::new("j");
        record.epoch = 1;
        record.holder = "me".into();
        storage.write_job_record(&record).unwrap();
        let token = FencingToken::new(
            "j",
            1,
            "me",
            storage.clone(),
            Some(lock.identity().unwrap()),
        );
        token.check().unwrap();
        std::fs::remove_file(lock.path()).unwrap();
        let err = token.check().unwrap_err();
        assert!(matches!(err, FencedError::LockLost { .. }), "{err}");
        assert!(err.to_string().contains("lost the job"), "{err}");
    }
}
