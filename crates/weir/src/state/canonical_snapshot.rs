//! Writes the rows of a byte-level backend as a keyed state file in the canonical format —
//! the heap backend's format, which every backend restores and savepoints always use.
//!
//! Per key group and state, the canonical entries are postcard's `Vec<(K, V)>` (with a time
//! to live, `Vec<(K, V, i64)>`). Rows already hold the key's and the value's postcard bytes,
//! so entries are written by concatenation, without knowing the types: a map state's rows
//! of one key (`len ‖ key ‖ user key → user value`) are gathered into one entry whose value is
//! the map (`count ‖ (user key ‖ user value)*`); a last-access time moves from the row's 8
//! trailing bytes to postcard's varint after the value.

use std::collections::BTreeMap;

use crate::checkpoint::metadata::KeyGroupEntry;
use crate::error::StateError;
use crate::state::backend::{write_varint, ExpiryCutoff, ScanControl, ScanVisitor, StateKind};
use crate::state::key_group::KeyGroupRange;
use crate::state::keyed_state_snapshot::KeyGroupFileBuilder;
use crate::state::serialized_keyed_state::{split_map_row, trailing_timestamp};

/// A state of a byte-level backend, as the canonical writer needs to know it.
#[derive(Debug, Clone)]
pub struct CanonicalState {
    /// The state's name.
    pub name: String,
    /// Its byte layout.
    pub kind: StateKind,
    /// Whether values end with a last-access time.
    pub with_ttl: bool,
    /// Entries expired by this cutoff are left out (a state with a time to live whose
    /// snapshots clean up).
    pub expiry: Option<ExpiryCutoff>,
}

/// Visits the rows of state `state` (an index into the states given) in `key_group`, in key
/// order.
pub type RowScan<'a> = dyn FnMut(usize, u32, &mut ScanVisitor<'_>) -> Result<(), StateError> + 'a;

/// Writes `states`' rows, and `pending` canonical entries restored for states not registered
/// yet (name → key group → entries), as a canonical keyed state file: its bytes and where
/// each key group sits in them.
pub fn write_canonical(
    range: KeyGroupRange,
    states: &[CanonicalState],
    pending: &BTreeMap<String, BTreeMap<u32, Vec<u8>>>,
    scan: &mut RowScan<'_>,
) -> Result<(Vec<u8>, Vec<KeyGroupEntry>), StateError> {
    let mut file = KeyGroupFileBuilder::new();
    for key_group in range.iter() {
        let mut blocks: Vec<(&str, Vec<u8>)> = Vec::new();
        for (index, state) in states.iter().enumerate() {
            let mut entries = EntryWriter::new(state);
            scan(index, key_group, &mut |row, value| {
                entries.row(row, value)?;
                Ok(ScanControl::Continue)
            })?;
            if let Some(bytes) = entries.finish()? {
                blocks.push((&state.name, bytes));
            }
        }
        for (name, groups) in pending {
            if let Some(bytes) = groups.get(&key_group) {
                blocks.push((name, bytes.clone()));
            }
        }
        file.add_group(key_group, &blocks)?;
    }
    Ok(file.finish())
}

/// Accumulates one state's canonical entries of one key group.
struct EntryWriter<'s> {
    state: &'s CanonicalState,
    count: u64,
    body: Vec<u8>,
    /// Map state: the key being gathered, its rows' `(user key ‖ user value)` bytes, their
    /// number, and the latest last-access time among them.
    map_key: Vec<u8>,
    map_rows: Vec<u8>,
    map_count: u64,
    map_touched: i64,
}

impl<'s> EntryWriter<'s> {
    fn new(state: &'s CanonicalState) -> Self {
        Self {
            state,
            count: 0,
            body: Vec::new(),
            map_key: Vec::new(),
            map_rows: Vec::new(),
            map_count: 0,
            map_touched: i64::MIN,
        }
    }

    /// The value without its last-access time, and that time, if the state has one.
    fn split<'v>(&self, value: &'v [u8]) -> Result<(&'v [u8], Option<i64>), StateError> {
        if !self.state.with_ttl {
            return Ok((value, None));
        }
        let touched = trailing_timestamp(value)?;
        Ok((&value[..value.len() - 8], Some(touched)))
    }

    fn expired(&self, touched: Option<i64>) -> bool {
        match (self.state.expiry, touched) {
            (Some(cutoff), Some(touched)) => cutoff.expired(touched),
            _ => false,
        }
    }

    fn row(&mut self, row: &[u8], value: &[u8]) -> Result<(), StateError> {
        let (value, touched) = self.split(value)?;
        if self.expired(touched) {
            return Ok(());
        }
        match self.state.kind {
            StateKind::Value | StateKind::List => {
                self.body.extend_from_slice(row);
                self.body.extend_from_slice(value);
                if let Some(touched) = touched {
                    write_zigzag(touched, &mut self.body);
                }
                self.count += 1;
            }
            StateKind::Map => {
                let (key, user_key) = split_map_row(row)?;
                if self.map_count > 0 && key != self.map_key.as_slice() {
                    self.flush_map();
                }
                if self.map_count == 0 {
                    self.map_key.clear();
                    self.map_key.extend_from_slice(key);
                }
                self.map_rows.extend_from_slice(user_key);
                self.map_rows.extend_from_slice(value);
                self.map_count += 1;
                self.map_touched = self.map_touched.max(touched.unwrap_or(i64::MIN));
            }
        }
        Ok(())
    }

    /// Writes the gathered map of one key as an entry.
    fn flush_map(&mut self) {
        if self.map_count == 0 {
            return;
        }
        self.body.extend_from_slice(&self.map_key);
        write_varint(self.map_count, &mut self.body);
        self.body.extend_from_slice(&self.map_rows);
        if self.state.with_ttl {
            write_zigzag(self.map_touched, &mut self.body);
        }
        self.count += 1;
        self.map_rows.clear();
        self.map_count = 0;
        self.map_touched = i64::MIN;
    }

    /// The entries' bytes (`None` if there are none).
    fn finish(mut self) -> Result<Option<Vec<u8>>, StateError> {
        self.flush_map();
        if self.count == 0 {
            return Ok(None);
        }
        let mut bytes = Vec::with_capacity(self.body.len() + 10);
        write_varint(self.count, &mut bytes);
        bytes.extend_from_slice(&self.body);
        Ok(Some(bytes))
    }
}

/// Appends `value` as postcard writes an `i64` (zigzag, then varint).
fn write_zigzag(value: i64, out: &mut Vec<u8>) {
    write_varint(((value << 1) ^ (value >> 63)) as u64, out);
}
