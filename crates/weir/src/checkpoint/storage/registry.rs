//! Checkpoint storages for URL schemes, registered at run time — as Flink loads its file
//! systems as plugins: the engine serves `file://` itself, and a crate that implements, say,
//! object storage registers `s3`, `gs` and `az` when the job binary starts.

use std::path::Path;
use std::sync::{Arc, RwLock};

use super::{CheckpointStorage, StorageError};

/// Creates the storage at `url` for the job `job_name` (`local_copy`: a local-recovery copy
/// directory, if configured).
pub type StorageFactory = fn(
    url: &str,
    local_copy: Option<&Path>,
    job_name: &str,
) -> Result<Arc<dyn CheckpointStorage>, StorageError>;

static FACTORIES: RwLock<Vec<(String, StorageFactory)>> = RwLock::new(Vec::new());

/// Serves checkpoint storage URLs of `scheme` (`s3`, …) with `factory`; a later
/// registration of the same scheme replaces the earlier one.
pub fn register_storage_scheme(scheme: &str, factory: StorageFactory) {
    let mut factories = FACTORIES.write().unwrap_or_else(|p| p.into_inner());
    factories.retain(|(s, _)| s != scheme);
    factories.push((scheme.to_string(), factory));
}

/// The storage of `url`, from the factory registered for its scheme.
pub(super) fn create(
    url: &str,
    local_copy: Option<&Path>,
    job_name: &str,
) -> Result<Arc<dyn CheckpointStorage>, StorageError> {
    let scheme = url.split_once("://").map_or("", |(s, _)| s);
    let factory = FACTORIES
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|(s, _)| s == scheme)
        .map(|(_, f)| *f);
    match factory {
        Some(factory) => factory(url, local_copy, job_name),
        None => Err(StorageError::Unsupported {
            url: url.to_string(),
            reason: format!(
                "no checkpoint storage serves `{scheme}://` URLs in this binary; object storage \
                 (s3, gs, az) comes with the weir-cluster crate (`weir_cluster::object_storage::register()`, \
                 which `weir_cluster::apply` calls), and `file:///dir` is a local directory"
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::storage::MemoryCheckpointStorage;

    #[test]
    fn an_unknown_scheme_says_what_serves_it_and_a_registered_one_is_used() {
        let err = create("nosuch://bucket/x", None, "j")
            .err()
            .expect("unknown");
        assert!(
            err.to_string()
                .contains("no checkpoint storage serves `nosuch://`"),
            "{err}"
        );
        fn memory(
            _: &str,
            _: Option<&Path>,
            job: &str,
        ) -> Result<Arc<dyn CheckpointStorage>, StorageError> {
            Ok(Arc::new(MemoryCheckpointStorage::new(job)))
        }
        register_storage_scheme("testmem", memory);
        let storage = create("testmem://anything", None, "j").unwrap();
        assert!(storage.list_checkpoints().unwrap().is_empty());
    }
}
