//! Checkpoints in a directory, `<dir>/<job>/chk-<id>/`, with an optional local-recovery copy
//! of every file under a second directory (Flink's task-local recovery): the copy has the
//! same layout, `<copy dir>/<job>/chk-<id>/`, and a read that finds the primary missing or
//! damaged takes the copy if it verifies.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::{
    decode_metadata, decode_record, encoding_failed, first_good, location_name, parse_any_location,
    parse_checkpoint_dir, parse_savepoint_dir, sanitize, CheckpointStorage, StorageError,
    StoredCheckpoint, Verify, DISCARD_PREFIX, SHARED_DIR,
};
use crate::checkpoint::job_lock::JobLock;
use crate::checkpoint::job_record::JobRecord;
use crate::checkpoint::job_record_versions::{
    after_create, mismatch, parse_version, version_name, AfterCreate, JOB_RECORD_DIR, READ_ATTEMPTS,
};
use crate::checkpoint::metadata::{CheckpointMetadata, METADATA_FILE};
use crate::checkpoint::storage::record_locations::{relative_to, resolved_in};
use crate::runtime::stream_element::SnapshotType;

/// The newest version of a job record, and what reading it gave.
type NewestRecord = (u64, Result<JobRecord, StorageError>);

/// Checkpoints in a directory: `<dir>/<job>/chk-<id>/`.
#[derive(Debug, Clone)]
pub struct FsCheckpointStorage {
    job_dir: PathBuf,
    /// The job directory's local-recovery copy.
    copy_dir: Option<PathBuf>,
}

fn io<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> StorageError + 'a {
    move |source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            StorageError::not_found(path.display().to_string())
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

/// Writes `bytes` to `path` and fsyncs it.
fn write_durably(path: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    let mut file = fs::File::create(path).map_err(io("create", path))?;
    file.write_all(bytes).map_err(io("write", path))?;
    file.sync_all().map_err(io("fsync", path))
}

/// Copies `source` to `dest` and makes it durable: the file and its directory fsynced.
fn copy_durably(source: &Path, dest: &Path) -> Result<(), StorageError> {
    fs::copy(source, dest).map_err(io("copy to", dest))?;
    fs::File::open(dest)
        .and_then(|f| f.sync_all())
        .map_err(io("fsync", dest))?;
    match dest.parent() {
        Some(dir) => fsync_dir(dir),
        None => Ok(()),
    }
}

/// Removes file `path`; one that is already gone is no error.
fn remove_file_if_present(path: &Path) -> Result<(), StorageError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io("remove", path)(e)),
    }
}

/// Replaces `dir/name` atomically: a temporary file, fsynced, renamed over it, and the
/// directory fsynced. After a crash the file is either the old one or the new one.
fn replace_atomically(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), StorageError> {
    let final_path = dir.join(name);
    let temp = dir.join(format!("{name}.inprogress"));
    write_durably(&temp, bytes)?;
    fs::rename(&temp, &final_path).map_err(io("rename", &temp))?;
    fsync_dir(dir)
}

fn read_range_at(path: &Path, offset: u64, length: u64) -> Result<Vec<u8>, StorageError> {
    let mut file = fs::File::open(path).map_err(io("open", path))?;
    file.seek(SeekFrom::Start(offset))
        .map_err(io("seek", path))?;
    let mut buf = Vec::with_capacity(usize::try_from(length).unwrap_or(0).min(1 << 30));
    Read::by_ref(&mut file)
        .take(length)
        .read_to_end(&mut buf)
        .map_err(io("read", path))?;
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

/// Removes `dir` as a whole: renamed to a hidden name first (atomic), then deleted.
fn discard_dir(dir: &Path) -> Result<(), StorageError> {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Ok(());
    };
    let hidden = parent.join(format!("{DISCARD_PREFIX}{}", name.to_string_lossy()));
    match fs::rename(dir, &hidden) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        // A hidden leftover of the same name from a crashed deletion is in the way.
        Err(_) if hidden.exists() => {
            fs::remove_dir_all(&hidden).map_err(io("remove", &hidden))?;
            fs::rename(dir, &hidden).map_err(io("rename", dir))?;
        }
        Err(e) => return Err(io("rename", dir)(e)),
    }
    fsync_dir(parent)?;
    match fs::remove_dir_all(&hidden) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io("remove", &hidden)(e)),
    }
}

impl FsCheckpointStorage {
    /// Storage under `dir` for `job_name`; creates the job directory.
    pub fn new(dir: &Path, job_name: &str) -> Result<Self, StorageError> {
        // Absolute, so that a location given as an absolute path (a restore from what
        // `weir inspect` or a savepoint printed) is recognised as this job's own.
        let job_dir = std::path::absolute(dir.join(sanitize(job_name)))
            .map_err(io("resolve", &dir.join(sanitize(job_name))))?;
        fs::create_dir_all(&job_dir).map_err(io("create directory", &job_dir))?;
        Ok(Self {
            job_dir,
            copy_dir: None,
        })
    }

    /// Keeps a local-recovery copy of every file under `dir` (`<dir>/<job>/…`).
    pub fn with_local_copy(mut self, dir: &Path) -> Result<Self, StorageError> {
        let name = self
            .job_dir
            .file_name()
            .map(Path::new)
            .unwrap_or(Path::new("job"));
        let copy = std::path::absolute(dir.join(name)).map_err(io("resolve", &dir.join(name)))?;
        fs::create_dir_all(&copy).map_err(io("create directory", &copy))?;
        self.copy_dir = Some(copy);
        Ok(self)
    }

    /// The job's directory.
    pub fn job_dir(&self) -> &Path {
        &self.job_dir
    }

    /// The local-recovery copy of the job's directory, if configured.
    pub fn copy_dir(&self) -> Option<&Path> {
        self.copy_dir.as_deref()
    }

    /// The local copy of a location inside the job directory.
    fn copy_of(&self, location: &Path) -> Option<PathBuf> {
        let copy_dir = self.copy_dir.as_ref()?;
        let relative = location.strip_prefix(&self.job_dir).ok()?;
        Some(copy_dir.join(relative))
    }

    /// Locations of `kind` in the job directory, by ascending id.
    fn list(&self, kind: SnapshotType) -> Result<Vec<StoredCheckpoint>, StorageError> {
        let mut found = Vec::new();
        let entries = fs::read_dir(&self.job_dir).map_err(io("list", &self.job_dir))?;
        for entry in entries {
            let entry = entry.map_err(io("list", &self.job_dir))?;
            let name = entry.file_name().to_string_lossy().to_string();
            let id = match kind {
                SnapshotType::Checkpoint => parse_checkpoint_dir(&name),
                SnapshotType::Savepoint => parse_savepoint_dir(&name),
            };
            if let Some(id) = id {
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

    /// The versions of the job record kept under job directory `dir` (none if it has none).
    fn record_versions(dir: &Path) -> Result<Vec<u64>, StorageError> {
        let dir = dir.join(JOB_RECORD_DIR);
        // A file there is the one-file record of an earlier Weir: no version of this one.
        if dir.is_file() {
            return Ok(Vec::new());
        }
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io("list", &dir)(e)),
        };
        let mut versions = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io("list", &dir))?;
            if let Some(version) = parse_version(&entry.file_name().to_string_lossy()) {
                versions.push(version);
            }
        }
        versions.sort_unstable();
        Ok(versions)
    }

    /// Reads and verifies version `version` of the job record under job directory `dir`.
    fn read_record_version(dir: &Path, version: u64) -> Result<JobRecord, StorageError> {
        let path = dir.join(JOB_RECORD_DIR).join(version_name(version));
        let bytes = fs::read(&path).map_err(io("read", &path))?;
        let record = decode_record(path.display().to_string(), &bytes)?;
        let name = path.display().to_string();
        match mismatch(&name, version, record.sequence) {
            Some(reason) => Err(StorageError::Corrupt { path: name, reason }),
            None => Ok(record),
        }
    }

    /// The job record file of the newest version under job directory `job_dir`, if any (for
    /// tests and tools that read or damage it).
    pub fn newest_record_file(job_dir: &Path) -> Option<PathBuf> {
        let newest = Self::record_versions(job_dir).ok()?.into_iter().max()?;
        Some(job_dir.join(JOB_RECORD_DIR).join(version_name(newest)))
    }

    /// Creates version `version` of the record in `dir` (the record directory) from `bytes`,
    /// failing if that name exists: written to a temporary name, fsynced, then hard-linked
    /// to its name (which fails on an existing name, atomically), and the directory fsynced.
    fn create_version(dir: &Path, version: u64, bytes: &[u8]) -> Result<(), StorageError> {
        static NONCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let name = version_name(version);
        let nonce = NONCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let temp = dir.join(format!(".{name}.{}-{nonce}.inprogress", std::process::id()));
        write_durably(&temp, bytes)?;
        let final_path = dir.join(&name);
        let linked = fs::hard_link(&temp, &final_path);
        if let Err(e) = remove_file_if_present(&temp) {
            tracing::warn!(error = %e, "cannot remove a temporary job record file");
        }
        match linked {
            Ok(()) => fsync_dir(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(StorageError::RecordConflict {
                    path: dir.display().to_string(),
                    version,
                    reason: format!("version {version} exists already"),
                })
            }
            Err(e) => Err(io("link", &final_path)(e)),
        }
    }

    /// The error for the one-file job record an earlier Weir wrote at `path`.
    fn legacy_record(path: &Path) -> StorageError {
        StorageError::Corrupt {
            path: path.display().to_string(),
            reason: "it is the one-file job record of an earlier Weir, which this version does \
                     not read (it keeps a directory of record versions); `weir reset` starts \
                     the job over, moving it aside"
                .into(),
        }
    }

    /// The newest version of the record under job directory `dir` and its content: listed
    /// again when the version listed is deleted before it is read (a writer removes the older
    /// versions right after it creates a new one). `None` when there is no version.
    fn read_newest(dir: &Path) -> Result<Option<NewestRecord>, StorageError> {
        let legacy = dir.join(JOB_RECORD_DIR);
        if legacy.is_file() {
            return Err(Self::legacy_record(&legacy));
        }
        let mut attempts = 0;
        loop {
            let Some(&newest) = Self::record_versions(dir)?.last() else {
                return Ok(None);
            };
            match Self::read_record_version(dir, newest) {
                Err(e) if e.is_not_found() && attempts < READ_ATTEMPTS => attempts += 1,
                read => return Ok(Some((newest, read))),
            }
        }
    }

    /// Creates the record directory of job directory `job_dir` if it is missing, durably (a
    /// one-file record of an earlier Weir is moved aside, kept under another name).
    fn record_dir(job_dir: &Path) -> Result<PathBuf, StorageError> {
        let dir = job_dir.join(JOB_RECORD_DIR);
        if dir.is_file() {
            let aside = job_dir.join(format!("{JOB_RECORD_DIR}.earlier-weir"));
            fs::rename(&dir, &aside).map_err(io("move aside", &dir))?;
            tracing::warn!(record = %aside.display(),
                "moved aside the one-file job record of an earlier Weir");
        }
        if !dir.is_dir() {
            match fs::create_dir(&dir) {
                Ok(()) => fsync_dir(job_dir)?,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io("create directory", &dir)(e)),
            }
        }
        Ok(dir)
    }

    fn leftovers_in(dir: &Path, keep: &[PathBuf]) -> Result<Vec<PathBuf>, StorageError> {
        let mut found = Vec::new();
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
            Err(e) => return Err(io("list", dir)(e)),
        };
        for entry in entries {
            let entry = entry.map_err(io("list", dir))?;
            let name = entry.file_name().to_string_lossy().to_string();
            let path = entry.path();
            let being_deleted = name.starts_with(DISCARD_PREFIX);
            let incomplete = parse_any_location(&name).is_some()
                && !being_deleted
                && !path.join(METADATA_FILE).exists()
                && !keep.contains(&path);
            if (being_deleted && parse_any_location(&name).is_some()) || incomplete {
                found.push(path);
            }
        }
        Ok(found)
    }

    /// The newest job record as written (its locations relative to the job directory).
    fn read_job_record_as_written(&self) -> Result<Option<JobRecord>, StorageError> {
        let Some((newest, primary)) = Self::read_newest(&self.job_dir)? else {
            // The primary has none (deleted, or its disk lost): the copy's newest.
            let Some(copy) = self.copy_dir.as_deref() else {
                return Ok(None);
            };
            return match Self::read_newest(copy)? {
                Some((version, read)) => {
                    tracing::warn!(copy = %copy.display(), version,
                        "the job record is missing; using its local-recovery copy");
                    read.map(Some)
                }
                None => Ok(None),
            };
        };
        // Only the copy of the same version: an older one would be stale.
        let copy = self.copy_dir.as_deref();
        let read_copy = || Self::read_record_version(copy.unwrap_or(Path::new("")), newest);
        first_good(
            primary,
            copy.map(|c| {
                (
                    c.join(JOB_RECORD_DIR)
                        .join(version_name(newest))
                        .display()
                        .to_string(),
                    &read_copy as &dyn Fn() -> _,
                )
            }),
        )
        .map(Some)
    }

    /// Writes a record whose locations were made relative to the job directory.
    fn write_job_record_relative(&self, record: &JobRecord) -> Result<(), StorageError> {
        let dir = Self::record_dir(&self.job_dir)?;
        let version = record.sequence;
        let name = version_name(version);
        let bytes = record
            .encode()
            .map_err(encoding_failed(dir.join(&name).display().to_string()))?;
        Self::create_version(&dir, version, &bytes)?;
        let obsolete = match after_create(version, &Self::record_versions(&self.job_dir)?) {
            AfterCreate::Superseded { newest } => {
                return Err(StorageError::RecordConflict {
                    path: dir.display().to_string(),
                    version,
                    reason: format!("version {newest} exists"),
                })
            }
            AfterCreate::Newest { obsolete } => obsolete,
        };
        if let Some(copy) = &self.copy_dir {
            let copy_dir = Self::record_dir(copy)?;
            replace_atomically(&copy_dir, &name, &bytes)?;
            // The copy keeps the newest version only: it is read for that version alone.
            for other in Self::record_versions(copy)? {
                if other != version {
                    remove_file_if_present(&copy_dir.join(version_name(other)))?;
                }
            }
        }
        for old in obsolete {
            if let Err(e) = remove_file_if_present(&dir.join(version_name(old))) {
                tracing::warn!(error = %e, "cannot remove an old version of the job record");
            }
        }
        // Temporary files of writes that crashed, or lost (a stale process's, whose link
        // would fail anyway).
        for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().ends_with(".inprogress") {
                let _ = fs::remove_file(entry.path());
            }
        }
        Ok(())
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
        if let Some(copy) = self.copy_of(&dir) {
            // A copy left by a crashed run under this id holds nothing of this checkpoint.
            discard_dir(&copy)?;
            fs::create_dir_all(&copy).map_err(io("create directory", &copy))?;
        }
        Ok(dir.display().to_string())
    }

    fn write_file(&self, location: &str, name: &str, bytes: &[u8]) -> Result<(), StorageError> {
        let location = Path::new(location);
        write_durably(&location.join(name), bytes)?;
        if let Some(copy) = self.copy_of(location) {
            write_durably(&copy.join(name), bytes)?;
        }
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
        let location = Path::new(location);
        let read = |path: &Path| -> Result<Vec<u8>, StorageError> {
            let bytes = read_range_at(path, offset, length)?;
            verify(&bytes).map_err(|reason| StorageError::Corrupt {
                path: path.display().to_string(),
                reason,
            })?;
            Ok(bytes)
        };
        let primary = location.join(name);
        let copy = self.copy_of(location).map(|c| c.join(name));
        let read_copy = || read(copy.as_deref().unwrap_or(Path::new("")));
        first_good(
            read(&primary),
            copy.as_ref()
                .map(|c| (c.display().to_string(), &read_copy as &dyn Fn() -> _)),
        )
    }

    fn write_metadata(
        &self,
        location: &str,
        metadata: &CheckpointMetadata,
    ) -> Result<(), StorageError> {
        let dir = Path::new(location);
        let bytes = metadata.encode().map_err(encoding_failed(
            dir.join(METADATA_FILE).display().to_string(),
        ))?;
        // The copy first: once the primary exists the checkpoint counts as complete, and
        // its copy must be complete by then too.
        if let Some(copy) = self.copy_of(dir) {
            replace_atomically(&copy, METADATA_FILE, &bytes)?;
        }
        replace_atomically(dir, METADATA_FILE, &bytes)
    }

    fn read_metadata(&self, location: &str) -> Result<CheckpointMetadata, StorageError> {
        let read = |dir: &Path| {
            let path = dir.join(METADATA_FILE);
            let bytes = fs::read(&path).map_err(io("read", &path))?;
            decode_metadata(path.display().to_string(), &bytes)
        };
        let dir = Path::new(location);
        let copy = self.copy_of(dir);
        let read_copy = || read(copy.as_deref().unwrap_or(Path::new("")));
        first_good(
            read(dir),
            copy.as_ref().map(|c| {
                (
                    c.join(METADATA_FILE).display().to_string(),
                    &read_copy as &dyn Fn() -> _,
                )
            }),
        )
    }

    fn list_checkpoints(&self) -> Result<Vec<StoredCheckpoint>, StorageError> {
        self.list(SnapshotType::Checkpoint)
    }

    fn list_savepoints(&self) -> Result<Vec<StoredCheckpoint>, StorageError> {
        self.list(SnapshotType::Savepoint)
    }

    fn job_record_version(&self) -> Result<u64, StorageError> {
        Ok(Self::record_versions(&self.job_dir)?
            .last()
            .copied()
            .unwrap_or(0))
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

    fn discard(&self, location: &str) -> Result<(), StorageError> {
        let dir = Path::new(location);
        // The copy first: a crash in between leaves the primary, which listings see and a
        // later clean-up removes; a copy left alone would never be found again.
        if let Some(copy) = self.copy_of(dir) {
            discard_dir(&copy)?;
        }
        discard_dir(dir)
    }

    fn lock_job(&self) -> Result<Option<JobLock>, StorageError> {
        JobLock::acquire(&self.job_dir).map(Some)
    }

    fn local_copy(&self) -> Option<String> {
        self.copy_dir.as_ref().map(|c| c.display().to_string())
    }

    fn remove_stale_copy(&self, copy: &str) -> Result<(), StorageError> {
        let copy = Path::new(copy);
        if self.copy_dir.as_deref() == Some(copy) || copy == self.job_dir {
            return Ok(());
        }
        let records = copy.join(JOB_RECORD_DIR);
        if records.exists() {
            tracing::info!(copy = %copy.display(),
                "removing the job record of a local-recovery copy this run does not keep");
            discard_dir(&records)?;
        }
        Ok(())
    }

    fn read_job_record(&self) -> Result<Option<JobRecord>, StorageError> {
        Ok(self
            .read_job_record_as_written()?
            .map(|record| resolved_in(&self.job_dir, record)))
    }

    fn write_job_record(&self, record: &JobRecord) -> Result<(), StorageError> {
        self.write_job_record_relative(&relative_to(&self.job_dir, record))
    }

    fn read_primary_job_record(&self) -> Result<Option<JobRecord>, StorageError> {
        match Self::read_newest(&self.job_dir)? {
            Some((_, read)) => read.map(|record| Some(resolved_in(&self.job_dir, record))),
            None => Ok(None),
        }
    }
    fn shared_location(&self) -> Result<String, StorageError> {
        let dir = self.job_dir.join(SHARED_DIR);
        fs::create_dir_all(&dir).map_err(io("create directory", &dir))?;
        if let Some(copy) = self.copy_of(&dir) {
            fs::create_dir_all(&copy).map_err(io("create directory", &copy))?;
        }
        Ok(dir.display().to_string())
    }

    fn shared_location_of(&self, location: &str) -> String {
        let location = Path::new(location);
        location
            .parent()
            .unwrap_or(location)
            .join(SHARED_DIR)
            .display()
            .to_string()
    }

    fn copy_file_in(&self, location: &str, name: &str, source: &Path) -> Result<(), StorageError> {
        let location = Path::new(location);
        copy_durably(source, &location.join(name))?;
        if let Some(copy) = self.copy_of(location) {
            copy_durably(source, &copy.join(name))?;
        }
        Ok(())
    }

    fn delete_file(&self, location: &str, name: &str) -> Result<(), StorageError> {
        let location = Path::new(location);
        remove_file_if_present(&location.join(name))?;
        if let Some(copy) = self.copy_of(location) {
            remove_file_if_present(&copy.join(name))?;
        }
        Ok(())
    }

    fn list_files(&self, location: &str) -> Result<Vec<String>, StorageError> {
        let location = Path::new(location);
        let entries = match fs::read_dir(location) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io("list", location)(e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io("list", location))?;
            if entry.file_type().map_err(io("list", location))?.is_file() {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    fn remove_leftovers(&self, keep: &[String]) -> Result<Vec<String>, StorageError> {
        let keep: Vec<PathBuf> = keep.iter().map(PathBuf::from).collect();
        let keep_copies: Vec<PathBuf> = keep.iter().filter_map(|k| self.copy_of(k)).collect();
        let mut removed = Vec::new();
        let mut victims = Self::leftovers_in(&self.job_dir, &keep)?;
        if let Some(copy) = &self.copy_dir {
            victims.extend(Self::leftovers_in(copy, &keep_copies)?);
        }
        for victim in victims {
            if victim
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(DISCARD_PREFIX))
            {
                fs::remove_dir_all(&victim).map_err(io("remove", &victim))?;
            } else {
                discard_dir(&victim)?;
            }
            removed.push(victim.display().to_string());
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests;
