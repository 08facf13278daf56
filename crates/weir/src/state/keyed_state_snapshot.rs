//! The asynchronous part of a keyed state snapshot: writing frozen state tables into a keyed
//! state file, key group by key group, each block checksummed so a restore reads only the
//! groups it owns and detects damage.
//!
//! File layout: `WEIRKG01`, then one block per non-empty key group. A block is the postcard
//! encoding of `Vec<(state name, entries)>`, where entries are that state's `(key, value)`
//! pairs in the group. Offsets, lengths and CRC-32s of the blocks go into the checkpoint
//! metadata.

use std::collections::BTreeMap;

use crate::checkpoint::metadata::{KeyGroupEntry, KeyGroupsStateHandle, KeyedStateHandle};
use crate::error::StateError;
use crate::state::backend::{KeyedBackendSnapshot, SnapshotOutput};
use crate::state::key_group::KeyGroupRange;
use crate::state::keyed_state_table::StateTableSnapshot;

const MAGIC: &[u8; 8] = b"WEIRKG01";

/// One key group's data: per state, the serialized entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyGroupBlock {
    /// The key group.
    pub key_group: u32,
    /// `(state name, serialized entries)`.
    pub states: Vec<(String, Vec<u8>)>,
}

/// Frozen keyed state of one operator subtask, ready to be written on another thread.
pub struct KeyedStateSnapshot {
    pub(crate) range: KeyGroupRange,
    pub(crate) states: Vec<(String, Box<dyn StateTableSnapshot>)>,
    pub(crate) pending: BTreeMap<String, BTreeMap<u32, Vec<u8>>>,
}

impl KeyedStateSnapshot {
    /// Serializes the snapshot: the file's bytes and where each key group sits in them.
    pub fn write(&self) -> Result<(Vec<u8>, Vec<KeyGroupEntry>), StateError> {
        let mut file = KeyGroupFileBuilder::new();
        for (index, key_group) in self.range.iter().enumerate() {
            let mut states: Vec<(&str, Vec<u8>)> = Vec::new();
            for (name, table) in &self.states {
                let mut entries = Vec::new();
                if table.write_group(index, &mut entries)? {
                    states.push((name, entries));
                }
            }
            for (name, groups) in &self.pending {
                if let Some(bytes) = groups.get(&key_group) {
                    states.push((name, bytes.clone()));
                }
            }
            file.add_group(key_group, &states)?;
        }
        Ok(file.finish())
    }
}

/// Builds a keyed state file in the canonical format: the magic bytes, then one checksummed
/// block per non-empty key group.
pub(crate) struct KeyGroupFileBuilder {
    file: Vec<u8>,
    entries: Vec<KeyGroupEntry>,
}

impl KeyGroupFileBuilder {
    /// An empty file.
    pub(crate) fn new() -> Self {
        Self {
            file: MAGIC.to_vec(),
            entries: Vec::new(),
        }
    }

    /// Appends `key_group`'s block of `(state name, entries)` (nothing if `states` is empty).
    pub(crate) fn add_group(
        &mut self,
        key_group: u32,
        states: &[(&str, Vec<u8>)],
    ) -> Result<(), StateError> {
        if states.is_empty() {
            return Ok(());
        }
        let offset = self.file.len() as u64;
        self.file = postcard::to_extend(states, std::mem::take(&mut self.file))?;
        let block = &self.file[offset as usize..];
        self.entries.push(KeyGroupEntry {
            key_group,
            offset,
            length: block.len() as u64,
            crc32: crc32fast::hash(block),
        });
        Ok(())
    }

    /// The file's bytes and where each key group sits in them.
    pub(crate) fn finish(self) -> (Vec<u8>, Vec<KeyGroupEntry>) {
        (self.file, self.entries)
    }
}

impl KeyedBackendSnapshot for KeyedStateSnapshot {
    fn write(
        self: Box<Self>,
        output: &mut dyn SnapshotOutput,
    ) -> Result<Option<KeyedStateHandle>, StateError> {
        let (bytes, key_groups) = KeyedStateSnapshot::write(&self)?;
        if key_groups.is_empty() {
            return Ok(None);
        }
        let file = output.file_name(".keyed");
        output.write_file(&file, &bytes)?;
        Ok(Some(KeyedStateHandle::KeyGroups(KeyGroupsStateHandle {
            file,
            key_groups,
        })))
    }
}

/// Verifies and decodes one key group block read from `file`.
pub fn decode_key_group_block(
    entry: &KeyGroupEntry,
    bytes: &[u8],
    file: &str,
) -> Result<KeyGroupBlock, StateError> {
    if bytes.len() as u64 != entry.length {
        return Err(StateError::Corrupt {
            state: file.to_string(),
            reason: format!(
                "key group {}: {} bytes, expected {}",
                entry.key_group,
                bytes.len(),
                entry.length
            ),
        });
    }
    if crc32fast::hash(bytes) != entry.crc32 {
        return Err(StateError::Corrupt {
            state: file.to_string(),
            reason: format!("key group {}: checksum mismatch", entry.key_group),
        });
    }
    let states: Vec<(String, Vec<u8>)> = postcard::from_bytes(bytes)?;
    Ok(KeyGroupBlock {
        key_group: entry.key_group,
        states,
    })
}
