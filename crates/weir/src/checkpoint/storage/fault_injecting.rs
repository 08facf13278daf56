//! A checkpoint storage that fails on purpose: it wraps any other storage and, at chosen or
//! at random moments, answers an operation as a failing disk or file system would — a write
//! refused for lack of space, a file left truncated, a write whose fsync fails after the
//! bytes went out, a rename that does not happen, a listing or read that errors.
//!
//! It exists to show that a checkpoint is never marked complete with a missing or partial
//! file, whatever the storage does: tests (and chaos runs of a deployment) configure it by
//! URL, `faults://<plan>/<inner storage URL or path>`, after registering the plan under its
//! name with [`register_fault_plan`]; [`FaultPlan::injected`] says what was done, so a test
//! can hold the engine's reaction against it.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use super::{CheckpointStorage, StorageError, StoredCheckpoint, Verify};
use crate::checkpoint::config::CheckpointStorageConfig;
use crate::checkpoint::job_lock::JobLock;
use crate::checkpoint::job_record::JobRecord;
use crate::checkpoint::metadata::CheckpointMetadata;
use crate::runtime::stream_element::SnapshotType;

/// The URL scheme of a fault-injecting storage.
pub const FAULTS_SCHEME: &str = "faults";

/// An operation of a checkpoint storage, as faults are aimed at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StorageOperation {
    /// Creating a checkpoint's or savepoint's location.
    CreateLocation,
    /// Writing a state file.
    WriteFile,
    /// Copying a local file in (an incremental checkpoint's files).
    CopyFileIn,
    /// Writing a checkpoint's metadata (what makes it complete).
    WriteMetadata,
    /// Writing the job record (the list of completed checkpoints).
    WriteJobRecord,
    /// Reading a state file.
    ReadFile,
    /// Reading a checkpoint's metadata.
    ReadMetadata,
    /// Reading the job record.
    ReadJobRecord,
    /// Listing checkpoints, savepoints or files.
    List,
    /// Deleting a location or a file.
    Delete,
}

impl StorageOperation {
    /// Every operation.
    pub const ALL: [StorageOperation; 10] = [
        StorageOperation::CreateLocation,
        StorageOperation::WriteFile,
        StorageOperation::CopyFileIn,
        StorageOperation::WriteMetadata,
        StorageOperation::WriteJobRecord,
        StorageOperation::ReadFile,
        StorageOperation::ReadMetadata,
        StorageOperation::ReadJobRecord,
        StorageOperation::List,
        StorageOperation::Delete,
    ];

    /// The faults that this operation can meet.
    pub fn possible_faults(self) -> &'static [StorageFault] {
        use StorageFault::*;
        match self {
            StorageOperation::WriteFile | StorageOperation::CopyFileIn => {
                &[NoSpace, Truncated, FsyncFailed]
            }
            StorageOperation::WriteMetadata | StorageOperation::WriteJobRecord => {
                &[NoSpace, FsyncFailed, RenameFailed]
            }
            StorageOperation::CreateLocation => &[NoSpace, IoError],
            StorageOperation::ReadFile
            | StorageOperation::ReadMetadata
            | StorageOperation::ReadJobRecord
            | StorageOperation::List
            | StorageOperation::Delete => &[IoError],
        }
    }
}

/// What goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StorageFault {
    /// `ENOSPC` before anything is written.
    NoSpace,
    /// Half of the bytes are written — the file is left truncated — then `ENOSPC`.
    Truncated,
    /// The bytes are written in full (and, for an atomic write, published), then an fsync
    /// fails with `EIO`: the caller cannot know whether they are durable.
    FsyncFailed,
    /// The rename that would publish an atomic write fails: nothing is replaced.
    RenameFailed,
    /// `EIO`, and nothing is done.
    IoError,
}

/// A fault that was injected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectedFault {
    /// The operation it hit.
    pub operation: StorageOperation,
    /// Which call of that operation it was (1 for the first).
    pub call: u64,
    /// What went wrong.
    pub fault: StorageFault,
    /// The location or file.
    pub path: String,
}

impl InjectedFault {
    /// The id of the checkpoint or savepoint whose location the fault hit, if any.
    pub fn snapshot_id(&self) -> Option<u64> {
        self.path.split('/').find_map(super::parse_any_location)
    }
}

/// When faults are injected: at chosen calls of an operation, and at random with a seeded
/// generator. Shared between the test and the storage it configures.
#[derive(Debug, Default)]
pub struct FaultPlan {
    state: Mutex<PlanState>,
}

#[derive(Debug, Default)]
struct PlanState {
    /// (operation, call number, fault).
    chosen: Vec<(StorageOperation, u64, StorageFault)>,
    random: Option<RandomFaults>,
    calls: HashMap<StorageOperation, u64>,
    injected: Vec<InjectedFault>,
    paused: bool,
    /// Faults wait for a first call of this operation.
    armed_by: Option<StorageOperation>,
}

#[derive(Debug)]
struct RandomFaults {
    /// SplitMix64 state.
    state: u64,
    /// Per million calls.
    per_million: u64,
    operations: Vec<StorageOperation>,
}

impl RandomFaults {
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl FaultPlan {
    /// A plan that injects nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fails call `call` (1 for the first) of `operation` with `fault`.
    pub fn fail_call(self, operation: StorageOperation, call: u64, fault: StorageFault) -> Self {
        self.lock().chosen.push((operation, call, fault));
        self
    }

    /// Fails each call of `operations` with probability `probability`, with a fault drawn
    /// among those the operation can meet; the same seed draws the same faults for the same
    /// sequence of calls.
    pub fn random(self, seed: u64, probability: f64, operations: &[StorageOperation]) -> Self {
        self.lock().random = Some(RandomFaults {
            state: seed,
            per_million: (probability.clamp(0.0, 1.0) * 1e6) as u64,
            operations: operations.to_vec(),
        });
        self
    }

    /// Injects nothing until `operation` has been called once (for instance, until the first
    /// checkpoint's location is created: the job is running).
    pub fn armed_after(self, operation: StorageOperation) -> Self {
        self.lock().armed_by = Some(operation);
        self
    }

    /// Stops (or resumes) injecting: calls still count.
    pub fn set_paused(&self, paused: bool) {
        self.lock().paused = paused;
    }

    /// The faults injected so far, in order.
    pub fn injected(&self) -> Vec<InjectedFault> {
        self.lock().injected.clone()
    }

    /// How many calls of `operation` were made.
    pub fn calls(&self, operation: StorageOperation) -> u64 {
        self.lock().calls.get(&operation).copied().unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PlanState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a call of `operation` on `path`; the fault to inject, if any.
    fn decide(&self, operation: StorageOperation, path: &str) -> Option<StorageFault> {
        let mut state = self.lock();
        let call = {
            let calls = state.calls.entry(operation).or_insert(0);
            *calls += 1;
            *calls
        };
        if state.paused
            || state
                .armed_by
                .is_some_and(|op| op != operation && !state.calls.contains_key(&op))
        {
            return None;
        }
        let chosen = state
            .chosen
            .iter()
            .find(|(op, n, _)| *op == operation && *n == call)
            .map(|(_, _, fault)| *fault);
        let fault = chosen.or_else(|| {
            let random = state.random.as_mut()?;
            if !random.operations.contains(&operation) {
                return None;
            }
            let (draw, pick) = (random.next() % 1_000_000, random.next());
            let faults = operation.possible_faults();
            (draw < random.per_million).then(|| faults[(pick % faults.len() as u64) as usize])
        })?;
        tracing::info!(?operation, call, ?fault, path, "injecting a storage fault");
        state.injected.push(InjectedFault {
            operation,
            call,
            fault,
            path: path.to_string(),
        });
        Some(fault)
    }
}

/// A checkpoint storage whose operations fail as its [`FaultPlan`] says.
pub struct FaultInjectingStorage {
    inner: Arc<dyn CheckpointStorage>,
    plan: Arc<FaultPlan>,
}

fn injected(action: &'static str, path: &str, kind: ErrorKind, what: &str) -> StorageError {
    StorageError::Io {
        action,
        path: path.to_string(),
        source: std::io::Error::new(kind, format!("{what} (injected)")),
    }
}

fn no_space(action: &'static str, path: &str) -> StorageError {
    injected(
        action,
        path,
        ErrorKind::StorageFull,
        "No space left on device",
    )
}

fn eio(action: &'static str, path: &str) -> StorageError {
    injected(action, path, ErrorKind::Other, "Input/output error")
}

impl FaultInjectingStorage {
    /// Wraps `inner`, failing as `plan` says.
    pub fn new(inner: Arc<dyn CheckpointStorage>, plan: Arc<FaultPlan>) -> Self {
        Self { inner, plan }
    }

    /// A write of `bytes` to `path`, by `write` (which writes the bytes it is given).
    fn write(
        &self,
        operation: StorageOperation,
        path: &str,
        bytes: &[u8],
        write: impl FnOnce(&[u8]) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        match self.plan.decide(operation, path) {
            None => write(bytes),
            Some(StorageFault::NoSpace) => Err(no_space("write", path)),
            Some(StorageFault::Truncated) => {
                write(&bytes[..bytes.len() / 2])?;
                Err(no_space("write", path))
            }
            Some(StorageFault::FsyncFailed) => {
                write(bytes)?;
                Err(eio("fsync", path))
            }
            Some(StorageFault::RenameFailed) => Err(eio("rename", path)),
            Some(StorageFault::IoError) => Err(eio("write", path)),
        }
    }

    /// An operation that either fails with `EIO` (any fault) or is done.
    fn other<T>(
        &self,
        operation: StorageOperation,
        action: &'static str,
        path: &str,
        run: impl FnOnce() -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        match self.plan.decide(operation, path) {
            None => run(),
            Some(StorageFault::NoSpace) => Err(no_space(action, path)),
            Some(_) => Err(eio(action, path)),
        }
    }
}

impl CheckpointStorage for FaultInjectingStorage {
    fn describe(&self) -> String {
        format!("{} (with injected faults)", self.inner.describe())
    }

    fn location(&self, id: u64, kind: SnapshotType) -> String {
        self.inner.location(id, kind)
    }

    fn init_location(&self, id: u64, kind: SnapshotType) -> Result<String, StorageError> {
        let path = self.inner.location(id, kind);
        self.other(
            StorageOperation::CreateLocation,
            "create directory",
            &path,
            || self.inner.init_location(id, kind),
        )
    }

    fn write_file(&self, location: &str, name: &str, bytes: &[u8]) -> Result<(), StorageError> {
        let path = format!("{location}/{name}");
        self.write(StorageOperation::WriteFile, &path, bytes, |bytes| {
            self.inner.write_file(location, name, bytes)
        })
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
        self.other(StorageOperation::ReadFile, "read", &path, || {
            self.inner
                .read_range(location, name, offset, length, verify)
        })
    }

    fn write_metadata(
        &self,
        location: &str,
        metadata: &CheckpointMetadata,
    ) -> Result<(), StorageError> {
        let path = format!("{location}/_metadata");
        // Atomic: written in full or not at all, whatever the fault.
        self.write(StorageOperation::WriteMetadata, &path, &[], |_| {
            self.inner.write_metadata(location, metadata)
        })
    }

    fn read_metadata(&self, location: &str) -> Result<CheckpointMetadata, StorageError> {
        self.other(StorageOperation::ReadMetadata, "read", location, || {
            self.inner.read_metadata(location)
        })
    }

    fn list_checkpoints(&self) -> Result<Vec<StoredCheckpoint>, StorageError> {
        let path = self.inner.describe();
        self.other(StorageOperation::List, "list", &path, || {
            self.inner.list_checkpoints()
        })
    }

    fn list_savepoints(&self) -> Result<Vec<StoredCheckpoint>, StorageError> {
        let path = self.inner.describe();
        self.other(StorageOperation::List, "list", &path, || {
            self.inner.list_savepoints()
        })
    }

    fn max_id(&self) -> Result<u64, StorageError> {
        let path = self.inner.describe();
        self.other(StorageOperation::List, "list", &path, || {
            self.inner.max_id()
        })
    }

    fn discard(&self, location: &str) -> Result<(), StorageError> {
        self.other(StorageOperation::Delete, "remove", location, || {
            self.inner.discard(location)
        })
    }

    fn lock_job(&self) -> Result<Option<JobLock>, StorageError> {
        self.inner.lock_job()
    }

    fn read_job_record(&self) -> Result<Option<JobRecord>, StorageError> {
        let path = self.inner.describe();
        self.other(StorageOperation::ReadJobRecord, "read", &path, || {
            self.inner.read_job_record()
        })
    }

    fn read_primary_job_record(&self) -> Result<Option<JobRecord>, StorageError> {
        let path = self.inner.describe();
        self.other(StorageOperation::ReadJobRecord, "read", &path, || {
            self.inner.read_primary_job_record()
        })
    }

    fn local_copy(&self) -> Option<String> {
        self.inner.local_copy()
    }

    fn remove_stale_copy(&self, copy: &str) -> Result<(), StorageError> {
        self.inner.remove_stale_copy(copy)
    }

    fn job_record_version(&self) -> Result<u64, StorageError> {
        let path = self.inner.describe();
        self.other(StorageOperation::ReadJobRecord, "list", &path, || {
            self.inner.job_record_version()
        })
    }

    fn write_job_record(&self, record: &JobRecord) -> Result<(), StorageError> {
        let path = format!("{}/job record", self.inner.describe());
        self.write(StorageOperation::WriteJobRecord, &path, &[], |_| {
            self.inner.write_job_record(record)
        })
    }

    fn remove_leftovers(&self, keep: &[String]) -> Result<Vec<String>, StorageError> {
        let path = self.inner.describe();
        self.other(StorageOperation::List, "list", &path, || {
            self.inner.remove_leftovers(keep)
        })
    }

    fn shared_location(&self) -> Result<String, StorageError> {
        self.inner.shared_location()
    }

    fn shared_location_of(&self, location: &str) -> String {
        self.inner.shared_location_of(location)
    }

    fn copy_file_in(&self, location: &str, name: &str, source: &Path) -> Result<(), StorageError> {
        let path = format!("{location}/{name}");
        match self.plan.decide(StorageOperation::CopyFileIn, &path) {
            None => self.inner.copy_file_in(location, name, source),
            Some(StorageFault::Truncated) => {
                let bytes = std::fs::read(source).map_err(|source_error| StorageError::Io {
                    action: "read",
                    path: source.display().to_string(),
                    source: source_error,
                })?;
                self.inner
                    .write_file(location, name, &bytes[..bytes.len() / 2])?;
                Err(no_space("write", &path))
            }
            Some(StorageFault::FsyncFailed) => {
                self.inner.copy_file_in(location, name, source)?;
                Err(eio("fsync", &path))
            }
            Some(StorageFault::NoSpace) => Err(no_space("write", &path)),
            Some(_) => Err(eio("write", &path)),
        }
    }

    fn delete_file(&self, location: &str, name: &str) -> Result<(), StorageError> {
        let path = format!("{location}/{name}");
        self.other(StorageOperation::Delete, "remove", &path, || {
            self.inner.delete_file(location, name)
        })
    }

    fn list_files(&self, location: &str) -> Result<Vec<String>, StorageError> {
        self.other(StorageOperation::List, "list", location, || {
            self.inner.list_files(location)
        })
    }
}

static PLANS: RwLock<Vec<(String, Arc<FaultPlan>)>> = RwLock::new(Vec::new());

/// Makes `plan` the one of storage URLs `faults://<name>/…`, and serves that scheme. A
/// later plan of the same name replaces the earlier one.
pub fn register_fault_plan(name: &str, plan: Arc<FaultPlan>) {
    let mut plans = PLANS.write().unwrap_or_else(|p| p.into_inner());
    plans.retain(|(n, _)| n != name);
    plans.push((name.to_string(), plan));
    super::register_storage_scheme(FAULTS_SCHEME, create);
}

/// The storage of `faults://<plan>/<inner>`: `<inner>` as a storage URL or path.
fn create(
    url: &str,
    local_copy: Option<&Path>,
    job_name: &str,
) -> Result<Arc<dyn CheckpointStorage>, StorageError> {
    let unsupported = |reason: String| StorageError::Unsupported {
        url: url.to_string(),
        reason,
    };
    let rest = url
        .strip_prefix("faults://")
        .ok_or_else(|| unsupported("expected `faults://<plan>/<storage>`".into()))?;
    let (name, inner) = rest
        .split_once('/')
        .ok_or_else(|| unsupported("expected `faults://<plan>/<storage>`".into()))?;
    let plan = PLANS
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, plan)| Arc::clone(plan))
        .ok_or_else(|| {
            unsupported(format!(
                "no fault plan `{name}` is registered (weir::checkpoint::storage::register_fault_plan)"
            ))
        })?;
    // `faults://plan//tmp/x` and `faults://plan/file:///tmp/x` are paths and URLs as given.
    let inner_config = CheckpointStorageConfig::from_url(inner);
    let inner = super::create_storage(&inner_config, local_copy, job_name)?;
    Ok(Arc::new(FaultInjectingStorage::new(inner, plan)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::storage::MemoryCheckpointStorage;

    #[test]
    fn chosen_faults_hit_their_call_and_are_recorded() {
        let plan = Arc::new(
            FaultPlan::new()
                .fail_call(StorageOperation::WriteFile, 2, StorageFault::Truncated)
                .fail_call(StorageOperation::WriteFile, 3, StorageFault::FsyncFailed),
        );
        let inner: Arc<dyn CheckpointStorage> = Arc::new(MemoryCheckpointStorage::new("j"));
        let storage = FaultInjectingStorage::new(Arc::clone(&inner), Arc::clone(&plan));
        let location = storage.init_location(7, SnapshotType::Checkpoint).unwrap();
        let bytes = [1u8, 2, 3, 4, 5, 6];
        storage.write_file(&location, "a", &bytes).unwrap();
        let err = storage.write_file(&location, "b", &bytes).unwrap_err();
        assert!(err.to_string().contains("No space left"), "{err}");
        let err = storage.write_file(&location, "c", &bytes).unwrap_err();
        assert!(err.to_string().contains("fsync"), "{err}");
        let ok: Verify<'_> = &|_| Ok(());
        assert_eq!(inner.read_range(&location, "a", 0, 6, ok).unwrap(), bytes);
        // Truncated: half of it is there; the fsync failure left it all.
        assert_eq!(
            inner.read_range(&location, "b", 0, 3, ok).unwrap(),
            bytes[..3]
        );
        assert!(inner.read_range(&location, "b", 0, 6, ok).is_err());
        assert_eq!(inner.read_range(&location, "c", 0, 6, ok).unwrap(), bytes);
        let injected = plan.injected();
        assert_eq!(injected.len(), 2);
        assert_eq!(injected[0].call, 2);
        assert_eq!(injected[0].snapshot_id(), Some(7));
        assert_eq!(plan.calls(StorageOperation::WriteFile), 3);
    }

    #[test]
    fn random_faults_replay_with_their_seed_and_pause() {
        let run = |seed| {
            let plan = Arc::new(FaultPlan::new().random(seed, 0.3, &[StorageOperation::List]));
            let storage = FaultInjectingStorage::new(
                Arc::new(MemoryCheckpointStorage::new("j")),
                Arc::clone(&plan),
            );
            let outcomes: Vec<bool> = (0..200)
                .map(|_| storage.list_checkpoints().is_ok())
                .collect();
            plan.set_paused(true);
            assert!((0..50).all(|_| storage.list_checkpoints().is_ok()));
            (outcomes, plan.injected().len())
        };
        let (a, faults) = run(5);
        assert_eq!(a, run(5).0);
        assert_ne!(a, run(6).0);
        assert!(
            (30..90).contains(&faults),
            "{faults} faults in 200 calls at 0.3"
        );
    }

    #[test]
    fn a_faults_url_needs_a_registered_plan() {
        let err = create("faults://nosuch//tmp/x", None, "j")
            .err()
            .expect("no plan");
        assert!(err.to_string().contains("no fault plan `nosuch`"), "{err}");
        register_fault_plan("unit", Arc::new(FaultPlan::new()));
        let storage = create("faults://unit/memory:", None, "j").unwrap();
        assert!(storage.describe().contains("injected faults"));
    }
}
