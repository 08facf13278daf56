//! Checkpoint storage: where state files and metadata are written.
//!
//! A checkpoint's files live in one location, `<dir>/<job>/chk-<id>/` on a filesystem (or
//! `savepoint-<id>/` for savepoints). State files are written and fsynced by the tasks'
//! asynchronous snapshot threads; the metadata is written last by the coordinator,
//! atomically (temporary name, fsync, rename, fsync of the directory).

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::checkpoint::config::CheckpointStorageConfig;
use crate::checkpoint::metadata::{CheckpointMetadata, METADATA_FILE};
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
    #[error("checkpoint storage: `{path}` does not exist")]
    NotFound {
        /// The file.
        path: String,
    },
    /// A file exists but its content is damaged.
    #[error("checkpoint storage: `{path}` is corrupt: {reason}")]
    Corrupt {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
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

/// Where checkpoints are kept.
pub trait CheckpointStorage: Send + Sync {
    /// Human-readable description (the directory).
    fn describe(&self) -> String;
    /// The location of snapshot `id` (whether or not it exists yet).
    fn location(&self, id: u64, kind: SnapshotType) -> String;
    /// Creates the location of snapshot `id` and returns it.
    fn init_location(&self, id: u64, kind: SnapshotType) -> Result<String, StorageError>;
    /// Writes a state file durably; returns its name relative to `location`.
    fn write_file(&self, location: &str, name: &str, bytes: &[u8]) -> Result<(), StorageError>;
    /// Reads `length` bytes at `offset` of a state file.
    fn read_range(
        &self,
        location: &str,
        name: &str,
        offset: u64,
        length: u64,
    ) -> Result<Vec<u8>, StorageError>;
    /// Writes the metadata atomically: after a crash it is either absent or complete.
    fn write_metadata(
        &self,
        location: &str,
        metadata: &CheckpointMetadata,
    ) -> Result<(), StorageError>;
    /// Reads and verifies the metadata of `location`.
    fn read_metadata(&self, location: &str) -> Result<CheckpointMetadata, StorageError>;
    /// Checkpoints (not savepoints) of this job, by ascending id.
    fn list_checkpoints(&self) -> Result<Vec<StoredCheckpoint>, StorageError>;
    /// The highest id of any checkpoint or savepoint location of this job (0 if none), so
    /// that new ids never reuse one.
    fn max_id(&self) -> Result<u64, StorageError>;
    /// Removes a location and everything in it.
    fn discard(&self, location: &str) -> Result<(), StorageError>;
    /// Records (`true`) or clears (`false`) that the job ran to its end, so that resuming it
    /// does not run it again.
    fn set_finished(&self, finished: bool) -> Result<(), StorageError>;
    /// Whether the job ran to its end.
    fn is_finished(&self) -> Result<bool, StorageError>;
}

/// Name of the marker a finished job leaves in its directory.
const FINISHED_MARKER: &str = "_finished";

/// Creates the storage configured for `job_name`.
pub fn create_storage(
    config: &CheckpointStorageConfig,
    job_name: &str,
) -> Result<Arc<dyn CheckpointStorage>, StorageError> {
    Ok(match config {
        CheckpointStorageConfig::Memory => Arc::new(MemoryCheckpointStorage::new(job_name)),
        CheckpointStorageConfig::FileSystem(dir) => {
            Arc::new(FsCheckpointStorage::new(dir, job_name)?)
        }
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

fn location_name(id: u64, kind: SnapshotType) -> String {
    match kind {
        SnapshotType::Checkpoint => format!("chk-{id}"),
        SnapshotType::Savepoint => format!("savepoint-{id}"),
    }
}

fn parse_checkpoint_dir(name: &str) -> Option<u64> {
    name.strip_prefix("chk-")?.parse().ok()
}

fn parse_any_location(name: &str) -> Option<u64> {
    parse_checkpoint_dir(name).or_else(|| name.strip_prefix("savepoint-")?.parse().ok())
}

fn decode_metadata(path: String, bytes: &[u8]) -> Result<CheckpointMetadata, StorageError> {
    CheckpointMetadata::decode(bytes).map_err(|reason| StorageError::Corrupt { path, reason })
}

/// Checkpoints in a directory: `<dir>/<job>/chk-<id>/`.
#[derive(Debug, Clone)]
pub struct FsCheckpointStorage {
    job_dir: PathBuf,
}

fn io<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> StorageError + 'a {
    move |source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            StorageError::NotFound {
                path: path.display().to_string(),
            }
        } else {
            StorageError::Io {
                action,
                path: path.display().to_string(),
                source,
            }
        }
    }
}

fn fsync_dir(dir: &Path) -> Result<(), StorageError> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("fsync directory", dir))
}

impl FsCheckpointStorage {
    /// Storage under `dir` for `job_name`; creates the job directory.
    pub fn new(dir: &Path, job_name: &str) -> Result<Self, StorageError> {
        let job_dir = dir.join(sanitize(job_name));
        fs::create_dir_all(&job_dir).map_err(io("create directory", &job_dir))?;
        Ok(Self { job_dir })
    }

    /// The job's directory.
    pub fn job_dir(&self) -> &Path {
        &self.job_dir
    }
}

impl CheckpointStorage for FsCheckpointStorage {
    fn describe(&self) -> String {
        self.job_dir.display().to_string()
    }

    fn location(&self, id: u64, kind: SnapshotType) -> String {
        self.job_dir
            .join(location_name(id, kind))
            .display()
            .to_string()
    }

    fn init_location(&self, id: u64, kind: SnapshotType) -> Result<String, StorageError> {
        let dir = self.job_dir.join(location_name(id, kind));
        // `create_dir`, not `create_dir_all`: an existing location is never reused.
        fs::create_dir(&dir).map_err(io("create directory", &dir))?;
        Ok(dir.display().to_string())
    }

    fn write_file(&self, location: &str, name: &str, bytes: &[u8]) -> Result<(), StorageError> {
        let path = Path::new(location).join(name);
        let mut file = fs::File::create(&path).map_err(io("create", &path))?;
        file.write_all(bytes).map_err(io("write", &path))?;
        file.sync_all().map_err(io("fsync", &path))
    }

    fn read_range(
        &self,
        location: &str,
        name: &str,
        offset: u64,
        length: u64,
    ) -> Result<Vec<u8>, StorageError> {
        let path = Path::new(location).join(name);
        let mut file = fs::File::open(&path).map_err(io("open", &path))?;
        file.seek(SeekFrom::Start(offset))
            .map_err(io("seek", &path))?;
        let mut buf = Vec::with_capacity(length as usize);
        Read::by_ref(&mut file)
            .take(length)
            .read_to_end(&mut buf)
            .map_err(io("read", &path))?;
        if buf.len() as u64 != length {
            return Err(StorageError::Corrupt {
                path: path.display().to_string(),
                reason: format!(
                    "truncated: wanted {length} bytes at offset {offset}, found {}",
                    buf.len()
                ),
            });
        }
        Ok(buf)
    }

    fn write_metadata(
        &self,
        location: &str,
        metadata: &CheckpointMetadata,
    ) -> Result<(), StorageError> {
        let dir = Path::new(location);
        let final_path = dir.join(METADATA_FILE);
        let temp = dir.join(format!("{METADATA_FILE}.inprogress"));
        let bytes = metadata.encode().map_err(|e| StorageError::Corrupt {
            path: final_path.display().to_string(),
            reason: format!("cannot encode: {e}"),
        })?;
        let mut file = fs::File::create(&temp).map_err(io("create", &temp))?;
        file.write_all(&bytes).map_err(io("write", &temp))?;
        file.sync_all().map_err(io("fsync", &temp))?;
        fs::rename(&temp, &final_path).map_err(io("rename", &temp))?;
        fsync_dir(dir)
    }

    fn read_metadata(&self, location: &str) -> Result<CheckpointMetadata, StorageError> {
        let path = Path::new(location).join(METADATA_FILE);
        let bytes = fs::read(&path).map_err(io("read", &path))?;
        decode_metadata(path.display().to_string(), &bytes)
    }

    fn list_checkpoints(&self) -> Result<Vec<StoredCheckpoint>, StorageError> {
        let mut found = Vec::new();
        let entries = fs::read_dir(&self.job_dir).map_err(io("list", &self.job_dir))?;
        for entry in entries {
            let entry = entry.map_err(io("list", &self.job_dir))?;
            let name = entry.file_name().to_string_lossy().to_string();
            if let Some(id) = parse_checkpoint_dir(&name) {
                let dir = entry.path();
                found.push(StoredCheckpoint {
                    id,
                    has_metadata: dir.join(METADATA_FILE).exists(),
                    location: dir.display().to_string(),
                });
            }
        }
        found.sort_by_key(|c| c.id);
        Ok(found)
    }

    fn max_id(&self) -> Result<u64, StorageError> {
        let mut max = 0;
        for entry in fs::read_dir(&self.job_dir).map_err(io("list", &self.job_dir))? {
            let entry = entry.map_err(io("list", &self.job_dir))?;
            if let Some(id) = parse_any_location(&entry.file_name().to_string_lossy()) {
                max = max.max(id);
            }
        }
        Ok(max)
    }

    fn set_finished(&self, finished: bool) -> Result<(), StorageError> {
        let path = self.job_dir.join(FINISHED_MARKER);
        if finished {
            fs::write(&path, b"finished\n").map_err(io("write", &path))?;
            fsync_dir(&self.job_dir)
        } else {
            match fs::remove_file(&path) {
                Ok(()) => fsync_dir(&self.job_dir),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(io("remove", &path)(e)),
            }
        }
    }

    fn is_finished(&self) -> Result<bool, StorageError> {
        Ok(self.job_dir.join(FINISHED_MARKER).exists())
    }

    fn discard(&self, location: &str) -> Result<(), StorageError> {
        let dir = Path::new(location);
        match fs::remove_dir_all(dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io("remove", dir)(e)),
        }
    }
}

/// Checkpoints in this process's memory (for tests); shared by clones.
#[derive(Debug, Clone)]
pub struct MemoryCheckpointStorage {
    root: String,
    files: Arc<Mutex<BTreeMap<String, Vec<u8>>>>,
}

impl MemoryCheckpointStorage {
    /// Empty storage for `job_name`.
    pub fn new(job_name: &str) -> Self {
        Self {
            root: format!("memory://{}", sanitize(job_name)),
            files: Arc::default(),
        }
    }

    fn files(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<u8>>> {
        // A panic while holding this lock leaves plain bytes behind; they stay usable.
        self.files
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Overwrites a file (tests use it to corrupt checkpoints).
    pub fn put(&self, path: &str, bytes: Vec<u8>) {
        self.files().insert(path.to_string(), bytes);
    }
}

impl CheckpointStorage for MemoryCheckpointStorage {
    fn describe(&self) -> String {
        self.root.clone()
    }

    fn location(&self, id: u64, kind: SnapshotType) -> String {
        format!("{}/{}", self.root, location_name(id, kind))
    }

    fn init_location(&self, id: u64, kind: SnapshotType) -> Result<String, StorageError> {
        let location = self.location(id, kind);
        let mut files = self.files();
        if files.contains_key(&format!("{location}/")) {
            return Err(StorageError::Io {
                action: "create directory",
                path: location,
                source: std::io::Error::from(std::io::ErrorKind::AlreadyExists),
            });
        }
        files.insert(format!("{location}/"), Vec::new());
        Ok(location)
    }

    fn write_file(&self, location: &str, name: &str, bytes: &[u8]) -> Result<(), StorageError> {
        let mut files = self.files();
        if !files.contains_key(&format!("{location}/")) {
            return Err(StorageError::NotFound {
                path: location.to_string(),
            });
        }
        files.insert(format!("{location}/{name}"), bytes.to_vec());
        Ok(())
    }

    fn read_range(
        &self,
        location: &str,
        name: &str,
        offset: u64,
        length: u64,
    ) -> Result<Vec<u8>, StorageError> {
        let path = format!("{location}/{name}");
        let files = self.files();
        let bytes = files
            .get(&path)
            .ok_or(StorageError::NotFound { path: path.clone() })?;
        let (start, end) = (offset as usize, (offset + length) as usize);
        bytes
            .get(start..end)
            .map(<[u8]>::to_vec)
            .ok_or(StorageError::Corrupt {
                path,
                reason: format!("truncated: wanted bytes {start}..{end} of {}", bytes.len()),
            })
    }

    fn write_metadata(
        &self,
        location: &str,
        metadata: &CheckpointMetadata,
    ) -> Result<(), StorageError> {
        let path = format!("{location}/{METADATA_FILE}");
        let bytes = metadata.encode().map_err(|e| StorageError::Corrupt {
            path: path.clone(),
            reason: format!("cannot encode: {e}"),
        })?;
        self.files().insert(path, bytes);
        Ok(())
    }

    fn read_metadata(&self, location: &str) -> Result<CheckpointMetadata, StorageError> {
        let path = format!("{location}/{METADATA_FILE}");
        let bytes = self
            .files()
            .get(&path)
            .cloned()
            .ok_or(StorageError::NotFound { path: path.clone() })?;
        decode_metadata(path, &bytes)
    }

    fn list_checkpoints(&self) -> Result<Vec<StoredCheckpoint>, StorageError> {
        let files = self.files();
        let prefix = format!("{}/", self.root);
        let mut found: Vec<StoredCheckpoint> = files
            .keys()
            .filter_map(|k| {
                let rest = k.strip_prefix(&prefix)?;
                let dir = rest.strip_suffix('/')?;
                let id = parse_checkpoint_dir(dir)?;
                let location = format!("{}{}", prefix, dir);
                Some(StoredCheckpoint {
                    id,
                    has_metadata: files.contains_key(&format!("{location}/{METADATA_FILE}")),
                    location,
                })
            })
            .collect();
        found.sort_by_key(|c| c.id);
        Ok(found)
    }

    fn max_id(&self) -> Result<u64, StorageError> {
        let prefix = format!("{}/", self.root);
        Ok(self
            .files()
            .keys()
            .filter_map(|k| parse_any_location(k.strip_prefix(&prefix)?.strip_suffix('/')?))
            .max()
            .unwrap_or(0))
    }

    fn set_finished(&self, finished: bool) -> Result<(), StorageError> {
        let key = format!("{}/{FINISHED_MARKER}", self.root);
        if finished {
            self.files().insert(key, Vec::new());
        } else {
            self.files().remove(&key);
        }
        Ok(())
    }

    fn is_finished(&self) -> Result<bool, StorageError> {
        Ok(self
            .files()
            .contains_key(&format!("{}/{FINISHED_MARKER}", self.root)))
    }

    fn discard(&self, location: &str) -> Result<(), StorageError> {
        let prefix = format!("{location}/");
        self.files().retain(|k, _| !k.starts_with(&prefix));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(id: u64) -> CheckpointMetadata {
        CheckpointMetadata {
            checkpoint_id: id,
            kind: SnapshotType::Checkpoint,
            job_name: "j".into(),
            timestamp_millis: 0,
            operators: vec![],
        }
    }

    fn exercise(storage: &dyn CheckpointStorage) {
        let loc1 = storage.init_location(1, SnapshotType::Checkpoint).unwrap();
        let loc2 = storage.init_location(2, SnapshotType::Checkpoint).unwrap();
        storage.init_location(3, SnapshotType::Savepoint).unwrap();
        assert!(
            storage.init_location(3, SnapshotType::Savepoint).is_err(),
            "never reused"
        );
        assert_eq!(storage.max_id().unwrap(), 3);
        storage.write_file(&loc1, "a.keyed", b"0123456789").unwrap();
        assert_eq!(storage.read_range(&loc1, "a.keyed", 2, 3).unwrap(), b"234");
        assert!(matches!(
            storage.read_range(&loc1, "a.keyed", 8, 5),
            Err(StorageError::Corrupt { .. })
        ));
        storage.write_metadata(&loc1, &metadata(1)).unwrap();
        assert_eq!(storage.read_metadata(&loc1).unwrap(), metadata(1));
        let listed = storage.list_checkpoints().unwrap();
        assert_eq!(
            listed
                .iter()
                .map(|c| (c.id, c.has_metadata))
                .collect::<Vec<_>>(),
            vec![(1, true), (2, false)]
        );
        assert!(matches!(
            storage.read_metadata(&loc2),
            Err(StorageError::NotFound { .. })
        ));
        storage.discard(&loc1).unwrap();
        assert_eq!(storage.list_checkpoints().unwrap().len(), 1);
        assert!(
            storage.write_file(&loc1, "late", b"x").is_err(),
            "a discarded location takes no files"
        );
    }

    #[test]
    fn filesystem_storage() {
        let dir = tempfile::tempdir().unwrap();
        let storage = FsCheckpointStorage::new(dir.path(), "my job/1").unwrap();
        assert!(storage.job_dir().ends_with("my_job_1"));
        exercise(&storage);
    }

    #[test]
    fn memory_storage() {
        exercise(&MemoryCheckpointStorage::new("job"));
    }

    #[test]
    fn corrupt_metadata_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let storage = FsCheckpointStorage::new(dir.path(), "job").unwrap();
        let loc = storage.init_location(5, SnapshotType::Checkpoint).unwrap();
        storage.write_metadata(&loc, &metadata(5)).unwrap();
        let path = Path::new(&loc).join(METADATA_FILE);
        let mut bytes = fs::read(&path).unwrap();
        bytes.truncate(bytes.len() - 1);
        fs::write(&path, bytes).unwrap();
        let err = storage.read_metadata(&loc).unwrap_err().to_string();
        assert!(
            err.contains("chk-5/_metadata") && err.contains("truncated"),
            "{err}"
        );
    }
}
