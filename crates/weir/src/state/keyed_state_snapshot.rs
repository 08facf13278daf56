//! The asynchronous part of a keyed state snapshot: writing frozen state tables into a keyed
//! state file, key group by key group, each block checksummed so a restore reads only the
//! groups it owns and detects damage.
//!
//! File layout: `WEIRKG01`, then one block per non-empty key group. A block is the postcard
//! encoding of `Vec<(state name, entries)>`, where entries are that state's `(key, value)`
//! pairs in the group. Offsets, lengths and CRC-32s of the blocks go into the checkpoint
//! metadata.

use std::collections::BTreeMap;

use crate::checkpoint::metadata::{KeyGroupEntry, KeyedStateHandle};
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
        let mut file = MAGIC.to_vec();
        let mut entries = Vec::new();
        let mut scratch = Vec::new();
        for (index, key_group) in self.range.iter().enumerate() {
            let mut states: Vec<(&str, Vec<u8>)> = Vec::new();
            for (name, table) in &self.states {
                if table.is_group_empty(index) {
                    continue;
                }
                scratch.clear();
                table.write_group(index, &mut scratch)?;
                states.push((name, scratch.clone()));
            }
            for (name, groups) in &self.pending {
                if let Some(bytes) = groups.get(&key_group) {
                    states.push((name, bytes.clone()));
                }
            }
            if states.is_empty() {
                continue;
            }
            let offset = file.len() as u64;
            file = postcard::to_extend(&states, file)?;
            let block = &file[offset as usize..];
            entries.push(KeyGroupEntry {
                key_group,
                offset,
                length: block.len() as u64,
                crc32: crc32fast::hash(block),
            });
        }
        Ok((file, entries))
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
        Ok(Some(KeyedStateHandle { file, key_groups }))
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
