//! Checkpoint storage on object storage through the `object_store` crate: `s3://bucket/prefix`
//! (AWS S3 and S3-compatible servers), `gs://bucket/prefix` (Google Cloud Storage) and
//! `az://container/prefix` (Azure Blob Storage), configured from the environment as their
//! SDKs are (`AWS_ENDPOINT`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
//! `AWS_ALLOW_HTTP`, `GOOGLE_SERVICE_ACCOUNT`, `AZURE_STORAGE_ACCOUNT_NAME`, …).
//!
//! Layout, as on a filesystem: `<url>/<job>/chk-<id>/` with the state files, `_metadata`, and
//! a `_location` marker; `<url>/<job>/shared/` with the files incremental checkpoints share;
//! `<url>/<job>/_job_record/<version>`. An object appears whole or not at all, so
//! the metadata and each version of the job record are written with one PUT each, which makes
//! them atomic; a version of the record is created with `If-None-Match: *`, so that of two
//! JobManagers that read the same version only one writes the next (compare-and-swap, see
//! `weir::checkpoint::job_record_versions`).
//! A location exists while its marker does: a discard deletes the marker first — the
//! location is gone at once — then its objects; what a crash midway leaves is removed by the
//! next clean-up. TaskManagers write their state files here directly; the JobManager writes
//! the metadata and completes a checkpoint only once that PUT returned.
//!
//! Object storage has no file lock: one JobManager at a time is the deployment's business
//! (a Kubernetes Deployment of one replica), and the job record fences a stale one — a
//! JobManager whose conditional write of the record fails, or that finds a newer epoch there,
//! stops, and commits nothing more.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path as FsPath;
use std::sync::Arc;
use std::time::Duration;

use futures_util::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use weir::checkpoint::job_lock::JobLock;
use weir::checkpoint::job_record::JobRecord;
use weir::checkpoint::job_record_versions::{
    after_create, mismatch, parse_version, version_name, AfterCreate, JOB_RECORD_DIR, READ_ATTEMPTS,
};
use weir::checkpoint::metadata::{CheckpointMetadata, METADATA_FILE};
use weir::checkpoint::storage::{
    decode_metadata, decode_record, location_name, parse_any_location, parse_checkpoint_dir,
    parse_savepoint_dir, register_storage_scheme, sanitize, CheckpointStorage, StorageError,
    StoredCheckpoint, Verify, SHARED_DIR,
};
use weir::runtime::stream_element::SnapshotType;

/// The marker object of a live location.
const MARKER: &str = "_location";
/// How long creating the storage may take to reach it.
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// Registers `s3`, `s3a`, `gs`, `az`, `abfs` and `azure` URLs as checkpoint storage.
pub fn register() {
    for scheme in ["s3", "s3a", "gs", "az", "abfs", "azure"] {
        register_storage_scheme(scheme, create);
    }
}

fn create(
    url: &str,
    local_copy: Option<&FsPath>,
    job_name: &str,
) -> Result<Arc<dyn CheckpointStorage>, StorageError> {
    if let Some(copy) = local_copy {
        return Err(unsupported(
            url,
            format!(
                "a local-recovery copy (`{}`) is not supported on object storage yet",
                copy.display()
            ),
        ));
    }
    Ok(Arc::new(ObjectCheckpointStorage::open(url, job_name)?))
}

fn unsupported(url: &str, reason: String) -> StorageError {
    StorageError::Unsupported {
        url: url.to_string(),
        reason,
    }
}

/// What a listing found of one location.
#[derive(Debug, Default)]
struct LocationObjects {
    /// Its marker exists: it is live.
    marker: bool,
    /// Its metadata exists: it is complete.
    metadata: bool,
    /// Every object in it.
    objects: Vec<Path>,
}

/// Checkpoints under an object-storage URL.
pub struct ObjectCheckpointStorage {
    store: Arc<dyn ObjectStore>,
    /// `<url>/<job>`: the prefix of every location string.
    job_url: String,
    /// The job directory's object path.
    root: Path,
    runtime: tokio::runtime::Runtime,
}

impl std::fmt::Debug for ObjectCheckpointStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectCheckpointStorage")
            .field("job_url", &self.job_url)
            .finish_non_exhaustive()
    }
}

fn io_error(action: &'static str, path: &str, e: object_store::Error) -> StorageError {
    match e {
        object_store::Error::NotFound { .. } => StorageError::not_found(path),
        other => StorageError::Io {
            action,
            path: path.to_string(),
            source: std::io::Error::other(other.to_string()),
        },
    }
}

impl ObjectCheckpointStorage {
    /// The storage of job `job_name` under `url`; checks at once that the bucket can be
    /// listed, so that a wrong endpoint or credentials fail here, naming the URL.
    pub fn open(url: &str, job_name: &str) -> Result<Self, StorageError> {
        let parsed = url::Url::parse(url)
            .map_err(|e| unsupported(url, format!("not a URL ({e}) (checkpoint storage URL)")))?;
        let store: Arc<dyn ObjectStore> = match parsed.scheme() {
            "s3" | "s3a" => Arc::new(
                object_store::aws::AmazonS3Builder::from_env()
                    .with_url(url)
                    .build()
                    .map_err(|e| unsupported(url, format!("cannot configure S3: {e}")))?,
            ),
            "gs" => Arc::new(
                object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_url(url)
                    .build()
                    .map_err(|e| unsupported(url, format!("cannot configure GCS: {e}")))?,
            ),
            "az" | "abfs" | "azure" => Arc::new(
                object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_url(url)
                    .build()
                    .map_err(|e| unsupported(url, format!("cannot configure Azure: {e}")))?,
            ),
            other => {
                return Err(unsupported(
                    url,
                    format!("object storage does not serve `{other}://`"),
                ))
            }
        };
        let prefix = Path::parse(parsed.path().trim_matches('/'))
            .map_err(|e| unsupported(url, format!("bad prefix: {e}")))?;
        let job = sanitize(job_name);
        let root = prefix.join(job.as_str());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("checkpoint-storage")
            .enable_all()
            .build()
            .map_err(|e| unsupported(url, format!("cannot start its I/O runtime: {e}")))?;
        let storage = Self {
            store,
            job_url: format!("{}/{job}", url.trim_end_matches('/')),
            root,
            runtime,
        };
        let probe = storage.runtime.block_on(async {
            tokio::time::timeout(
                PROBE_TIMEOUT,
                storage.store.list_with_delimiter(Some(&storage.root)),
            )
            .await
        });
        match probe {
            Ok(Ok(_)) => Ok(storage),
            Ok(Err(e)) => Err(unsupported(
                url,
                format!("cannot be read ({e}); check the bucket, the endpoint (AWS_ENDPOINT) and the credentials"),
            )),
            Err(_) => Err(unsupported(
                url,
                format!("did not answer within {PROBE_TIMEOUT:?}; check the endpoint (AWS_ENDPOINT)"),
            )),
        }
    }

    /// The object path of `parts` under the job directory.
    fn under(&self, parts: &[&str]) -> Path {
        parts
            .iter()
            .fold(self.root.clone(), |path, part| path.join(*part))
    }

    /// The location's name (`chk-3`) from its string.
    fn name_of<'a>(&self, location: &'a str) -> Result<&'a str, StorageError> {
        location
            .strip_prefix(&self.job_url)
            .and_then(|rest| rest.strip_prefix('/'))
            .filter(|name| !name.is_empty() && !name.contains('/'))
            .ok_or_else(|| StorageError::not_found(location))
    }

    fn object(&self, location: &str, file: &str) -> Result<Path, StorageError> {
        Ok(self.under(&[self.name_of(location)?, file]))
    }

    fn url_of(&self, path: &Path) -> String {
        let relative = path
            .as_ref()
            .strip_prefix(self.root.as_ref())
            .unwrap_or(path.as_ref());
        format!(
            "{}{}{}",
            self.job_url,
            if relative.starts_with('/') { "" } else { "/" },
            relative
        )
    }

    fn put(&self, path: &Path, bytes: Vec<u8>) -> Result<(), StorageError> {
        self.runtime
            .block_on(self.store.put(path, PutPayload::from(bytes)))
            .map(|_| ())
            .map_err(|e| io_error("write", &self.url_of(path), e))
    }

    fn get(&self, path: &Path) -> Result<Vec<u8>, StorageError> {
        self.runtime
            .block_on(async { self.store.get(path).await?.bytes().await })
            .map(|b| b.to_vec())
            .map_err(|e| io_error("read", &self.url_of(path), e))
    }

    fn exists(&self, path: &Path) -> Result<bool, StorageError> {
        match self.runtime.block_on(self.store.head(path)) {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(io_error("check", &self.url_of(path), e)),
        }
    }

    /// Fails unless `location` is live (created and not discarded).
    fn require_live(&self, location: &str) -> Result<(), StorageError> {
        if self.exists(&self.object(location, MARKER)?)? {
            Ok(())
        } else {
            Err(StorageError::not_found(format!(
                "{location} (discarded, or never created)"
            )))
        }
    }

    /// Every object under the job directory, grouped by location name.
    fn scan(&self) -> Result<BTreeMap<String, LocationObjects>, StorageError> {
        let objects: Vec<object_store::ObjectMeta> = self
            .runtime
            .block_on(self.store.list(Some(&self.root)).try_collect())
            .map_err(|e| io_error("list", &self.job_url, e))?;
        let mut locations: BTreeMap<String, LocationObjects> = BTreeMap::new();
        for object in objects {
            let mut parts = object
                .location
                .prefix_match(&self.root)
                .map(|p| p.map(|s| s.as_ref().to_string()).collect::<Vec<_>>())
                .unwrap_or_default()
                .into_iter();
            let (Some(name), Some(file)) = (parts.next(), parts.next()) else {
                continue;
            };
            let entry = locations.entry(name).or_default();
            entry.marker |= file == MARKER;
            entry.metadata |= file == METADATA_FILE;
            entry.objects.push(object.location);
        }
        Ok(locations)
    }

    fn list(&self, kind: SnapshotType) -> Result<Vec<StoredCheckpoint>, StorageError> {
        let mut found: Vec<StoredCheckpoint> = self
            .scan()?
            .into_iter()
            .filter(|(_, l)| l.marker)
            .filter_map(|(name, l)| {
                let id = match kind {
                    SnapshotType::Checkpoint => parse_checkpoint_dir(&name),
                    SnapshotType::Savepoint => parse_savepoint_dir(&name),
                }?;
                Some(StoredCheckpoint {
                    id,
                    location: format!("{}/{name}", self.job_url),
                    has_metadata: l.metadata,
                })
            })
            .collect();
        found.sort_by_key(|c| c.id);
        Ok(found)
    }

    /// The versions of the job record, ascending.
    fn record_versions(&self) -> Result<Vec<u64>, StorageError> {
        let prefix = self.under(&[JOB_RECORD_DIR]);
        let objects: Vec<object_store::ObjectMeta> = self
            .runtime
            .block_on(self.store.list(Some(&prefix)).try_collect())
            .map_err(|e| io_error("list", &self.url_of(&prefix), e))?;
        let mut versions: Vec<u64> = objects
            .iter()
            .filter_map(|o| o.location.filename().and_then(parse_version))
            .collect();
        versions.sort_unstable();
        Ok(versions)
    }

    fn record_conflict(&self, version: u64, reason: String) -> StorageError {
        StorageError::RecordConflict {
            path: self.url_of(&self.under(&[JOB_RECORD_DIR])),
            version,
            reason,
        }
    }

    fn delete_all(&self, objects: Vec<Path>) -> Result<(), StorageError> {
        for object in objects {
            match self.runtime.block_on(self.store.delete(&object)) {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(io_error("delete", &self.url_of(&object), e)),
            }
        }
        Ok(())
    }
}

impl CheckpointStorage for ObjectCheckpointStorage {
    fn describe(&self) -> String {
        self.job_url.clone()
    }

    fn location(&self, id: u64, kind: SnapshotType) -> String {
        format!("{}/{}", self.job_url, location_name(id, kind))
    }

    fn init_location(&self, id: u64, kind: SnapshotType) -> Result<String, StorageError> {
        let name = location_name(id, kind);
        let location = self.location(id, kind);
        // Only this location's prefix is listed: the job's other locations may be many.
        let prefix = self.under(&[&name]);
        let existing: Vec<object_store::ObjectMeta> = self
            .runtime
            .block_on(self.store.list(Some(&prefix)).try_collect())
            .map_err(|e| io_error("list", &location, e))?;
        if !existing.is_empty() {
            return Err(StorageError::Io {
                action: "create",
                path: location,
                source: std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "the location exists already (ids are never reused)",
                ),
            });
        }
        self.put(&self.under(&[&name, MARKER]), Vec::new())?;
        Ok(location)
    }

    fn write_file(&self, location: &str, name: &str, bytes: &[u8]) -> Result<(), StorageError> {
        self.require_live(location)?;
        self.put(&self.object(location, name)?, bytes.to_vec())
    }

    fn read_range(
        &self,
        location: &str,
        name: &str,
        offset: u64,
        length: u64,
        verify: Verify<'_>,
    ) -> Result<Vec<u8>, StorageError> {
        let path = self.object(location, name)?;
        let url = self.url_of(&path);
        let size = self
            .runtime
            .block_on(self.store.head(&path))
            .map_err(|e| io_error("read", &url, e))?
            .size;
        let end = offset.saturating_add(length);
        if end > size {
            return Err(StorageError::Corrupt {
                path: url,
                reason: format!(
                    "truncated: wanted {length} bytes at offset {offset}, the object has {size}"
                ),
            });
        }
        let range: Range<u64> = offset..end;
        let bytes = self
            .runtime
            .block_on(self.store.get_range(&path, range))
            .map_err(|e| io_error("read", &url, e))?;
        if bytes.len() as u64 != length {
            return Err(StorageError::Corrupt {
                path: url,
                reason: format!(
                    "short read: wanted {length} bytes at offset {offset}, got {}",
                    bytes.len()
                ),
            });
        }
        verify(&bytes).map_err(|reason| StorageError::Corrupt { path: url, reason })?;
        Ok(bytes.to_vec())
    }

    fn write_metadata(
        &self,
        location: &str,
        metadata: &CheckpointMetadata,
    ) -> Result<(), StorageError> {
        self.require_live(location)?;
        let path = self.object(location, METADATA_FILE)?;
        let bytes = metadata.encode().map_err(|e| StorageError::Corrupt {
            path: self.url_of(&path),
            reason: format!("cannot encode: {e}"),
        })?;
        // One PUT: the object appears whole or not at all.
        self.put(&path, bytes)
    }

    fn read_metadata(&self, location: &str) -> Result<CheckpointMetadata, StorageError> {
        let path = self.object(location, METADATA_FILE)?;
        let bytes = self.get(&path)?;
        decode_metadata(self.url_of(&path), &bytes)
    }

    fn list_checkpoints(&self) -> Result<Vec<StoredCheckpoint>, StorageError> {
        self.list(SnapshotType::Checkpoint)
    }

    fn list_savepoints(&self) -> Result<Vec<StoredCheckpoint>, StorageError> {
        self.list(SnapshotType::Savepoint)
    }

    fn max_id(&self) -> Result<u64, StorageError> {
        Ok(self
            .scan()?
            .keys()
            .filter_map(|name| parse_any_location(name))
            .max()
            .unwrap_or(0))
    }

    fn discard(&self, location: &str) -> Result<(), StorageError> {
        let name = self.name_of(location)?.to_string();
        // The marker first: from then on the location is gone as a whole.
        self.delete_all(vec![self.under(&[&name, MARKER])])?;
        let objects = self
            .scan()?
            .remove(&name)
            .map(|l| l.objects)
            .unwrap_or_default();
        self.delete_all(objects)
    }

    fn lock_job(&self) -> Result<Option<JobLock>, StorageError> {
        // No file lock on object storage; the job record's epoch fences a stale holder.
        Ok(None)
    }

    fn read_job_record(&self) -> Result<Option<JobRecord>, StorageError> {
        let mut attempts = 0;
        loop {
            let Some(&newest) = self.record_versions()?.last() else {
                return Ok(None);
            };
            let path = self.under(&[JOB_RECORD_DIR, &version_name(newest)]);
            let url = self.url_of(&path);
            let bytes = match self.get(&path) {
                // Deleted as old between the listing and the read: a newer one exists.
                Err(e) if e.is_not_found() && attempts < READ_ATTEMPTS => {
                    attempts += 1;
                    continue;
                }
                read => read?,
            };
            let record = decode_record(url.clone(), &bytes)?;
            return match mismatch(&url, newest, record.sequence) {
                Some(reason) => Err(StorageError::Corrupt { path: url, reason }),
                None => Ok(Some(record)),
            };
        }
    }

    fn job_record_version(&self) -> Result<u64, StorageError> {
        Ok(self.record_versions()?.last().copied().unwrap_or(0))
    }

    fn write_job_record(&self, record: &JobRecord) -> Result<(), StorageError> {
        let version = record.sequence;
        let path = self.under(&[JOB_RECORD_DIR, &version_name(version)]);
        let bytes = record.encode().map_err(|e| StorageError::Corrupt {
            path: self.url_of(&path),
            reason: format!("cannot encode: {e}"),
        })?;
        let create = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match self
            .runtime
            .block_on(self.store.put_opts(&path, PutPayload::from(bytes), create))
        {
            Ok(_) => {}
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => {
                return Err(
                    self.record_conflict(version, format!("version {version} exists already"))
                )
            }
            Err(e @ object_store::Error::NotImplemented { .. }) => {
                return Err(StorageError::Unsupported {
                    url: self.job_url.clone(),
                    reason: format!(
                        "the job record is written with conditional puts (If-None-Match), \
                         which are turned off ({e}); turn them on (`aws_conditional_put=etag`, \
                         the default)"
                    ),
                })
            }
            Err(e) => return Err(io_error("write", &self.url_of(&path), e)),
        }
        match after_create(version, &self.record_versions()?) {
            AfterCreate::Superseded { newest } => {
                Err(self.record_conflict(version, format!("version {newest} exists")))
            }
            AfterCreate::Newest { obsolete } => {
                let old = obsolete
                    .into_iter()
                    .map(|v| self.under(&[JOB_RECORD_DIR, &version_name(v)]))
                    .collect();
                if let Err(e) = self.delete_all(old) {
                    tracing::warn!(error = %e, "cannot remove an old version of the job record");
                }
                Ok(())
            }
        }
    }

    fn shared_location(&self) -> Result<String, StorageError> {
        let marker = self.under(&[SHARED_DIR, MARKER]);
        if !self.exists(&marker)? {
            self.put(&marker, Vec::new())?;
        }
        Ok(format!("{}/{SHARED_DIR}", self.job_url))
    }

    fn shared_location_of(&self, location: &str) -> String {
        match location.rsplit_once('/') {
            Some((parent, _)) => format!("{parent}/{SHARED_DIR}"),
            None => SHARED_DIR.to_string(),
        }
    }

    fn delete_file(&self, location: &str, name: &str) -> Result<(), StorageError> {
        self.delete_all(vec![self.object(location, name)?])
    }

    fn list_files(&self, location: &str) -> Result<Vec<String>, StorageError> {
        let prefix = self.under(&[self.name_of(location)?]);
        let objects: Vec<object_store::ObjectMeta> = self
            .runtime
            .block_on(self.store.list(Some(&prefix)).try_collect())
            .map_err(|e| io_error("list", location, e))?;
        let mut names: Vec<String> = objects
            .iter()
            .filter_map(|o| o.location.filename())
            .filter(|name| *name != MARKER)
            .map(str::to_string)
            .collect();
        names.sort();
        Ok(names)
    }

    fn remove_leftovers(&self, keep: &[String]) -> Result<Vec<String>, StorageError> {
        let mut removed = Vec::new();
        for (
            name,
            LocationObjects {
                marker,
                metadata,
                objects,
            },
        ) in self.scan()?
        {
            if parse_any_location(&name).is_none() {
                continue;
            }
            let location = format!("{}/{name}", self.job_url);
            let being_deleted = !marker;
            let incomplete = marker && !metadata && !keep.contains(&location);
            if being_deleted || incomplete {
                // The marker first, as in a discard.
                let (markers, rest): (Vec<Path>, Vec<Path>) = objects
                    .into_iter()
                    .partition(|p| p.filename() == Some(MARKER));
                self.delete_all(markers)?;
                self.delete_all(rest)?;
                removed.push(location);
            }
        }
        Ok(removed)
    }
}
