//! Checkpoints in this process's memory, for tests: lost when the process exits, so a job
//! using it can recover from task failures but not from a crash of its process.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::{
    decode_metadata, decode_record, encoding_failed, location_name, parse_any_location,
    parse_checkpoint_dir, parse_savepoint_dir, sanitize, CheckpointStorage, StorageError,
    StoredCheckpoint, Verify, DISCARD_PREFIX, SHARED_DIR,
};
use crate::checkpoint::job_lock::JobLock;
use crate::checkpoint::job_record::JobRecord;
use crate::checkpoint::job_record_versions::{
    after_create, mismatch, parse_version, version_name, AfterCreate, JOB_RECORD_DIR,
};
use crate::checkpoint::metadata::{CheckpointMetadata, METADATA_FILE};
use crate::runtime::stream_element::SnapshotType;

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

    /// Locations whose directory name `parse` accepts, by ascending id.
    fn list(&self, parse: fn(&str) -> Option<u64>) -> Result<Vec<StoredCheckpoint>, StorageError> {
        let files = self.files();
        let prefix = format!("{}/", self.root);
        let mut found: Vec<StoredCheckpoint> = files
            .keys()
            .filter_map(|k| {
                let dir = k.strip_prefix(&prefix)?.strip_suffix('/')?;
                let id = parse(dir)?;
                let location = format!("{prefix}{dir}");
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

    fn record_path(&self, version: u64) -> String {
        format!("{}/{JOB_RECORD_DIR}/{}", self.root, version_name(version))
    }

    fn record_versions(&self) -> Vec<u64> {
        let prefix = format!("{}/{JOB_RECORD_DIR}/", self.root);
        self.files()
            .keys()
            .filter_map(|k| parse_version(k.strip_prefix(&prefix)?))
            .collect()
    }
}

impl CheckpointStorage for MemoryCheckpointStorage {
    fn shared_location(&self) -> Result<String, StorageError> {
        let location = format!("{}/{SHARED_DIR}", self.root);
        self.files().entry(format!("{location}/")).or_default();
        Ok(location)
    }

    fn shared_location_of(&self, location: &str) -> String {
        match location.rsplit_once('/') {
            Some((parent, _)) => format!("{parent}/{SHARED_DIR}"),
            None => SHARED_DIR.to_string(),
        }
    }

    fn delete_file(&self, location: &str, name: &str) -> Result<(), StorageError> {
        self.files().remove(&format!("{location}/{name}"));
        Ok(())
    }

    fn list_files(&self, location: &str) -> Result<Vec<String>, StorageError> {
        let prefix = format!("{location}/");
        Ok(self
            .files()
            .keys()
            .filter_map(|k| k.strip_prefix(&prefix))
            .filter(|name| !name.is_empty() && !name.contains('/'))
            .map(str::to_string)
            .collect())
    }

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
            return Err(StorageError::not_found(location));
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
        verify: Verify<'_>,
    ) -> Result<Vec<u8>, StorageError> {
        let path = format!("{location}/{name}");
        let files = self.files();
        let bytes = files
            .get(&path)
            .ok_or_else(|| StorageError::not_found(path.clone()))?;
        let range = usize::try_from(offset)
            .ok()
            .zip(usize::try_from(length).ok())
            .and_then(|(start, length)| bytes.get(start..start.checked_add(length)?))
            .ok_or(StorageError::Corrupt {
                path: path.clone(),
                reason: format!(
                    "truncated: wanted {length} bytes at offset {offset} of {}",
                    bytes.len()
                ),
            })?;
        verify(range).map_err(|reason| StorageError::Corrupt { path, reason })?;
        Ok(range.to_vec())
    }

    fn write_metadata(
        &self,
        location: &str,
        metadata: &CheckpointMetadata,
    ) -> Result<(), StorageError> {
        let path = format!("{location}/{METADATA_FILE}");
        let bytes = metadata.encode().map_err(encoding_failed(path.clone()))?;
        self.files().insert(path, bytes);
        Ok(())
    }

    fn read_metadata(&self, location: &str) -> Result<CheckpointMetadata, StorageError> {
        let path = format!("{location}/{METADATA_FILE}");
        let bytes = self
            .files()
            .get(&path)
            .cloned()
            .ok_or_else(|| StorageError::not_found(path.clone()))?;
        decode_metadata(path, &bytes)
    }

    fn list_checkpoints(&self) -> Result<Vec<StoredCheckpoint>, StorageError> {
        self.list(parse_checkpoint_dir)
    }

    fn list_savepoints(&self) -> Result<Vec<StoredCheckpoint>, StorageError> {
        self.list(parse_savepoint_dir)
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

    fn discard(&self, location: &str) -> Result<(), StorageError> {
        let prefix = format!("{location}/");
        let mut files = self.files();
        files.retain(|k, _| !k.starts_with(&prefix));
        // The id stays used, as on a filesystem while a deletion is under way.
        if let Some((root, name)) = location.rsplit_once('/') {
            files.insert(format!("{root}/{DISCARD_PREFIX}{name}/"), Vec::new());
        }
        Ok(())
    }

    fn lock_job(&self) -> Result<Option<JobLock>, StorageError> {
        Ok(None)
    }

    fn read_job_record(&self) -> Result<Option<JobRecord>, StorageError> {
        // Listed and read under one lock: a writer cannot delete the version in between.
        let files = self.files();
        let prefix = format!("{}/{JOB_RECORD_DIR}/", self.root);
        let Some(newest) = files
            .keys()
            .filter_map(|k| parse_version(k.strip_prefix(&prefix)?))
            .max()
        else {
            return Ok(None);
        };
        let path = self.record_path(newest);
        let bytes = files.get(&path).cloned();
        drop(files);
        let Some(bytes) = bytes else {
            return Err(StorageError::not_found(path));
        };
        let record = decode_record(path.clone(), &bytes)?;
        match mismatch(&path, newest, record.sequence) {
            Some(reason) => Err(StorageError::Corrupt { path, reason }),
            None => Ok(Some(record)),
        }
    }

    fn job_record_version(&self) -> Result<u64, StorageError> {
        Ok(self.record_versions().into_iter().max().unwrap_or(0))
    }

    fn write_job_record(&self, record: &JobRecord) -> Result<(), StorageError> {
        let version = record.sequence;
        let path = self.record_path(version);
        let bytes = record.encode().map_err(encoding_failed(path.clone()))?;
        let conflict = |reason: String| StorageError::RecordConflict {
            path: format!("{}/{JOB_RECORD_DIR}", self.root),
            version,
            reason,
        };
        let prefix = format!("{}/{JOB_RECORD_DIR}/", self.root);
        // One lock for the create and the check: as atomic as a filesystem's link.
        let mut files = self.files();
        if files.contains_key(&path) {
            return Err(conflict(format!("version {version} exists already")));
        }
        files.insert(path, bytes);
        let present: Vec<u64> = files
            .keys()
            .filter_map(|k| parse_version(k.strip_prefix(&prefix)?))
            .collect();
        match after_create(version, &present) {
            AfterCreate::Superseded { newest } => Err(conflict(format!("version {newest} exists"))),
            AfterCreate::Newest { obsolete } => {
                for old in obsolete {
                    files.remove(&self.record_path(old));
                }
                Ok(())
            }
        }
    }

    fn remove_leftovers(&self, keep: &[String]) -> Result<Vec<String>, StorageError> {
        let prefix = format!("{}/", self.root);
        let mut files = self.files();
        let victims: Vec<String> = files
            .keys()
            .filter_map(|k| {
                let dir = k.strip_prefix(&prefix)?.strip_suffix('/')?;
                parse_any_location(dir)?;
                let location = format!("{prefix}{dir}");
                let being_deleted = dir.starts_with(DISCARD_PREFIX);
                let incomplete = !being_deleted
                    && !files.contains_key(&format!("{location}/{METADATA_FILE}"))
                    && !keep.contains(&location);
                (being_deleted || incomplete).then_some(location)
            })
            .collect();
        for victim in &victims {
            let inside = format!("{victim}/");
            files.retain(|k, _| !k.starts_with(&inside));
        }
        Ok(victims)
    }
}

#[cfg(test)]
mod tests {
    use super::super::conformance::exercise;
    use super::*;

    #[test]
    fn memory_storage() {
        exercise(&MemoryCheckpointStorage::new("job"));
    }
}
