//! The checkpoint metadata: what a completed checkpoint (or savepoint) holds, operator by
//! operator and subtask by subtask, and its checksummed file format.
//!
//! Written last, atomically, by the coordinator: a checkpoint is complete exactly when its
//! metadata exists and verifies. Paths inside are relative to the checkpoint's location, so a
//! savepoint directory can be moved.

use serde::{Deserialize, Serialize};

use crate::checkpoint::checksummed;
use crate::runtime::stream_element::SnapshotType;

/// File name of the metadata inside a checkpoint location.
pub const METADATA_FILE: &str = "_metadata";
const MAGIC: &[u8; 8] = b"WEIRCHK2";
/// The magic of the format before the epoch was added, for a clear error.
const OLD_MAGIC: &[u8; 8] = b"WEIRCHK1";

/// How an operator list state is redistributed when parallelism changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ListRedistribution {
    /// Items are split evenly over the new subtasks.
    EvenSplit,
    /// Every new subtask receives every item.
    Union,
}

/// One operator list state of one subtask: its items, each serialized on its own so they can
/// be redistributed without knowing their type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListStateEntry {
    /// The state's name.
    pub name: String,
    /// How it is redistributed.
    pub mode: ListRedistribution,
    /// Serialized items.
    pub items: Vec<Vec<u8>>,
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

/// A keyed state file of one operator subtask.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyedStateHandle {
    /// File name, relative to the checkpoint location.
    pub file: String,
    /// Its key groups, in order.
    pub key_groups: Vec<KeyGroupEntry>,
}

impl KeyedStateHandle {
    /// Bytes of state in the file.
    pub fn size(&self) -> u64 {
        self.key_groups.iter().map(|k| k.length).sum()
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
    pub lists: Vec<ListStateEntry>,
}

impl OperatorSubtaskState {
    /// Bytes of state this subtask holds.
    pub fn size(&self) -> u64 {
        let lists: usize = self
            .lists
            .iter()
            .flat_map(|l| l.items.iter().map(Vec::len))
            .sum();
        self.keyed.as_ref().map_or(0, KeyedStateHandle::size) + lists as u64
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
        if bytes.starts_with(OLD_MAGIC) {
            return Err(
                "written by an older Weir (format 1, without epochs); restore it with the Weir \
                 version that wrote it"
                    .into(),
            );
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
                    keyed: Some(KeyedStateHandle {
                        file: "count-0.keyed".into(),
                        key_groups: vec![KeyGroupEntry {
                            key_group: 0,
                            offset: 8,
                            length: 10,
                            crc32: 3,
                        }],
                    }),
                    lists: vec![ListStateEntry {
                        name: "splits".into(),
                        mode: ListRedistribution::EvenSplit,
                        items: vec![vec![1, 2, 3]],
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
