//! Checkpoint storage: where state files, checkpoint metadata and the job record are written.
//!
//! A checkpoint's files live in one location, `<dir>/<job>/chk-<id>/` on a filesystem (or
//! `savepoint-<id>/` for savepoints). State files are written and fsynced by the tasks'
//! asynchronous snapshot threads; the metadata is written last by the coordinator,
//! atomically (temporary name, fsync, rename, fsync of the directory). With local recovery
//! configured, every file also gets a second copy, and reads take whichever copy verifies.

pub mod conformance;
pub mod fault_injecting;
mod filesystem;
mod memory;
pub(crate) mod record_locations;
mod registry;

use std::path::Path;
use std::sync::Arc;

pub use fault_injecting::{
    register_fault_plan, FaultInjectingStorage, FaultPlan, InjectedFault, StorageFault,
    StorageOperation,
};
pub use filesystem::FsCheckpointStorage;
pub use memory::MemoryCheckpointStorage;
pub use registry::{register_storage_scheme, StorageFactory};

use crate::checkpoint::config::CheckpointStorageConfig;
use crate::checkpoint::job_lock::JobLock;
use crate::checkpoint::job_record::JobRecord;
use crate::checkpoint::metadata::CheckpointMetadata;
use crate::runtime::stream_element::SnapshotType;

/// A storage failure, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// An I/O error.
    #[error("checkpoint storage: {action} `{path}`: {source}")]
    Io {
        /// What was attempted.
        action: &'static str,
        /// The file or directory.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file does not exist.
    #[error("checkpoint storage: `{path}` does not exist{}", copy_note(checked_copy.as_deref()))]
    NotFound {
        /// The file.
        path: String,
        /// Its local-recovery copy, when that was looked for too.
        checked_copy: Option<String>,
    },
    /// A file exists but its content is damaged.
    #[error("checkpoint storage: `{path}` is corrupt: {reason}")]
    Corrupt {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The storage cannot be used as configured (an unknown URL scheme, a bad URL, a
    /// setting it does not support).
    #[error("checkpoint storage `{url}`: {reason}")]
    Unsupported {
        /// The storage's URL or directory.
        url: String,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// A version of the job record could not be written because another process wrote
    /// that version, or a newer one, first: it took the job since this one read the record.
    #[error(
        "job record `{path}`: version {version} cannot be written: {reason}; another process \
         took the job since this one read its record"
    )]
    RecordConflict {
        /// The record's directory.
        path: String,
        /// The version this process tried to write.
        version: u64,
        /// What was found instead.
        reason: String,
    },
    /// Another process holds the job.
    #[error(
        "the job's checkpoint directory is locked by another process ({holder}); lock file \
         `{path}`. One process at a time may run a job: stop that one first (a process that \
         died releases the lock by itself)"
    )]
    Locked {
        /// The lock file.
        path: String,
        /// Who holds it.
        holder: String,
    },
}

fn copy_note(copy: Option<&str>) -> String {
    copy.map(|c| format!(", nor does its local-recovery copy `{c}`"))
        .unwrap_or_default()
}

impl StorageError {
    /// A missing file.
    pub fn not_found(path: impl Into<String>) -> Self {
        StorageError::NotFound {
            path: path.into(),
            checked_copy: None,
        }
    }

    /// Whether the file is missing (rather than unreadable or damaged).
    pub fn is_not_found(&self) -> bool {
        matches!(self, StorageError::NotFound { .. })
    }

    /// Whether a job record write lost the race to another process's (see
    /// [`crate::checkpoint::job_record_versions`]).
    pub fn is_record_conflict(&self) -> bool {
        matches!(self, StorageError::RecordConflict { .. })
    }
}

/// A checkpoint location found in storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCheckpoint {
    /// Checkpoint id.
    pub id: u64,
    /// Its location (directory).
    pub location: String,
    /// Whether its metadata file exists (it may still be corrupt).
    pub has_metadata: bool,
}

/// Checks bytes read back from storage (a checksum); says what is wrong.
pub type Verify<'a> = &'a dyn Fn(&[u8]) -> Result<(), String>;

/// Where checkpoints are kept.
pub trait CheckpointStorage: Send + Sync {
    /// Human-readable description (the directory).
    fn describe(&self) -> String;
    /// The location of snapshot `id` (whether or not it exists yet).
    fn location(&self, id: u64, kind: SnapshotType) -> String;
    /// Creates the location of snapshot `id` and returns it.
    fn init_location(&self, id: u64, kind: SnapshotType) -> Result<String, StorageError>;
    /// Writes a state file durably (and its local copy, if configured).
    fn write_file(&self, location: &str, name: &str, bytes: &[u8]) -> Result<(), StorageError>;
    /// Reads `length` bytes at `offset` of a state file from the first copy whose bytes
    /// `verify` accepts: the primary, then the local-recovery copy.
    fn read_range(
        &self,
        location: &str,
        name: &str,
        offset: u64,
        length: u64,
        verify: Verify<'_>,
    ) -> Result<Vec<u8>, StorageError>;
    /// Writes the metadata atomically: after a crash it is either absent or complete.
    fn write_metadata(
        &self,
        location: &str,
        metadata: &CheckpointMetadata,
    ) -> Result<(), StorageError>;
    /// Reads and verifies the metadata of `location` (the primary, else the local copy).
    fn read_metadata(&self, location: &str) -> Result<CheckpointMetadata, StorageError>;
    /// Checkpoints (not savepoints) of this job, by ascending id.
    fn list_checkpoints(&self) -> Result<Vec<StoredCheckpoint>, StorageError>;
    /// Savepoints in this job's directory, by ascending id.
    fn list_savepoints(&self) -> Result<Vec<StoredCheckpoint>, StorageError>;
    /// The highest id of any checkpoint or savepoint location of this job, including ones
    /// being deleted (0 if none), so that new ids never reuse one.
    fn max_id(&self) -> Result<u64, StorageError>;
    /// Removes a location and everything in it (and its local copy). The location
    /// disappears at once, as a whole: a crash midway leaves no partial checkpoint behind,
    /// only a hidden directory that [`CheckpointStorage::remove_leftovers`] finishes off.
    fn discard(&self, location: &str) -> Result<(), StorageError>;
    /// Takes the job's exclusive lock (`None` where storage is private to this process).
    fn lock_job(&self) -> Result<Option<JobLock>, StorageError>;
    /// Reads the job record's newest version (see [`crate::checkpoint::job_record_versions`]):
    /// the primary's, else the same version's local copy; the copy's newest only when the
    /// primary has none. `None` when there is none; an error when the newest exists but no
    /// copy of it is readable — never an older version, which would be stale.
    fn read_job_record(&self) -> Result<Option<JobRecord>, StorageError>;
    /// Reads the primary job record only, never its local copy: the one authority on which
    /// process holds the job (a copy on another disk may lag behind it).
    fn read_primary_job_record(&self) -> Result<Option<JobRecord>, StorageError> {
        self.read_job_record()
    }
    /// The newest version of the job record in primary storage, readable or not (0: none):
    /// a process that cannot read the record still writes above it.
    fn job_record_version(&self) -> Result<u64, StorageError>;
    /// Writes version `record.sequence` of the job record — only if neither it nor a newer
    /// version exists (compare-and-swap; [`StorageError::RecordConflict`] otherwise) — and
    /// its local copy, then deletes the older versions.
    fn write_job_record(&self, record: &JobRecord) -> Result<(), StorageError>;
    /// The local-recovery copy this storage keeps, if any (its job directory), as the job
    /// record names it.
    fn local_copy(&self) -> Option<String> {
        None
    }
    /// Removes the job record from local-recovery copy `copy` (a job directory another run
    /// kept a copy in), which this storage does not keep up to date: left there, it could be
    /// read as the job's record once the primary is lost.
    fn remove_stale_copy(&self, _copy: &str) -> Result<(), StorageError> {
        Ok(())
    }
    /// Removes what crashed runs left behind: locations being deleted, and checkpoint or
    /// savepoint locations without metadata (never completed) unless `keep` names them.
    /// Returns what was removed.
    fn remove_leftovers(&self, keep: &[String]) -> Result<Vec<String>, StorageError>;
    /// The job's shared location (`<job>/shared`), created if missing: where incremental
    /// checkpoints keep the files that several of them refer to.
    fn shared_location(&self) -> Result<String, StorageError>;
    /// The shared location beside checkpoint location `location` (which may be another
    /// job's, when a job starts from another's retained checkpoint).
    fn shared_location_of(&self, location: &str) -> String;
    /// Copies the local file `source` durably into `location` as `name` (and its local copy).
    fn copy_file_in(&self, location: &str, name: &str, source: &Path) -> Result<(), StorageError> {
        let bytes = std::fs::read(source).map_err(|e| StorageError::Io {
            action: "read",
            path: source.display().to_string(),
            source: e,
        })?;
        self.write_file(location, name, &bytes)
    }
    /// Deletes file `name` of `location` (and its local copy); a missing file is no error.
    fn delete_file(&self, location: &str, name: &str) -> Result<(), StorageError>;
    /// The names of the files in `location` (none if it does not exist).
    fn list_files(&self, location: &str) -> Result<Vec<String>, StorageError>;
}

/// The name of the job's shared location under its directory.
pub const SHARED_DIR: &str = "shared";

/// Creates the storage configured for `job_name`, with a local-recovery copy under
/// `local_copy` if given.
pub fn create_storage(
    config: &CheckpointStorageConfig,
    local_copy: Option<&Path>,
    job_name: &str,
) -> Result<Arc<dyn CheckpointStorage>, StorageError> {
    Ok(match config {
        CheckpointStorageConfig::Memory => Arc::new(MemoryCheckpointStorage::new(job_name)),
        CheckpointStorageConfig::FileSystem(dir) => {
            let mut storage = FsCheckpointStorage::new(dir, job_name)?;
            if let Some(copy) = local_copy {
                storage = storage.with_local_copy(copy)?;
            }
            Arc::new(storage)
        }
        CheckpointStorageConfig::Url(url) => registry::create(url, local_copy, job_name)?,
    })
}

/// Makes a job name safe as a directory name.
pub fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.chars().all(|c| c == '.') {
        "job".into()
    } else {
        s
    }
}

/// The name of snapshot `id`'s location under the job's directory: `chk-<id>` or
/// `savepoint-<id>`.
pub fn location_name(id: u64, kind: SnapshotType) -> String {
    match kind {
        SnapshotType::Checkpoint => format!("chk-{id}"),
        SnapshotType::Savepoint => format!("savepoint-{id}"),
    }
}

/// The id of a checkpoint location's name (`chk-<id>`).
pub fn parse_checkpoint_dir(name: &str) -> Option<u64> {
    name.strip_prefix("chk-")?.parse().ok()
}

/// The id of a savepoint location's name (`savepoint-<id>`).
pub fn parse_savepoint_dir(name: &str) -> Option<u64> {
    name.strip_prefix("savepoint-")?.parse().ok()
}

/// Prefix of a location being deleted.
pub const DISCARD_PREFIX: &str = ".discard-";

/// The id of a checkpoint or savepoint location, also while it is being deleted.
pub fn parse_any_location(name: &str) -> Option<u64> {
    let name = name.strip_prefix(DISCARD_PREFIX).unwrap_or(name);
    parse_checkpoint_dir(name).or_else(|| parse_savepoint_dir(name))
}

/// The error for a file that could not be encoded (written as corrupt, naming it).
fn encoding_failed(path: impl Into<String>) -> impl FnOnce(postcard::Error) -> StorageError {
    let path = path.into();
    move |e| StorageError::Corrupt {
        path,
        reason: format!("cannot encode: {e}"),
    }
}

/// Decodes and verifies metadata read from `path`.
pub fn decode_metadata(path: String, bytes: &[u8]) -> Result<CheckpointMetadata, StorageError> {
    CheckpointMetadata::decode(bytes).map_err(|reason| StorageError::Corrupt { path, reason })
}

/// Decodes and verifies a job record read from `path`.
pub fn decode_record(path: String, bytes: &[u8]) -> Result<JobRecord, StorageError> {
    JobRecord::decode(bytes).map_err(|reason| StorageError::Corrupt { path, reason })
}

/// A copy to read when the primary is unusable: its path, and how to read it.
type CopyReader<'a, T> = (String, &'a dyn Fn() -> Result<T, StorageError>);

/// The outcome of reading something that has a primary and maybe a copy: the first good one,
/// or an error that says what was wrong with each.
fn first_good<T>(
    primary: Result<T, StorageError>,
    copy: Option<CopyReader<'_, T>>,
) -> Result<T, StorageError> {
    let primary_error = match primary {
        Ok(value) => return Ok(value),
        Err(e) => e,
    };
    let Some((copy_path, read_copy)) = copy else {
        return Err(primary_error);
    };
    match read_copy() {
        Ok(value) => {
            tracing::warn!(error = %primary_error, copy = %copy_path,
                "checkpoint file unusable; using its local-recovery copy");
            Ok(value)
        }
        Err(copy_error) => Err(combine(primary_error, &copy_path, copy_error)),
    }
}

/// One error for a primary and its copy, both unusable. An I/O error on either stays an I/O
/// error: it may pass, and a reader retries it, whereas a corrupt or missing file is final
/// and makes recovery fall back to an older checkpoint.
fn combine(primary: StorageError, copy_path: &str, copy: StorageError) -> StorageError {
    if matches!(primary, StorageError::Io { .. }) {
        tracing::warn!(error = %primary, copy = %copy_path, copy_error = %copy,
            "checkpoint file unreadable, and so is its local-recovery copy");
        return primary;
    }
    if matches!(copy, StorageError::Io { .. }) {
        tracing::warn!(error = %primary, copy = %copy_path, copy_error = %copy,
            "checkpoint file unusable, and its local-recovery copy unreadable");
        return copy;
    }
    let copy_problem = match &copy {
        StorageError::NotFound { .. } => "missing".to_string(),
        StorageError::Corrupt { reason, .. } => reason.clone(),
        other => other.to_string(),
    };
    match primary {
        StorageError::NotFound { path, .. } if copy.is_not_found() => StorageError::NotFound {
            path,
            checked_copy: Some(copy_path.to_string()),
        },
        StorageError::NotFound { path, .. } => StorageError::Corrupt {
            path,
            reason: format!("missing; its local-recovery copy `{copy_path}`: {copy_problem}"),
        },
        StorageError::Corrupt { path, reason } => StorageError::Corrupt {
            path,
            reason: format!("{reason}; its local-recovery copy `{copy_path}`: {copy_problem}"),
        },
        other => StorageError::Corrupt {
            path: match &other {
                StorageError::Io { path, .. } | StorageError::Locked { path, .. } => path.clone(),
                _ => String::new(),
            },
            reason: format!("{other}; its local-recovery copy `{copy_path}`: {copy_problem}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(path: &str) -> StorageError {
        StorageError::Io {
            action: "reading",
            path: path.into(),
            source: std::io::Error::other("injected"),
        }
    }

    fn corrupt(path: &str) -> StorageError {
        StorageError::Corrupt {
            path: path.into(),
            reason: "bad checksum".into(),
        }
    }

    fn missing(path: &str) -> StorageError {
        StorageError::NotFound {
            path: path.into(),
            checked_copy: None,
        }
    }

    #[test]
    fn an_io_error_on_either_copy_stays_retryable() {
        for (primary, copy) in [
            (io("p"), missing("c")),
            (io("p"), corrupt("c")),
            (missing("p"), io("c")),
            (corrupt("p"), io("c")),
        ] {
            let combined = combine(primary, "c", copy);
            assert!(
                matches!(combined, StorageError::Io { .. }),
                "{combined} should be an I/O error"
            );
        }
    }

    #[test]
    fn a_lost_primary_and_copy_are_final_and_named() {
        let both_missing = combine(missing("p"), "c", missing("c"));
        assert!(both_missing.is_not_found(), "{both_missing}");
        assert!(both_missing.to_string().contains("`c`"), "{both_missing}");
        let damaged = combine(corrupt("p"), "c", missing("c"));
        assert!(
            matches!(&damaged, StorageError::Corrupt { reason, .. }
                if reason.contains("bad checksum") && reason.contains("missing")),
            "{damaged}"
        );
        let read: Result<u8, StorageError> =
            first_good(Err(corrupt("p")), Some(("c".into(), &|| Ok(7))));
        assert_eq!(read.ok(), Some(7));
    }
}
