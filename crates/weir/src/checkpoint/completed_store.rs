//! The job manager's durable view of a job (Flink's `CompletedCheckpointStore` and
//! `JobResultStore` in one): it holds the job's lock, owns its epoch, and keeps the job record
//! — which completed checkpoints sinks may have committed, and how the job ended — in step
//! with the checkpoints in storage, in the order that keeps every crash recoverable:
//!
//! 1. a completed checkpoint enters the record before its completion is notified;
//! 2. the record stops naming a checkpoint before its files are deleted;
//! 3. a terminal status is recorded before the checkpoints it makes unnecessary are deleted.
//!
//! It also keeps the [`SharedStateRegistry`] of the files incremental checkpoints share: a
//! shared file is deleted once no retained checkpoint refers to it, after the record stopped
//! naming the last one that did; a checkpoint that refers to a file already released never
//! completes; and at the start of a tenure, files of the job's shared location that no
//! retained checkpoint names (uploads of checkpoints that never completed) are removed.
//!
//! Every write first checks the fencing token, and is itself a compare-and-swap (a new
//! version of the record, created only if no process wrote it or a newer one first: see
//! [`crate::checkpoint::job_record_versions`]), so a process that lost its job writes nothing
//! — also when it stalled between the check and the write. A write that loses fences the
//! process for good.

use std::sync::Arc;

use crate::checkpoint::fencing::FencingToken;
use crate::checkpoint::job_lock::{holder_description, JobLock};
use crate::checkpoint::job_record::{JobRecord, RecordedCheckpoint, RecordedStatus};
use crate::checkpoint::job_record_versions::same_writer;
use crate::checkpoint::metadata::CheckpointMetadata;
use crate::checkpoint::recovery::PreviousRecord;
use crate::checkpoint::reset::ResetOutcome;
use crate::checkpoint::shared_state_registry::SharedStateRegistry;
use crate::checkpoint::storage::{CheckpointStorage, StorageError};
use crate::error::WeirError;
use crate::runtime::stream_element::SnapshotType;

/// The durable state of one job, held by its job manager.
pub struct CompletedCheckpointStore {
    storage: Arc<dyn CheckpointStorage>,
    /// Held for the store's life; `None` for storage private to this process.
    _lock: Option<JobLock>,
    record: JobRecord,
    fencing: FencingToken,
    /// The shared files the retained checkpoints refer to.
    shared: SharedStateRegistry,
    /// The local-recovery copy the previous record was written with.
    previous_copy: Option<String>,
    /// The newest version of the record this process knows to be its own (or the one it read
    /// when it took the job): the next write is the version right after it.
    written: u64,
    /// A write failed without saying whether its version was created: the next write first
    /// reads the newest version, which must be this process's own.
    resync: bool,
}

impl CompletedCheckpointStore {
    /// Takes the job: locks its directory (failing, naming the holder, if another process
    /// has it), reads its previous record, and picks this process's epoch, one above the
    /// previous holder's. Nothing is written until [`CompletedCheckpointStore::begin`].
    pub fn open(
        storage: Arc<dyn CheckpointStorage>,
        job_name: &str,
    ) -> Result<(Self, PreviousRecord), WeirError> {
        let mut lock = storage.lock_job()?;
        let previous = match storage.read_job_record() {
            Ok(Some(record)) => PreviousRecord::Found(record),
            Ok(None) => PreviousRecord::None,
            Err(e) => PreviousRecord::Unreadable(e.to_string()),
        };
        let (previous_epoch, previous_sequence, max_id) = match &previous {
            PreviousRecord::Found(r) => (r.epoch, r.sequence, r.max_id),
            _ => (0, 0, 0),
        };
        // Above every version in storage, readable or not: the first write of this tenure
        // creates the next one, and fails if another process created it first.
        let sequence = previous_sequence.max(storage.job_record_version()?);
        let previous_copy = match &previous {
            PreviousRecord::Found(r) => r.local_copy.clone(),
            _ => None,
        };
        // Above every epoch on record — the lock file names the last holder's even when the
        // record is gone — so that epochs never repeat.
        let epoch =
            previous_epoch.max(lock.as_ref().and_then(JobLock::previous_epoch).unwrap_or(0)) + 1;
        let holder = holder_description(epoch);
        let mut identity = None;
        if let Some(lock) = lock.as_mut() {
            lock.describe_holder(&holder)?;
            identity = Some(lock.identity()?);
        }
        let mut record = JobRecord::new(job_name);
        record.epoch = epoch;
        record.sequence = sequence;
        record.max_id = max_id.max(storage.max_id()?);
        record.local_copy = storage.local_copy();
        let fencing = FencingToken::new(job_name, epoch, &holder, storage.clone(), identity);
        record.holder = holder;
        Ok((
            Self {
                storage,
                _lock: lock,
                record,
                fencing,
                shared: SharedStateRegistry::new(),
                previous_copy,
                written: sequence,
                resync: false,
            },
            previous,
        ))
    }

    /// Writes the record as the version right after the newest this process knows to be its
    /// own. A write another process's version overtook fences this process for good.
    fn persist(&mut self) -> Result<(), WeirError> {
        if self.resync {
            self.resync_version()?;
        }
        self.record.sequence = self.written + 1;
        match self.storage.write_job_record(&self.record) {
            Ok(()) => {
                self.written = self.record.sequence;
                Ok(())
            }
            Err(e) if e.is_record_conflict() => Err(self.fencing.overtaken(&e).into()),
            Err(e) => {
                // Its version may exist or not: skipping it would leave a gap another
                // process could fill, under this process's next version.
                self.resync = true;
                Err(e.into())
            }
        }
    }

    /// After a write whose outcome is unknown: the newest version must be this process's own
    /// (the failed write's, or the one before it); the next write follows it.
    fn resync_version(&mut self) -> Result<(), WeirError> {
        let newest = self.storage.job_record_version()?;
        if newest != self.written {
            let found = self.storage.read_primary_job_record()?;
            let own = found.as_ref().is_some_and(|r| {
                r.sequence == newest && newest > self.written && same_writer(&self.record, r)
            });
            if !own {
                let conflict = StorageError::RecordConflict {
                    path: self.storage.describe(),
                    version: self.written + 1,
                    reason: format!(
                        "after a failed write of version {}, version {newest} is another \
                         process's",
                        self.written + 1
                    ),
                };
                return Err(self.fencing.overtaken(&conflict).into());
            }
        }
        self.written = newest;
        self.resync = false;
        Ok(())
    }

    /// The first write of this tenure, which takes the job over from the previous holder
    /// (no fencing check: the record still names that holder). A local-recovery copy the
    /// previous record was written with, and this run does not keep, follows the job no
    /// more: its record is removed, so that it can never be read as the job's.
    fn take_over(&mut self) -> Result<(), WeirError> {
        self.persist()?;
        if let Some(stale) = self.previous_copy.take() {
            if Some(&stale) != self.record.local_copy.as_ref() {
                if let Err(e) = self.storage.remove_stale_copy(&stale) {
                    tracing::warn!(copy = %stale, error = %e,
                        "cannot remove the job record of a local-recovery copy this run does not keep");
                }
            }
        }
        Ok(())
    }

    /// Starts job `job_name` over on purpose (`weir reset`, Flink's way being a new job):
    /// takes its lock where the storage has one — refused while another process, running or
    /// stalled, holds it; on object storage a JobManager still running the job is fenced
    /// instead — and a new epoch, records the `Reset` status (a compare-and-swap like every write: a stale
    /// process that wakes later cannot write over it), runs `after_record` with the new
    /// epoch while it still holds the lock (to move the job's output aside), then deletes
    /// the job's checkpoints. Savepoints stay. The record itself stays too, so that epochs,
    /// record versions and checkpoint ids never restart. A crash at any point leaves either
    /// the old job, or a reset one that a fresh start may take. A later start from empty
    /// state is then allowed; sinks that find their own committed output still refuse it.
    pub fn reset(
        storage: Arc<dyn CheckpointStorage>,
        job_name: &str,
        after_record: impl FnOnce(u64) -> Result<(), WeirError>,
    ) -> Result<ResetOutcome, WeirError> {
        let (mut store, previous) = Self::open(storage, job_name)?;
        let previous = match previous {
            PreviousRecord::Found(record) => Some(record.describe()),
            PreviousRecord::Unreadable(problem) => {
                Some(format!("an unreadable job record ({problem})"))
            }
            PreviousRecord::None => None,
        };
        store.record.status = RecordedStatus::Reset;
        store.record.completed.clear();
        store.record.notified_through = 0;
        store.take_over()?;
        after_record(store.record.epoch)?;
        let removed_checkpoints = store
            .storage
            .list_checkpoints()?
            .iter()
            .map(|c| c.id)
            .collect();
        store.delete_checkpoints();
        store.remove_leftovers();
        let savepoints = store
            .storage
            .list_savepoints()?
            .into_iter()
            .map(|s| s.location)
            .collect();
        Ok(ResetOutcome {
            storage: store.storage.describe(),
            epoch: store.record.epoch,
            previous,
            removed_checkpoints,
            savepoints,
        })
    }

    /// Starts this process's tenure: writes the record with the new epoch (which fences any
    /// older holder), the restore points it continues from, and how much output sinks may
    /// already hold (`notified_through`).
    pub fn begin(
        &mut self,
        completed: Vec<RecordedCheckpoint>,
        notified_through: u64,
    ) -> Result<(), WeirError> {
        self.record.completed = completed;
        self.record.notified_through = notified_through;
        self.record.max_id = self.record.max_id.max(
            self.record
                .completed
                .iter()
                .map(|c| c.id)
                .max()
                .unwrap_or(0),
        );
        self.record.status = RecordedStatus::Running;
        self.take_over()?;
        self.remove_leftovers();
        self.rebuild_shared_registry();
        Ok(())
    }

    /// The job's own shared location.
    fn own_shared_location(&self) -> String {
        self.storage
            .shared_location_of(&self.storage.location(0, SnapshotType::Checkpoint))
    }

    /// Whether the shared files of the checkpoint at `location` are this job's to manage
    /// (not those of another job whose retained checkpoint this one started from).
    fn owns_shared_files_of(&self, location: &str) -> bool {
        self.storage.shared_location_of(location) == self.own_shared_location()
    }

    /// Registers the shared files of every recorded checkpoint, then removes the files of
    /// the shared location that none of them names — unless a recorded checkpoint could not
    /// be read, when what it refers to is unknown and nothing is removed.
    fn rebuild_shared_registry(&mut self) {
        let mut registry = SharedStateRegistry::new();
        let mut complete = true;
        for checkpoint in &self.record.completed {
            if !self.owns_shared_files_of(&checkpoint.location) {
                continue;
            }
            match self.storage.read_metadata(&checkpoint.location) {
                Ok(metadata) => registry.register(
                    checkpoint.id,
                    metadata.shared_files().map(|f| f.stored_name.as_str()),
                ),
                Err(e) => {
                    tracing::warn!(checkpoint = checkpoint.id, error = %e,
                        "cannot read a retained checkpoint: no shared state file is removed");
                    complete = false;
                }
            }
        }
        self.shared = registry;
        if complete {
            self.remove_unreferenced_shared_files();
        }
    }

    /// Deletes the files of the shared location that no retained checkpoint refers to.
    fn remove_unreferenced_shared_files(&self) {
        let shared = self.own_shared_location();
        let present = match self.storage.list_files(&shared) {
            Ok(present) => present,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the shared state files");
                return;
            }
        };
        let leftovers = self.shared.unreferenced(&present);
        if !leftovers.is_empty() {
            tracing::info!(
                files = leftovers.len(),
                "removing shared state files no retained checkpoint refers to"
            );
        }
        self.delete_shared(leftovers);
    }

    /// Deletes shared files (best effort: a leftover goes at the next start).
    fn delete_shared<'a>(&self, files: impl IntoIterator<Item = &'a str>) {
        if self.fencing.check().is_err() {
            return;
        }
        let shared = self.own_shared_location();
        for file in files {
            if let Err(e) = self.storage.delete_file(&shared, file) {
                tracing::warn!(%file, error = %e, "cannot remove a shared state file");
            }
        }
    }

    /// Checks that every shared file `metadata` refers to without having uploaded it is
    /// still referred to by a retained checkpoint; call it before writing the metadata.
    pub fn check_shared_references(&self, metadata: &CheckpointMetadata) -> Result<(), WeirError> {
        let missing = self.shared.missing_references(metadata);
        match missing.first() {
            None => Ok(()),
            Some(file) => Err(WeirError::InvalidRequest(format!(
                "checkpoint {} refers to {} shared state file(s) that no retained checkpoint \
                 holds any more (`{}`, uploaded by checkpoint {}); it cannot complete, and \
                 the next checkpoint uploads them again",
                metadata.checkpoint_id,
                missing.len(),
                file.stored_name,
                file.uploaded_in
            ))),
        }
    }

    /// Deletes the shared files a checkpoint that will not complete uploaded (those no
    /// retained checkpoint refers to).
    pub fn discard_shared_uploads(&self, files: &[String]) {
        self.delete_shared(
            files
                .iter()
                .map(String::as_str)
                .filter(|f| !self.shared.is_registered(f)),
        );
    }

    /// The shared files the retained checkpoints refer to.
    pub fn shared_registry(&self) -> &SharedStateRegistry {
        &self.shared
    }

    /// Takes a job that finished already: records this process as its holder (keeping the
    /// finished status) and deletes what a crash during its clean-up left behind.
    pub fn clean_up_finished(&mut self) -> Result<(), WeirError> {
        self.record.status = RecordedStatus::Finished {
            final_checkpoint: None,
        };
        if let Ok(Some(previous)) = self.storage.read_job_record() {
            self.record.status = previous.status;
            self.record.notified_through = previous.notified_through;
        }
        self.record.completed.clear();
        self.take_over()?;
        self.delete_checkpoints();
        self.remove_leftovers();
        Ok(())
    }

    /// Removes leftovers of crashed runs: half-deleted and never-completed locations (best
    /// effort). Whatever the record names is kept, even without metadata: its local copy
    /// may have it.
    fn remove_leftovers(&self) {
        let keep: Vec<String> = self
            .record
            .completed
            .iter()
            .map(|c| c.location.clone())
            .collect();
        match self.storage.remove_leftovers(&keep) {
            Ok(removed) => {
                for location in removed {
                    tracing::info!(%location, "removed what a crashed run left behind");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot remove what a crashed run left behind"),
        }
    }

    /// Deletes every checkpoint of this job in storage — this run's and earlier runs' — once
    /// the recorded status covers their work.
    fn delete_checkpoints(&mut self) {
        match self.storage.list_checkpoints() {
            Ok(stored) => {
                for checkpoint in stored {
                    self.discard(&checkpoint.location);
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot list checkpoints to remove them"),
        }
        // Savepoints are self-contained: with the checkpoints gone, no shared file is needed.
        self.shared = SharedStateRegistry::new();
        self.remove_unreferenced_shared_files();
    }

    /// The storage.
    pub fn storage(&self) -> &Arc<dyn CheckpointStorage> {
        &self.storage
    }

    /// The fencing token of this process.
    pub fn fencing(&self) -> &FencingToken {
        &self.fencing
    }

    /// The record as last written.
    pub fn record(&self) -> &JobRecord {
        &self.record
    }

    /// Restore points, newest first.
    pub fn candidates(&self) -> Vec<RecordedCheckpoint> {
        self.record.completed.iter().rev().cloned().collect()
    }

    /// The lowest id the next checkpoint may take.
    pub fn next_id(&self) -> u64 {
        self.record.max_id + 1
    }

    fn write(&mut self) -> Result<(), WeirError> {
        self.fencing.check()?;
        self.persist()
    }

    /// Records completed checkpoint `metadata` at `location` as the newest restore point —
    /// call it after its metadata is durable and before any sink hears of it — and deletes
    /// the checkpoints the record no longer names (beyond `retained`), with the shared files
    /// only they referred to. On an error the record on disk may name the checkpoint or not:
    /// its files must stay.
    pub fn add_completed(
        &mut self,
        metadata: &CheckpointMetadata,
        location: &str,
        retained: u32,
    ) -> Result<(), WeirError> {
        let id = metadata.checkpoint_id;
        // Registered first, so that nothing it refers to is released below — and kept on
        // an error, which may have recorded it.
        if self.owns_shared_files_of(location) {
            self.shared
                .register(id, metadata.shared_files().map(|f| f.stored_name.as_str()));
        }
        let before = self.record.clone();
        let dropped = self.record.add_completed(
            RecordedCheckpoint::new(id, metadata.kind, location.to_string())
                .with_epoch(metadata.epoch),
            retained as usize,
        );
        if let Err(e) = self.write() {
            self.record = before;
            return Err(e);
        }
        for old in dropped {
            self.discard(&old.location);
            let released = self.shared.release(old.id);
            self.delete_shared(released.iter().map(String::as_str));
        }
        Ok(())
    }

    /// Records how the job ended — durably, before anything is deleted — then deletes the
    /// checkpoints that status makes unnecessary: all of them when the job finished, was
    /// stopped with a savepoint, or was cancelled without retention.
    pub fn record_end(&mut self, status: RecordedStatus) -> Result<(), WeirError> {
        let delete_checkpoints = match &status {
            RecordedStatus::Finished { .. } => {
                self.record.completed.clear();
                true
            }
            RecordedStatus::Stopped {
                savepoint,
                location,
            } => {
                // The savepoint is the one restore point, whatever completed around it.
                self.record.completed = vec![RecordedCheckpoint::new(
                    *savepoint,
                    SnapshotType::Savepoint,
                    location.clone(),
                )];
                true
            }
            RecordedStatus::Cancelled {
                checkpoints_retained,
            } => {
                if !checkpoints_retained {
                    self.record.completed.clear();
                }
                !checkpoints_retained
            }
            RecordedStatus::Failed | RecordedStatus::Running | RecordedStatus::Reset => false,
        };
        self.record.status = status;
        self.write()?;
        if delete_checkpoints {
            self.delete_checkpoints();
        }
        Ok(())
    }

    /// Deletes a location the record does not name (best effort: a leftover is removed at
    /// the next start). Not once this process lost the job: it may be the new holder's now.
    pub fn discard(&self, location: &str) {
        if self.fencing.check().is_err() {
            return;
        }
        if let Err(e) = self.storage.discard(location) {
            tracing::warn!(%location, error = %e, "cannot remove checkpoint files");
        }
    }

    /// Deletes the location of checkpoint `id`, which will not complete. Its id must never
    /// be taken again, not even by a later process — a sink may have named a transaction
    /// after it — and once the location is gone nothing in storage shows that it was used;
    /// so the record keeps the id first. If that write fails the location stays, and the
    /// next start, which counts the ids of all locations, sees it.
    pub fn discard_unfinished(&mut self, id: u64, location: &str) {
        if id > self.record.max_id {
            self.record.max_id = id;
            if let Err(e) = self.write() {
                tracing::warn!(checkpoint = id, %location, error = %e,
                    "cannot record the id of a failed checkpoint; its files stay until the next start");
                return;
            }
        }
        self.discard(location);
    }

    /// Reads the metadata of a restore point.
    pub fn read_metadata(
        &self,
        location: &str,
    ) -> Result<crate::checkpoint::metadata::CheckpointMetadata, StorageError> {
        self.storage.read_metadata(location)
    }
}

#[cfg(test)]
mod tests;
