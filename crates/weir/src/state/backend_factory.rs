//! Choosing a keyed state backend (Flink's `StateBackend`): `state.backend.type` names it,
//! and a backend other than the heap is provided by a crate that registers its factory in
//! the job's process (a Rust job is compiled code: the backend must be linked in).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

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
