//! The checkpoint metadata: what a completed checkpoint (or savepoint) holds, operator by
//! operator and subtask by subtask, and its checksummed file format.
//!
//! Written last, atomically, by the coordinator: a checkpoint is complete exactly when its
//! metadata exists and verifies. Paths inside are relative to the checkpoint's location, so a
//! savepoint directory can be moved.

use serde::{Deserialize, Serialize};

use crate::checkpoint::checksummed;
use crate::runtime::stream_element::SnapshotType;
use crate::state::backend::StateDescriptor;
use crate::state::key_group::KeyGroupRange;

/// File name of the metadata inside a checkpoint location.
pub const METADATA_FILE: &str = "_metadata";
const MAGIC: &[u8; 8] = b"WEIRCHK3";
/// The magics of earlier formats, for a clear error: before the epoch was added (1), and
/// before keyed state could be incremental (2).
const OLD_MAGICS: [(&[u8; 8], &str); 2] = [
    (b"WEIRCHK1", "format 1, without epochs"),
    (b"WEIRCHK2", "format 2, before incremental checkpoints"),
];

/// How an operator list state is redistributed when parallelism changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ListRedistribution {
    /// Items are split evenly over the new subtasks.
    EvenSplit,
    /// Every new subtask receives every item.
    Union,
    /// The items of old subtask `s` go, whole, to new subtask `s mod P` (so that each old
    /// subtask's items are handled exactly once, and no subtask reads the others').
    ModuloSubtask,
    /// The items belong to key group `.0` and go to the new subtask owning it (an
    /// unaligned checkpoint's in-flight records of a keyed exchange).
    KeyGroup(u32),
    /// New subtask `j` receives the items of old subtask `j mod P_old` (the in-flight
    /// records of a broadcast exchange, which every old subtask received in full).
    Broadcast,
}

/// One operator list state of one subtask, as the task holds it: its items, each serialized
/// on its own so they can be redistributed without knowing their type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListStateEntry {
    /// The state's name.
    pub name: String,
    /// How it is redistributed.
    pub mode: ListRedistribution,
    /// Serialized items.
    pub items: Vec<Vec<u8>>,
}

/// Where one item of an operator list state lies in a state file of its checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredItem {
    /// The file, relative to the checkpoint location.
    pub file: String,
    /// Byte offset of the item.
    pub offset: u64,
    /// Its length.
    pub length: u64,
    /// CRC-32 of its bytes.
    pub crc32: u32,
}

/// One item of an operator list state in a checkpoint: small state inline in the metadata,
/// large state in a file written by the snapshot's asynchronous part
/// (`state.storage.fs.memory-threshold`, as Flink's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ListItem {
    /// The item's bytes.
    Inline(Vec<u8>),
    /// Where they are.
    Stored(StoredItem),
}

impl ListItem {
    /// The item's length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            ListItem::Inline(bytes) => bytes.len() as u64,
            ListItem::Stored(item) => item.length,
        }
    }

    /// Whether the item has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One operator list state of one subtask in a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListStateHandle {
    /// The state's name.
    pub name: String,
    /// How it is redistributed.
    pub mode: ListRedistribution,
    /// Its items.
    pub items: Vec<ListItem>,
}

impl ListStateHandle {
    /// Items kept in the metadata itself.
    pub fn inline(entry: ListStateEntry) -> Self {
        Self {
            name: entry.name,
            mode: entry.mode,
            items: entry.items.into_iter().map(ListItem::Inline).collect(),
        }
    }

    /// Bytes of its items.
    pub fn size(&self) -> u64 {
        self.items.iter().map(ListItem::len).sum()
    }
}

/// Where one key group's data sits in a keyed state file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyGroupEntry {
    /// The key group.
    pub key_group: u32,
    /// Byte offset of its block in the file.
    pub offset: u64,
    /// Length of the block.
    pub length: u64,
    /// CRC-32 of the block.
    pub crc32: u32,
}

/// A keyed state file of one operator subtask in the canonical format, which every backend
/// restores: one checksummed block per key group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyGroupsStateHandle {
    /// File name, relative to the checkpoint location.
    pub file: String,
    /// Its key groups, in order.
    pub key_groups: Vec<KeyGroupEntry>,
}

impl KeyGroupsStateHandle {
    /// Bytes of state in the file.
    pub fn size(&self) -> u64 {
        self.key_groups.iter().map(|k| k.length).sum()
    }
}

/// One file of a backend's native snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateFile {
    /// Its name in the backend's own directory (`000042.sst`, `MANIFEST-000005`).
    pub local_name: String,
    /// Its name in checkpoint storage: in the job's shared location for a shared file, in
    /// the checkpoint's location for a private one.
    pub stored_name: String,
    /// Its length in bytes.
    pub size: u64,
    /// CRC-32 of its bytes.
    pub crc32: u32,
    /// The checkpoint that uploaded it: a shared file is uploaded once, by the first
    /// checkpoint that has it, and referenced by the later ones.
    pub uploaded_in: u64,
}

/// The keyed state of one operator subtask as a backend's own files (Flink's
/// `IncrementalRemoteKeyedStateHandle`): immutable files shared between checkpoints, kept in
/// the job's shared location and reference-counted by the
/// [`SharedStateRegistry`](crate::checkpoint::shared_state_registry::SharedStateRegistry),
/// plus the few files private to this checkpoint. Only the backend that wrote it restores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncrementalKeyedStateHandle {
    /// The backend, as `state.backend.type` names it.
    pub backend: String,
    /// The key groups the files hold (a restore at another parallelism cuts its range out).
    pub key_groups: KeyGroupRange,
    /// Immutable files, in the job's shared location.
    pub shared: Vec<StateFile>,
    /// Files of this checkpoint only, in its location.
    pub private: Vec<StateFile>,
    /// The states the files hold.
    pub states: Vec<StateDescriptor>,
}

impl IncrementalKeyedStateHandle {
    /// Bytes of state in all its files.
    pub fn size(&self) -> u64 {
        self.shared
            .iter()
            .chain(&self.private)
            .map(|f| f.size)
            .sum()
    }

    /// Bytes that checkpoint `checkpoint_id` uploaded: its private files and the shared
    /// files it was the first to have.
    pub fn uploaded_size(&self, checkpoint_id: u64) -> u64 {
        let shared: u64 = self
            .shared
            .iter()
            .filter(|f| f.uploaded_in == checkpoint_id)
            .map(|f| f.size)
            .sum();
        shared + self.private.iter().map(|f| f.size).sum::<u64>()
    }
}

/// The keyed state of one operator subtask.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum KeyedStateHandle {
    /// A file in the canonical format (the heap backend, savepoints, full checkpoints).
    KeyGroups(KeyGroupsStateHandle),
    /// A backend's own files, shared between incremental checkpoints.
    Incremental(IncrementalKeyedStateHandle),
}

impl KeyedStateHandle {
    /// Bytes of state (all of it, also for an incremental handle).
    pub fn size(&self) -> u64 {
        match self {
            Self::KeyGroups(h) => h.size(),
            Self::Incremental(h) => h.size(),
        }
    }

    /// Bytes that checkpoint `checkpoint_id` wrote of this state (less than
    /// [`size`](Self::size) for an incremental handle).
    pub fn uploaded_size(&self, checkpoint_id: u64) -> u64 {
        match self {
            Self::KeyGroups(h) => h.size(),
            Self::Incremental(h) => h.uploaded_size(checkpoint_id),
        }
    }

    /// The shared files it refers to.
    pub fn shared_files(&self) -> &[StateFile] {
        match self {
            Self::KeyGroups(_) => &[],
            Self::Incremental(h) => &h.shared,
        }
    }
}

/// The state of one operator subtask.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorSubtaskState {
    /// Subtask index.
    pub subtask: u32,
    /// Keyed state, if the operator is keyed and has any.
    pub keyed: Option<KeyedStateHandle>,
    /// Operator list states (source reader positions among them).
    pub lists: Vec<ListStateHandle>,
}

impl OperatorSubtaskState {
    /// Bytes of state this subtask holds.
    pub fn size(&self) -> u64 {
        let lists: u64 = self.lists.iter().map(ListStateHandle::size).sum();
        self.keyed.as_ref().map_or(0, KeyedStateHandle::size) + lists
    }

    /// Bytes that checkpoint `checkpoint_id` wrote of this subtask's state.
    pub fn uploaded_size(&self, checkpoint_id: u64) -> u64 {
        let lists: u64 = self.lists.iter().map(ListStateHandle::size).sum();
        self.keyed
            .as_ref()
            .map_or(0, |k| k.uploaded_size(checkpoint_id))
            + lists
    }
}

/// The state of one operator, all subtasks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorState {
    /// The operator's uid (explicit, or generated from its position in the graph).
    pub uid: String,
    /// Its name when the checkpoint was taken.
    pub name: String,
    /// Its parallelism then.
    pub parallelism: u32,
    /// Its number of key groups (must not change for keyed state to be restored).
    pub max_parallelism: u32,
    /// Per subtask, in subtask order.
    pub subtasks: Vec<OperatorSubtaskState>,
    /// A source's enumerator state.
    pub coordinator: Option<Vec<u8>>,
}

/// A completed checkpoint or savepoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointMetadata {
    /// Its id.
    pub checkpoint_id: u64,
    /// Checkpoint or savepoint.
    pub kind: SnapshotType,
    /// The job it belongs to.
    pub job_name: String,
    /// The epoch of the process that took it (its fencing token).
    pub epoch: u64,
    /// Trigger time, milliseconds since the Unix epoch.
    pub timestamp_millis: u64,
    /// Per operator with state.
    pub operators: Vec<OperatorState>,
}

impl CheckpointMetadata {
    /// Total bytes of state.
    pub fn state_size(&self) -> u64 {
        self.operators
            .iter()
            .flat_map(|o| o.subtasks.iter().map(OperatorSubtaskState::size))
            .sum::<u64>()
            + self
                .operators
                .iter()
                .filter_map(|o| o.coordinator.as_ref().map(|c| c.len() as u64))
                .sum::<u64>()
    }

    /// Every shared file this checkpoint refers to.
    pub fn shared_files(&self) -> impl Iterator<Item = &StateFile> {
        self.operators
            .iter()
            .flat_map(|o| o.subtasks.iter())
            .filter_map(|s| s.keyed.as_ref())
            .flat_map(KeyedStateHandle::shared_files)
    }

    /// The state of operator `uid`.
    pub fn operator(&self, uid: &str) -> Option<&OperatorState> {
        self.operators.iter().find(|o| o.uid == uid)
    }

    /// Encodes as `MAGIC | crc32 | length | postcard payload`.
    pub fn encode(&self) -> Result<Vec<u8>, postcard::Error> {
        checksummed::encode(MAGIC, self)
    }

    /// Decodes and verifies; the error says what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<CheckpointMetadata, String> {
        for (magic, format) in OLD_MAGICS {
            if bytes.starts_with(magic) {
                return Err(format!(
                    "written by an older Weir ({format}); restore it with the Weir version that \
                     wrote it and take a savepoint there"
                ));
            }
        }
        checksummed::decode(MAGIC, "Weir checkpoint metadata file", bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> CheckpointMetadata {
        CheckpointMetadata {
            checkpoint_id: 7,
            kind: SnapshotType::Checkpoint,
            job_name: "job".into(),
            epoch: 2,
            timestamp_millis: 1,
            operators: vec![OperatorState {
                uid: "count".into(),
                name: "Keyed Count".into(),
                parallelism: 2,
                max_parallelism: 128,
                subtasks: vec![OperatorSubtaskState {
                    subtask: 0,
                    keyed: Some(KeyedStateHandle::KeyGroups(KeyGroupsStateHandle {
                        file: "count-0.keyed".into(),
                        key_groups: vec![KeyGroupEntry {
                            key_group: 0,
                            offset: 8,
                            length: 10,
                            crc32: 3,
                        }],
                    })),
                    lists: vec![ListStateHandle {
                        name: "splits".into(),
                        mode: ListRedistribution::EvenSplit,
                        items: vec![ListItem::Inline(vec![1, 2, 3])],
                    }],
                }],
                coordinator: Some(vec![9]),
            }],
        }
    }

    #[test]
    fn round_trips_and_sizes() {
        let m = sample();
        assert_eq!(CheckpointMetadata::decode(&m.encode().unwrap()).unwrap(), m);
        assert_eq!(m.state_size(), 10 + 3 + 1);
    }

    #[test]
    fn detects_corruption_and_truncation() {
        let bytes = sample().encode().unwrap();
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0xFF;
        assert!(CheckpointMetadata::decode(&flipped)
            .unwrap_err()
            .contains("checksum"));
        assert!(CheckpointMetadata::decode(&bytes[..bytes.len() - 3])
            .unwrap_err()
            .contains("truncated"));
        assert!(CheckpointMetadata::decode(&bytes[..5])
            .unwrap_err()
            .contains("truncated"));
        assert!(CheckpointMetadata::decode(b"XXXXXXXXXXXXXXXXXXXXXXXX")
            .unwrap_err()
            .contains("magic"));
    }
}
