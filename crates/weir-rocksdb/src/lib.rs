#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod backend;
mod keys;
pub mod large_state_job;
mod options;
mod overlay;
mod restore;
mod snapshot;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use weir::error::StateError;
use weir::state::backend::KeyedStateBackend;
use weir::state::backend_factory::{
    file_name_of, register_state_backend, BackendContext, StateBackendConfig, StateBackendFactory,
};

pub use backend::RocksDbKeyedStateBackend;
pub use options::{RocksDbOptions, MEMORY_KEY, THREADS_KEY, WRITE_BUFFER_RATIO_KEY};

/// The backend's name, as `state.backend.type` selects it.
pub const BACKEND_NAME: &str = "rocksdb";

/// What a job using this backend imports, beside `weir::prelude::*`.
pub mod prelude {
    pub use crate::RocksDbStateBackend;
}

/// Makes `state.backend.type: rocksdb` available in this process. A job's binary calls it
/// before running a job configured so (converting a [`RocksDbStateBackend`] into the job's
/// [`StateBackendConfig`] calls it too). Calling it again does nothing new.
pub fn register() {
    register_state_backend(Arc::new(RocksDbStateBackendFactory));
}

/// The RocksDB state backend of a job, configured in code (Flink's
/// `EmbeddedRocksDBStateBackend`); the same settings as the `state.backend.*` keys.
///
/// ```
/// use weir::prelude::*;
/// use weir_rocksdb::prelude::*;
///
/// let config = ExecutionConfig::default().with_state_backend(
///     RocksDbStateBackend::new()
///         .with_incremental_checkpoints(true)
///         .with_memory_budget(64 << 20)
///         .into(),
/// );
/// assert_eq!(config.state_backend.backend_type, "rocksdb");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RocksDbStateBackend {
    incremental: bool,
    local_dir: Option<PathBuf>,
    options: RocksDbOptions,
}

impl Default for RocksDbStateBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl RocksDbStateBackend {
    /// The backend with Flink's defaults: full (not incremental) checkpoints, working files
    /// under the system's temporary directory, 128 MiB of memory per keyed operator subtask.
    pub fn new() -> Self {
        Self {
            incremental: false,
            local_dir: None,
            options: RocksDbOptions::default(),
        }
    }

    /// Whether checkpoints upload only the files created since the previous one
    /// (`state.backend.incremental`).
    pub fn with_incremental_checkpoints(mut self, incremental: bool) -> Self {
        self.incremental = incremental;
        self
    }

    /// Where the databases live (`state.backend.local-dir`).
    pub fn with_local_dir(mut self, dir: impl AsRef<std::path::Path>) -> Self {
        self.local_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// The memory of each keyed operator subtask's instance, block cache and write buffers
    /// together, in bytes (`state.backend.rocksdb.memory.fixed-per-slot`).
    pub fn with_memory_budget(mut self, bytes: u64) -> Self {
        self.options.memory_budget = bytes;
        self
    }

    /// The share of the memory budget for write buffers
    /// (`state.backend.rocksdb.memory.write-buffer-ratio`).
    pub fn with_write_buffer_ratio(mut self, ratio: f64) -> Self {
        self.options.write_buffer_ratio = ratio;
        self
    }

    /// Background threads per instance (`state.backend.rocksdb.thread.num`).
    pub fn with_background_threads(mut self, threads: i32) -> Self {
        self.options.background_threads = threads;
        self
    }
}

impl From<RocksDbStateBackend> for StateBackendConfig {
    fn from(backend: RocksDbStateBackend) -> Self {
        register();
        let mut config = StateBackendConfig {
            backend_type: BACKEND_NAME.to_string(),
            incremental: backend.incremental,
            local_dir: backend.local_dir,
            ..StateBackendConfig::default()
        };
        let options = backend.options;
        for (key, value) in [
            (MEMORY_KEY, options.memory_budget.to_string()),
            (
                WRITE_BUFFER_RATIO_KEY,
                options.write_buffer_ratio.to_string(),
            ),
            (THREADS_KEY, options.background_threads.to_string()),
        ] {
            config.options.insert(key.to_string(), value);
        }
        config
    }
}

/// Creates the RocksDB backends of a job's keyed operator subtasks.
#[derive(Debug, Clone, Copy, Default)]
pub struct RocksDbStateBackendFactory;

/// Distinguishes backend instances of this process in the names of their uploads.
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(0);

/// A name part no other backend instance, in this process or any other, uses.
fn instance_name() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{:x}{:x}{:x}",
        std::process::id(),
        nanos,
        NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed)
    )
}

impl StateBackendFactory for RocksDbStateBackendFactory {
    fn name(&self) -> &'static str {
        BACKEND_NAME
    }

    fn validate(&self, config: &StateBackendConfig) -> Result<(), StateError> {
        RocksDbOptions::from_config(config).map(drop)
    }

    fn create(
        &self,
        context: BackendContext<'_>,
    ) -> Result<Box<dyn KeyedStateBackend>, StateError> {
        if context.max_parallelism > keys::MAX_KEY_GROUPS {
            return Err(StateError::Backend {
                backend: BACKEND_NAME,
                operation: "start",
                reason: format!(
                    "max parallelism {} exceeds the {} key groups it can hold",
                    context.max_parallelism,
                    keys::MAX_KEY_GROUPS
                ),
            });
        }
        let options = RocksDbOptions::from_config(context.config)?;
        let db_dir = context.working_dir.join("db");
        let open = restore::open(&context, &options, &db_dir)?;
        let naming = backend::FileNaming {
            stem: format!("{}-{}", file_name_of(context.operator_uid), context.subtask),
            instance: instance_name(),
        };
        let mut backend = RocksDbKeyedStateBackend::new(
            open,
            context.working_dir.to_path_buf(),
            context.key_groups,
            context.config.incremental,
            options.write_buffer_bytes(),
            naming,
        );
        for block in &context.restored {
            if context.key_groups.contains(block.key_group) {
                for (name, entries) in &block.states {
                    backend.keep_restored(block.key_group, name, entries)?;
                }
            }
        }
        Ok(Box::new(backend))
    }
}
