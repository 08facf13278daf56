//! Which shared state files the retained checkpoints refer to (Flink's
//! `SharedStateRegistry`): an incremental checkpoint uploads a file once, into the job's
//! shared location, and later checkpoints refer to it again; a file may be deleted only when
//! no retained checkpoint refers to it any more.
//!
//! Pure bookkeeping, kept by the [`CompletedCheckpointStore`] on the job manager's storage
//! worker, which also does the deleting. Each file is keyed by its name in the shared
//! location (unique: a backend never gives two files one name) and remembers the set of
//! checkpoints that refer to it, so registering or releasing a checkpoint twice changes
//! nothing. After a restart the registry is rebuilt from the metadata of the retained
//! checkpoints, and whatever the shared location holds beyond that is a leftover.
//!
//! [`CompletedCheckpointStore`]: crate::checkpoint::completed_store::CompletedCheckpointStore

use std::collections::{BTreeMap, BTreeSet};

use crate::checkpoint::metadata::{CheckpointMetadata, StateFile};

/// The references of retained checkpoints to shared state files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SharedStateRegistry {
    /// Per file, the retained checkpoints that refer to it (never empty).
    files: BTreeMap<String, BTreeSet<u64>>,
}

impl SharedStateRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Checkpoint `checkpoint_id` is retained and refers to `files`.
    pub fn register<'a>(&mut self, checkpoint_id: u64, files: impl IntoIterator<Item = &'a str>) {
        for file in files {
            self.files
                .entry(file.to_string())
                .or_default()
                .insert(checkpoint_id);
        }
    }

    /// Checkpoint `checkpoint_id` is no longer retained: returns the files no retained
    /// checkpoint refers to any more, which may now be deleted.
    pub fn release(&mut self, checkpoint_id: u64) -> Vec<String> {
        let mut unreferenced = Vec::new();
        self.files.retain(|file, checkpoints| {
            checkpoints.remove(&checkpoint_id);
            if checkpoints.is_empty() {
                unreferenced.push(file.clone());
                false
            } else {
                true
            }
        });
        unreferenced
    }

    /// Whether a retained checkpoint refers to `file`.
    pub fn is_registered(&self, file: &str) -> bool {
        self.files.contains_key(file)
    }

    /// The shared files that `metadata` refers to without having uploaded them itself, and
    /// that no retained checkpoint refers to: they may be deleted already, so a checkpoint
    /// that refers to them must not complete. (A backend refers again only to files of a
    /// checkpoint it heard completed; if a later one completed and released them before the
    /// backend heard of it, its next checkpoint would refer to files that are gone.)
    pub fn missing_references<'m>(&self, metadata: &'m CheckpointMetadata) -> Vec<&'m StateFile> {
        metadata
            .shared_files()
            .filter(|f| f.uploaded_in != metadata.checkpoint_id)
            .filter(|f| !self.is_registered(&f.stored_name))
            .collect()
    }

    /// Of `present` (the names in the shared location), those no retained checkpoint
    /// refers to.
    pub fn unreferenced<'a>(&self, present: &'a [String]) -> Vec<&'a str> {
        present
            .iter()
            .map(String::as_str)
            .filter(|name| !self.is_registered(name))
            .collect()
    }

    /// Number of files referred to.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether no file is referred to.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::metadata::{
        IncrementalKeyedStateHandle, KeyedStateHandle, OperatorState, OperatorSubtaskState,
    };
    use crate::runtime::stream_element::SnapshotType;
    use crate::state::key_group::KeyGroupRange;

    fn file(name: &str, uploaded_in: u64) -> StateFile {
        StateFile {
            local_name: format!("{name}.sst"),
            stored_name: name.to_string(),
            size: 10,
            crc32: 0,
            uploaded_in,
        }
    }

    fn metadata(id: u64, shared: Vec<StateFile>) -> CheckpointMetadata {
        CheckpointMetadata {
            checkpoint_id: id,
            kind: SnapshotType::Checkpoint,
            job_name: "j".into(),
            epoch: 1,
            timestamp_millis: 0,
            operators: vec![OperatorState {
                uid: "op".into(),
                name: "op".into(),
                parallelism: 1,
                max_parallelism: 128,
                subtasks: vec![OperatorSubtaskState {
                    subtask: 0,
                    keyed: Some(KeyedStateHandle::Incremental(IncrementalKeyedStateHandle {
                        backend: "rocksdb".into(),
                        key_groups: KeyGroupRange { start: 0, end: 127 },
                        shared,
                        private: vec![],
                        states: vec![],
                    })),
                    lists: vec![],
                }],
                coordinator: None,
            }],
        }
    }

    #[test]
    fn a_file_goes_only_when_no_retained_checkpoint_refers_to_it() {
        let mut registry = SharedStateRegistry::new();
        registry.register(1, ["a", "b"]);
        registry.register(2, ["b", "c"]);
        assert_eq!(registry.release(1), vec!["a".to_string()]);
        assert!(registry.is_registered("b"));
        registry.register(3, ["c", "d"]);
        assert_eq!(registry.release(2), vec!["b".to_string()]);
        assert_eq!(registry.release(2), Vec::<String>::new(), "releasing twice");
        registry.register(3, ["c"]);
        assert_eq!(registry.len(), 2, "registering twice");
        let mut gone = registry.release(3);
        gone.sort();
        assert_eq!(gone, vec!["c".to_string(), "d".to_string()]);
        assert!(registry.is_empty());
    }

    #[test]
    fn a_checkpoint_referring_to_a_released_file_is_caught() {
        let mut registry = SharedStateRegistry::new();
        registry.register(1, ["a", "b"]);
        registry.register(2, ["b", "c"]);
        registry.release(1);
        // Checkpoint 3 was taken by a backend that had heard only of checkpoint 1.
        let late = metadata(3, vec![file("a", 1), file("b", 1), file("e", 3)]);
        let missing: Vec<&str> = registry
            .missing_references(&late)
            .iter()
            .map(|f| f.stored_name.as_str())
            .collect();
        assert_eq!(missing, vec!["a"], "its own upload `e` is not missing");
        let fine = metadata(3, vec![file("b", 1), file("c", 2), file("e", 3)]);
        assert!(registry.missing_references(&fine).is_empty());
    }

    #[test]
    fn leftovers_are_what_no_retained_checkpoint_names() {
        let mut registry = SharedStateRegistry::new();
        registry.register(4, ["a"]);
        let present = vec!["a".to_string(), "orphan".to_string()];
        assert_eq!(registry.unreferenced(&present), vec!["orphan"]);
    }
}
