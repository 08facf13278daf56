//! A byte-level backend over ordered in-memory maps, to test the typed layer's byte layouts
//! and the canonical snapshot format against the heap backend without a disk engine.

use std::collections::BTreeMap;

use crate::checkpoint::metadata::KeyedStateHandle;
use crate::error::StateError;
use crate::state::backend::{
    merge_list_bytes, KeyedBackendSnapshot, KeyedStateBackend, ScanControl, ScanVisitor,
    SnapshotOutput, SnapshotRequest, StateDescriptor, StateId, StateKind,
};
use crate::state::canonical_snapshot::{write_canonical, CanonicalState};
use crate::state::key_group::KeyGroupRange;
use crate::state::keyed_state_snapshot::KeyGroupBlock;

type Rows = BTreeMap<(u32, Vec<u8>), Vec<u8>>;

/// Rows per state, ordered by key group then key.
pub(crate) struct MemoryBackend {
    range: KeyGroupRange,
    states: Vec<StateDescriptor>,
    rows: Vec<Rows>,
    restored: BTreeMap<String, BTreeMap<u32, Vec<u8>>>,
}

impl MemoryBackend {
    /// A backend owning `range`, with restored canonical blocks of the groups it owns.
    pub(crate) fn new(range: KeyGroupRange, restored: Vec<KeyGroupBlock>) -> Self {
        let mut pending: BTreeMap<String, BTreeMap<u32, Vec<u8>>> = BTreeMap::new();
        for block in restored.into_iter().filter(|b| range.contains(b.key_group)) {
            for (name, bytes) in block.states {
                pending
                    .entry(name)
                    .or_default()
                    .insert(block.key_group, bytes);
            }
        }
        Self {
            range,
            states: Vec::new(),
            rows: Vec::new(),
            restored: pending,
        }
    }
}

impl KeyedStateBackend for MemoryBackend {
    fn name(&self) -> &'static str {
        "memory (tests)"
    }

    fn key_group_range(&self) -> KeyGroupRange {
        self.range
    }

    fn register_state(&mut self, descriptor: &StateDescriptor) -> Result<StateId, StateError> {
        if let Some(i) = self.states.iter().position(|s| s.name == descriptor.name) {
            return Ok(StateId(i as u32));
        }
        self.states.push(descriptor.clone());
        self.rows.push(Rows::new());
        Ok(StateId(self.states.len() as u32 - 1))
    }

    fn take_restored(&mut self, name: &str) -> Result<Vec<(u32, Vec<u8>)>, StateError> {
        Ok(self
            .restored
            .remove(name)
            .map(|groups| groups.into_iter().collect())
            .unwrap_or_default())
    }

    fn get(
        &mut self,
        state: StateId,
        key_group: u32,
        key: &[u8],
        value: &mut Vec<u8>,
    ) -> Result<bool, StateError> {
        value.clear();
        match self.rows[state.0 as usize].get(&(key_group, key.to_vec())) {
            Some(found) => {
                value.extend_from_slice(found);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put(
        &mut self,
        state: StateId,
        key_group: u32,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), StateError> {
        self.rows[state.0 as usize].insert((key_group, key.to_vec()), value.to_vec());
        Ok(())
    }

    fn merge(
        &mut self,
        state: StateId,
        key_group: u32,
        key: &[u8],
        operand: &[u8],
    ) -> Result<(), StateError> {
        assert_eq!(self.states[state.0 as usize].kind, StateKind::List);
        let rows = &mut self.rows[state.0 as usize];
        match rows.get_mut(&(key_group, key.to_vec())) {
            Some(existing) => merge_list_bytes(existing, operand),
            None => {
                rows.insert((key_group, key.to_vec()), operand.to_vec());
                Ok(())
            }
        }
    }

    fn delete(&mut self, state: StateId, key_group: u32, key: &[u8]) -> Result<(), StateError> {
        self.rows[state.0 as usize].remove(&(key_group, key.to_vec()));
        Ok(())
    }

    fn scan(
        &mut self,
        state: StateId,
        key_group: u32,
        prefix: &[u8],
        visit: &mut ScanVisitor<'_>,
    ) -> Result<(), StateError> {
        scan_rows(&self.rows[state.0 as usize], key_group, prefix, visit)
    }

    fn snapshot(
        &mut self,
        request: &SnapshotRequest,
    ) -> Result<Box<dyn KeyedBackendSnapshot>, StateError> {
        let states = self
            .states
            .iter()
            .enumerate()
            .map(|(i, s)| CanonicalState {
                name: s.name.clone(),
                kind: s.kind,
                with_ttl: s.with_ttl,
                expiry: request
                    .expiry
                    .iter()
                    .find(|(id, _)| id.0 as usize == i)
                    .map(|(_, cutoff)| *cutoff),
            })
            .collect();
        Ok(Box::new(MemorySnapshot {
            range: self.range,
            states,
            rows: self.rows.clone(),
            pending: self.restored.clone(),
        }))
    }
}

fn scan_rows(
    rows: &Rows,
    key_group: u32,
    prefix: &[u8],
    visit: &mut ScanVisitor<'_>,
) -> Result<(), StateError> {
    for ((_, key), value) in rows
        .range((key_group, prefix.to_vec())..)
        .take_while(|((group, key), _)| *group == key_group && key.starts_with(prefix))
    {
        if visit(key, value)? == ScanControl::Stop {
            break;
        }
    }
    Ok(())
}

struct MemorySnapshot {
    range: KeyGroupRange,
    states: Vec<CanonicalState>,
    rows: Vec<Rows>,
    pending: BTreeMap<String, BTreeMap<u32, Vec<u8>>>,
}

impl KeyedBackendSnapshot for MemorySnapshot {
    fn write(
        self: Box<Self>,
        output: &mut dyn SnapshotOutput,
    ) -> Result<Option<KeyedStateHandle>, StateError> {
        let rows = &self.rows;
        let (bytes, key_groups) = write_canonical(
            self.range,
            &self.states,
            &self.pending,
            &mut |i, group, visit| scan_rows(&rows[i], group, &[], visit),
        )?;
        if key_groups.is_empty() {
            return Ok(None);
        }
        let file = output.file_name(".keyed");
        output.write_file(&file, &bytes)?;
        Ok(Some(KeyedStateHandle::KeyGroups(
            crate::checkpoint::metadata::KeyGroupsStateHandle { file, key_groups },
        )))
    }
}
