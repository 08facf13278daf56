//! Choosing a keyed state backend (Flink's `StateBackend`): `state.backend.type` names it,
//! and a backend other than the heap is provided by a crate that registers its factory in
//! the job's process (a Rust job is compiled code: the backend must be linked in).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use crate::checkpoint::metadata::IncrementalKeyedStateHandle;
use crate::error::StateError;
use crate::state::backend::KeyedStateBackend;
use crate::state::key_group::KeyGroupRange;
use crate::state::keyed_state_snapshot::KeyGroupBlock;

/// The name of the heap backend (`state.backend.type: heap`, Flink's `hashmap`).
pub const HEAP_BACKEND: &str = "heap";

/// Which keyed state backend a job uses, and its settings; serializable, so that every
/// process of a job reads the same choice.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StateBackendConfig {
    /// `state.backend.type`: `heap` (the default; Flink's `hashmap` is accepted too) or the
    /// name of a registered backend.
    pub backend_type: String,
    /// `state.backend.incremental`: whether checkpoints upload only what changed since the
    /// previous one, where the backend can.
    pub incremental: bool,
    /// Where a disk backend keeps its working files (`state.backend.local-dir`); a
    /// directory under the system's temporary directory if unset.
    pub local_dir: Option<PathBuf>,
    /// The backend's own options (`state.backend.<type>.*`), as written.
    pub options: BTreeMap<String, String>,
}

impl Default for StateBackendConfig {
    fn default() -> Self {
        Self {
            backend_type: HEAP_BACKEND.to_string(),
            incremental: false,
            local_dir: None,
            options: BTreeMap::new(),
        }
    }
}

impl StateBackendConfig {
    /// Whether the heap backend is chosen.
    pub fn is_heap(&self) -> bool {
        matches!(self.backend_type.as_str(), HEAP_BACKEND | "hashmap")
    }

    /// The directory under which disk backends keep their working files and restores
    /// download theirs (`state.backend.local-dir`, else `weir-state` in the system's
    /// temporary directory).
    pub fn working_root(&self) -> PathBuf {
        self.local_dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("weir-state"))
    }
}

/// A backend's own files of one restored subtask state (an incremental checkpoint),
/// downloaded and verified: each under its `local_name` in [`dir`](Self::dir). The directory
/// is removed when this is dropped; a backend takes the files by moving them out first.
#[derive(Debug)]
pub struct RestoredStateFiles {
    /// What the checkpoint recorded of them.
    pub handle: IncrementalKeyedStateHandle,
    /// Whether their shared location is this job's own: the job's next checkpoints may
    /// then refer to the shared files instead of uploading them again (a job started from
    /// another job's checkpoint must not, as that job may delete them).
    pub owned: bool,
    dir: PathBuf,
}

impl RestoredStateFiles {
    /// Files downloaded into `dir`.
    pub fn new(handle: IncrementalKeyedStateHandle, owned: bool, dir: PathBuf) -> Self {
        Self { handle, owned, dir }
    }

    /// Where the files are.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for RestoredStateFiles {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(dir = %self.dir.display(), error = %e,
                    "cannot remove downloaded state files");
            }
        }
    }
}

/// What a factory needs to create the backend of one operator subtask.
#[derive(Debug)]
pub struct BackendContext<'a> {
    /// The operator's uid (stable across runs and code changes).
    pub operator_uid: &'a str,
    /// The subtask.
    pub subtask: u32,
    /// The key groups it owns.
    pub key_groups: KeyGroupRange,
    /// The number of key groups.
    pub max_parallelism: u32,
    /// The job's backend settings.
    pub config: &'a StateBackendConfig,
    /// Where this subtask's working files may go (unique to this operator subtask and
    /// attempt; created by the factory as needed).
    pub working_dir: &'a Path,
    /// Restored state in the canonical format, for the key groups owned.
    pub restored: Vec<KeyGroupBlock>,
    /// Restored state as a backend's own files, one entry per old subtask whose key groups
    /// overlap the ones owned.
    pub restored_files: &'a [RestoredStateFiles],
}

/// Removes, once per process and directory, the working and restore directories under
/// `root` that processes which no longer run left behind (they died without cleaning up);
/// such a directory's name ends in `-<pid>-<n>`. Where the system cannot tell whether a
/// process runs, nothing is removed.
pub fn remove_dead_working_dirs(root: &Path) {
    static SWEPT: OnceLock<Mutex<Vec<PathBuf>>> = OnceLock::new();
    let mut swept = SWEPT
        .get_or_init(|| Mutex::new(Vec::new()))
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if swept.iter().any(|done| done == root) || !Path::new("/proc/self").exists() {
        return;
    }
    swept.push(root.to_path_buf());
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let mut parts = name.rsplit('-');
        let (Some(n), Some(pid)) = (parts.next(), parts.next()) else {
            continue;
        };
        let (Ok(_), Ok(pid)) = (n.parse::<u64>(), pid.parse::<u32>()) else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        match std::fs::remove_dir_all(entry.path()) {
            Ok(()) => tracing::info!(dir = %entry.path().display(),
                "removed the state backend directory of a process that died"),
            Err(e) => tracing::warn!(dir = %entry.path().display(), error = %e,
                "cannot remove the state backend directory of a process that died"),
        }
    }
}

/// `uid` as a file name: what is not an ASCII letter, digit or `-` becomes `_`.
pub fn file_name_of(uid: &str) -> String {
    uid.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Creates keyed state backends of one kind.
pub trait StateBackendFactory: Send + Sync + 'static {
    /// The name `state.backend.type` selects it by.
    fn name(&self) -> &'static str;
    /// Checks the backend's options (`StateBackendConfig::options`) before the job starts.
    fn validate(&self, config: &StateBackendConfig) -> Result<(), StateError>;
    /// A backend for one operator subtask.
    fn create(&self, context: BackendContext<'_>)
        -> Result<Box<dyn KeyedStateBackend>, StateError>;
}

fn registry() -> &'static Mutex<Vec<Arc<dyn StateBackendFactory>>> {
    static REGISTRY: OnceLock<Mutex<Vec<Arc<dyn StateBackendFactory>>>> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(Vec::new()))
}

/// Makes a backend available to `state.backend.type` in this process (a backend crate's
/// `register()` calls it; registering a name again replaces the factory).
pub fn register_state_backend(factory: Arc<dyn StateBackendFactory>) {
    let mut factories = registry().lock().unwrap_or_else(|p| p.into_inner());
    factories.retain(|f| f.name() != factory.name());
    factories.push(factory);
}

/// The factory registered under `name`.
pub fn state_backend_factory(name: &str) -> Result<Arc<dyn StateBackendFactory>, StateError> {
    let factories = registry().lock().unwrap_or_else(|p| p.into_inner());
    factories
        .iter()
        .find(|f| f.name() == name)
        .cloned()
        .ok_or_else(|| {
            let known: Vec<&str> = std::iter::once(HEAP_BACKEND)
                .chain(factories.iter().map(|f| f.name()))
                .collect();
            StateError::UnknownBackend {
                name: name.to_string(),
                known: known.join(", "),
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_directories_of_processes_that_died_are_removed() {
        let root = std::env::temp_dir().join(format!("weir-sweep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dead = std::process::Command::new("true")
            .spawn()
            .and_then(|mut child| child.wait().map(|_| child.id()))
            .unwrap();
        let mine = std::process::id();
        let names = [
            format!("op-0-{dead}-3"),
            format!("restore-op-1-{dead}-0"),
            format!("op-0-{mine}-1"),
            "unrelated".to_string(),
        ];
        for name in &names {
            std::fs::create_dir_all(root.join(name)).unwrap();
        }
        remove_dead_working_dirs(&root);
        let mut left: Vec<String> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let _ = std::fs::remove_dir_all(&root);
        if Path::new("/proc/self").exists() {
            assert_eq!(
                left,
                vec![format!("op-0-{mine}-1"), "unrelated".to_string()]
            );
        }
    }
}
