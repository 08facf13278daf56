//! The keyed state-backend interface: what a backend that stores keyed state as bytes
//! provides (Flink's `KeyedStateBackend`, at the level of RocksDB's column families).
//!
//! A backend sees no Rust types. The typed state handles ([`ValueState`](crate::ValueState),
//! [`ListState`](crate::ListState), …) serialize the current key once per record, and each
//! value, with postcard, and call [`KeyedStateBackend`] with those bytes; the byte layout of
//! each [`StateKind`] is fixed here so that a backend can merge list values, split map rows
//! and write a savepoint in the canonical format without knowing the types. The heap backend
//! ([`HeapKeyedStateBackend`](crate::state::HeapKeyedStateBackend)) keeps typed values and is
//! the fast path; every other backend implements this trait.

use std::path::Path;

use crate::checkpoint::metadata::KeyedStateHandle;
use crate::error::StateError;
use crate::state::key_group::KeyGroupRange;

/// Identifies one registered state within a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StateId(pub u32);

/// What a state's values are, which fixes their byte layout.
///
/// Keys are the current key's postcard bytes (`K`); values are postcard bytes. A state with a
/// time to live appends the entry's last-access time to each value (8 bytes, a little-endian
/// `i64` of milliseconds), and its lists are rewritten rather than merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum StateKind {
    /// One value per key (value, reducing, aggregating state): `put` replaces it.
    Value,
    /// A list per key, encoded as postcard encodes a `Vec` (a varint count, then the
    /// elements). A `merge` operand is a list in the same encoding; merging appends it.
    List,
    /// One row per key and user key: the row key is the key's bytes prefixed by their length
    /// (a varint) and followed by the user key's bytes; the row value is the user value.
    /// A scan with the length-prefixed key as prefix visits one key's map.
    Map,
}

/// Declares a state to a backend.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StateDescriptor {
    /// The state's name, unique within the operator; snapshots are keyed by it.
    pub name: String,
    /// The layout of its values.
    pub kind: StateKind,
    /// Whether values carry a last-access time (state with a time to live).
    pub with_ttl: bool,
}

/// When entries of a state with a time to live count as expired, for a snapshot that leaves
/// them out: an entry last touched at `t` has expired if `t + ttl_millis <= now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpiryCutoff {
    /// The state's time to live.
    pub ttl_millis: i64,
    /// The snapshot's time.
    pub now: i64,
}

impl ExpiryCutoff {
    /// Whether an entry last touched at `touched` has expired.
    pub fn expired(&self, touched: i64) -> bool {
        touched.saturating_add(self.ttl_millis) <= self.now
    }
}

/// What a snapshot is asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnapshotRequest {
    /// The checkpoint or savepoint id.
    pub checkpoint_id: u64,
    /// Per state with a time to live whose snapshots clean up: what has expired.
    pub expiry: Vec<(StateId, ExpiryCutoff)>,
    /// Whether the snapshot must be self-contained in the canonical format, which every
    /// backend restores (a savepoint, or a backend whose checkpoints are not incremental).
    pub canonical: bool,
}

/// Whether a scan goes on after the entry just visited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanControl {
    /// Visit the next entry.
    Continue,
    /// End the scan.
    Stop,
}

/// A visitor of `(key, value)` entries during a scan.
pub type ScanVisitor<'a> = dyn FnMut(&[u8], &[u8]) -> Result<ScanControl, StateError> + 'a;

/// Keyed state of one operator subtask, stored as bytes, for the key groups it owns.
///
/// Every call names the key group of the key (computed once per record by the caller), so
/// a backend can lay entries out by key group: a subtask's range is then contiguous, and a
/// restore at another parallelism cuts key-group ranges out of the restored data.
pub trait KeyedStateBackend: Send {
    /// The backend's name as `state.backend.type` spells it (`heap`, …).
    fn name(&self) -> &'static str;

    /// The key groups this backend owns.
    fn key_group_range(&self) -> KeyGroupRange;

    /// Registers state `descriptor.name` (or returns its id if it already is); restored data
    /// of that state becomes visible. Registering a name again with another kind is an error.
    fn register_state(&mut self, descriptor: &StateDescriptor) -> Result<StateId, StateError>;

    /// Reads `key`'s value into `value` (cleared first); returns whether there is one.
    fn get(
        &mut self,
        state: StateId,
        key_group: u32,
        key: &[u8],
        value: &mut Vec<u8>,
    ) -> Result<bool, StateError>;

    /// Sets `key`'s value.
    fn put(
        &mut self,
        state: StateId,
        key_group: u32,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), StateError>;

    /// Merges `operand` into `key`'s value as its [`StateKind`] says (a list appends); with
    /// no value yet, `operand` becomes the value. Only [`StateKind::List`] states merge.
    fn merge(
        &mut self,
        state: StateId,
        key_group: u32,
        key: &[u8],
        operand: &[u8],
    ) -> Result<(), StateError>;

    /// Restored entries of state `name`, in the canonical format (per key group, postcard's
    /// `Vec<(K, V)>`, or `Vec<(K, V, i64)>` with a time to live), that the backend received
    /// from a savepoint or a heap checkpoint and has not handed out yet. The typed layer
    /// re-encodes them as rows when the state is registered; until then a snapshot carries
    /// them as they are.
    fn take_restored(&mut self, name: &str) -> Result<Vec<(u32, Vec<u8>)>, StateError>;

    /// Removes `key`'s value.
    fn delete(&mut self, state: StateId, key_group: u32, key: &[u8]) -> Result<(), StateError>;

    /// Visits, in key order, the entries of `state` in `key_group` whose key starts with
    /// `prefix` (every entry of the group for an empty prefix), until the visitor stops.
    fn scan(
        &mut self,
        state: StateId,
        key_group: u32,
        prefix: &[u8],
        visit: &mut ScanVisitor<'_>,
    ) -> Result<(), StateError>;

    /// The synchronous part of a snapshot: freezes a view of every state (no copy of the
    /// data, or a bounded one), to be written by [`KeyedBackendSnapshot::write`] on another
    /// thread while records keep flowing.
    fn snapshot(
        &mut self,
        request: &SnapshotRequest,
    ) -> Result<Box<dyn KeyedBackendSnapshot>, StateError>;

    /// Checkpoint `checkpoint_id` is complete: what it refers to is now retained by the
    /// checkpoint store, so a backend may release what it kept for earlier ones.
    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), StateError> {
        let _ = checkpoint_id;
        Ok(())
    }

    /// Checkpoint `checkpoint_id` was aborted: nothing it wrote may be referred to again.
    fn notify_checkpoint_aborted(&mut self, checkpoint_id: u64) -> Result<(), StateError> {
        let _ = checkpoint_id;
        Ok(())
    }
}

/// Where a snapshot's files go: the checkpoint's location in checkpoint storage, and the
/// job's shared location for files that later checkpoints refer to as well.
pub trait SnapshotOutput {
    /// The checkpoint (or savepoint) being written.
    fn checkpoint_id(&self) -> u64;
    /// Writes file `name` (relative to the checkpoint's location) durably.
    fn write_file(&mut self, name: &str, bytes: &[u8]) -> Result<(), StateError>;
    /// Copies the local file `source` durably into the checkpoint's location as `name`.
    fn copy_file(&mut self, name: &str, source: &Path) -> Result<(), StateError>;
    /// Copies the local file `source` durably into the job's shared location as `name`
    /// (a name no other file there has: see [`file_name`](Self::file_name)).
    fn copy_shared_file(&mut self, name: &str, source: &Path) -> Result<(), StateError>;
    /// A file name unique to this operator subtask within the checkpoint, ending in `suffix`.
    fn file_name(&self, suffix: &str) -> String;
}

/// The frozen state of a backend, written asynchronously.
pub trait KeyedBackendSnapshot: Send {
    /// Writes the snapshot's files and returns what the checkpoint metadata records of them
    /// (`None` when there is no state at all).
    fn write(
        self: Box<Self>,
        output: &mut dyn SnapshotOutput,
    ) -> Result<Option<KeyedStateHandle>, StateError>;
}

/// Appends the list `operand` to the list `existing`, both in postcard's `Vec` encoding
/// (a varint count, then the elements), without decoding the elements.
pub fn merge_list_bytes(existing: &mut Vec<u8>, operand: &[u8]) -> Result<(), StateError> {
    let (old_count, old_len) = read_varint(existing)?;
    let (add_count, add_len) = read_varint(operand)?;
    let count = old_count
        .checked_add(add_count)
        .ok_or_else(|| StateError::Corrupt {
            state: "list state".into(),
            reason: "list length overflows".into(),
        })?;
    let mut merged = Vec::with_capacity(existing.len() + operand.len());
    write_varint(count, &mut merged);
    merged.extend_from_slice(&existing[old_len..]);
    merged.extend_from_slice(&operand[add_len..]);
    *existing = merged;
    Ok(())
}

/// Reads a postcard varint (`u64`) at the start of `bytes`: the value and its length.
pub fn read_varint(bytes: &[u8]) -> Result<(u64, usize), StateError> {
    let mut value = 0u64;
    for (i, byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((value, i + 1));
        }
    }
    Err(StateError::Corrupt {
        state: "state bytes".into(),
        reason: "a length prefix is truncated or longer than 10 bytes".into(),
    })
}

/// Appends `value` as a postcard varint.
pub fn write_varint(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_lists_decode_as_one_list() {
        let mut a = postcard::to_allocvec(&vec![1u64, 300, 7]).unwrap();
        let b = postcard::to_allocvec(&vec![9u64; 200]).unwrap();
        merge_list_bytes(&mut a, &b).unwrap();
        let merged: Vec<u64> = postcard::from_bytes(&a).unwrap();
        let mut expected = vec![1u64, 300, 7];
        expected.extend(vec![9u64; 200]);
        assert_eq!(merged, expected);
    }

    #[test]
    fn truncated_varints_are_corrupt() {
        assert!(read_varint(&[0x80, 0x80]).is_err());
        assert!(read_varint(&[]).is_err());
        assert_eq!(read_varint(&[0xac, 0x02]).unwrap(), (300, 2));
    }
}
