//! The heap keyed state backend: state lives in hash maps, one map per key group per state,
//! so that snapshots and rescaling work key group by key group.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::StateError;
use crate::record::Key;
use crate::state::key_group::{KeyGroupAssigner, KeyGroupRange};
use crate::state::keyed_state_snapshot::{KeyGroupBlock, KeyedStateSnapshot};
use crate::state::keyed_state_table::{ErasedStateTable, StateTable, StateValue};
use crate::state::ttl::{StateTtlConfig, TableTtl, TtlClock};

/// Distinguishes backend instances so a state handle never uses an index cached for another.
static NEXT_BACKEND_ID: AtomicU64 = AtomicU64::new(1);

/// A key resolved to its key group within one backend; obtained from
/// [`HeapKeyedStateBackend::resolve_key`], it scopes every state access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyGroupSlot {
    /// Absolute key group.
    pub key_group: u32,
    /// Index of the key group within the backend's range.
    pub(crate) index: usize,
}

struct RegisteredState {
    name: String,
    value_type: &'static str,
    table: Box<dyn ErasedStateTable>,
}

/// Keyed state of one operator subtask, for the key groups that subtask owns.
///
/// The backend does not hold a "current key": callers resolve a key to its
/// [`KeyGroupSlot`] once per record and pass both to each access, which keeps the hot path
/// free of key clones. States are registered by name and value type; restored state waits,
/// as bytes, until its state is registered, and is carried over into snapshots until then.
pub struct HeapKeyedStateBackend<K> {
    id: u64,
    range: KeyGroupRange,
    assigner: KeyGroupAssigner,
    states: Vec<RegisteredState>,
    /// Restored bytes of states not registered yet: name → key group → entries.
    pending_restore: BTreeMap<String, BTreeMap<u32, Vec<u8>>>,
    /// The processing-time clock of state TTL.
    ttl_clock: TtlClock,
    _key: std::marker::PhantomData<fn() -> K>,
}

impl<K: Key> HeapKeyedStateBackend<K> {
    /// A backend owning `range` out of `max_parallelism` key groups.
    pub fn new(max_parallelism: u32, range: KeyGroupRange) -> Self {
        Self {
            id: NEXT_BACKEND_ID.fetch_add(1, Ordering::Relaxed),
            range,
            assigner: KeyGroupAssigner::new(max_parallelism),
            states: Vec::new(),
            pending_restore: BTreeMap::new(),
            ttl_clock: TtlClock::Wall,
            _key: std::marker::PhantomData,
        }
    }

    /// Sets the clock of state TTL (tests drive time by hand); applies to states registered
    /// afterwards.
    pub fn set_ttl_clock(&mut self, clock: TtlClock) {
        self.ttl_clock = clock;
    }

    /// Identity of this backend instance.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The key groups this backend owns.
    pub fn key_group_range(&self) -> KeyGroupRange {
        self.range
    }

    /// Finds the key group of `key` and checks that this backend owns it.
    #[inline]
    pub fn resolve_key(&mut self, key: &K) -> Result<KeyGroupSlot, StateError> {
        let group = self.assigner.key_group(key)?;
        self.slot_of_group(group)
    }

    /// The slot of key group `group`, checked to be owned.
    #[inline]
    pub fn slot_of_group(&self, group: u32) -> Result<KeyGroupSlot, StateError> {
        if !self.range.contains(group) {
            return Err(StateError::KeyGroupOutOfRange {
                key_group: group,
                range: self.range.to_string(),
            });
        }
        Ok(KeyGroupSlot {
            key_group: group,
            index: (group - self.range.start) as usize,
        })
    }

    /// Registers (or looks up) state `name` whose per-key value is `S`; returns its index.
    /// Restored data of that state is loaded now.
    pub fn register<S: StateValue>(&mut self, name: &str) -> Result<usize, StateError> {
        self.register_with_ttl::<S>(name, None)
    }

    /// Registers (or looks up) state `name`, whose entries expire after `ttl` if given.
    pub fn register_with_ttl<S: StateValue>(
        &mut self,
        name: &str,
        ttl: Option<StateTtlConfig>,
    ) -> Result<usize, StateError> {
        if let Some(index) = self.states.iter().position(|s| s.name == name) {
            self.table::<S>(index)?;
            return Ok(index);
        }
        let mut table: Box<dyn ErasedStateTable> = match ttl {
            None => Box::new(StateTable::<K, S>::new(self.range.len())),
            Some(config) => Box::new(StateTable::<K, S>::with_ttl(
                self.range.len(),
                TableTtl {
                    config,
                    clock: self.ttl_clock.clone(),
                },
            )),
        };
        if let Some(groups) = self.pending_restore.remove(name) {
            for (group, bytes) in groups {
                if self.range.contains(group) {
                    table.restore_group((group - self.range.start) as usize, &bytes)?;
                }
            }
        }
        self.states.push(RegisteredState {
            name: name.to_string(),
            value_type: std::any::type_name::<S>(),
            table,
        });
        Ok(self.states.len() - 1)
    }

    fn mismatch<S>(&self, index: usize) -> StateError {
        StateError::TypeMismatch {
            state: self.states[index].name.clone(),
            existing: self.states[index].value_type,
            requested: std::any::type_name::<S>(),
        }
    }

    /// The table of state `index`.
    pub fn table<S: StateValue>(&self, index: usize) -> Result<&StateTable<K, S>, StateError> {
        match self.states[index]
            .table
            .as_any()
            .downcast_ref::<StateTable<K, S>>()
        {
            Some(t) => Ok(t),
            None => Err(self.mismatch::<S>(index)),
        }
    }

    /// The table of state `index`, mutable.
    #[inline]
    pub fn table_mut<S: StateValue>(
        &mut self,
        index: usize,
    ) -> Result<&mut StateTable<K, S>, StateError> {
        if !self.states[index].table.as_any().is::<StateTable<K, S>>() {
            return Err(self.mismatch::<S>(index));
        }
        self.states[index]
            .table
            .as_any_mut()
            .downcast_mut()
            .ok_or_else(|| StateError::TypeMismatch {
                state: String::new(),
                existing: "",
                requested: std::any::type_name::<S>(),
            })
    }

    /// The value of state `index` for `key`, mutable.
    #[inline]
    pub fn value_mut<S: StateValue>(
        &mut self,
        index: usize,
        key: &K,
        slot: KeyGroupSlot,
    ) -> Result<Option<&mut S>, StateError> {
        Ok(self.table_mut::<S>(index)?.get_mut(slot.index, key))
    }

    /// Sets the value of state `index` for `key`.
    #[inline]
    pub fn update<S: StateValue>(
        &mut self,
        index: usize,
        key: &K,
        slot: KeyGroupSlot,
        value: S,
    ) -> Result<(), StateError> {
        self.table_mut::<S>(index)?.insert(slot.index, key, value);
        Ok(())
    }

    /// Removes the value of state `index` for `key`.
    pub fn clear<S: StateValue>(
        &mut self,
        index: usize,
        key: &K,
        slot: KeyGroupSlot,
    ) -> Result<(), StateError> {
        self.table_mut::<S>(index)?.remove(slot.index, key);
        Ok(())
    }

    /// Number of keys holding a value in state `index`.
    pub fn len<S: StateValue>(&self, index: usize) -> Result<usize, StateError> {
        Ok(self.table::<S>(index)?.len())
    }

    /// Loads restored key-group blocks; states registered later pick their part up.
    pub fn restore(&mut self, blocks: Vec<KeyGroupBlock>) -> Result<(), StateError> {
        for block in blocks {
            if !self.range.contains(block.key_group) {
                continue;
            }
            for (name, bytes) in block.states {
                match self.states.iter_mut().find(|s| s.name == name) {
                    Some(state) => state
                        .table
                        .restore_group((block.key_group - self.range.start) as usize, &bytes)?,
                    None => {
                        self.pending_restore
                            .entry(name)
                            .or_default()
                            .insert(block.key_group, bytes);
                    }
                }
            }
        }
        Ok(())
    }

    /// The synchronous part of a snapshot: freezes every state (pointer copies only).
    pub fn snapshot(&mut self) -> KeyedStateSnapshot {
        KeyedStateSnapshot {
            range: self.range,
            states: self
                .states
                .iter_mut()
                .map(|s| (s.name.clone(), s.table.snapshot()))
                .collect(),
            pending: self.pending_restore.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::key_group::key_group_range_for_operator;
    use crate::state::keyed_state_snapshot::decode_key_group_block;

    #[test]
    fn values_are_scoped_to_their_key() {
        let mut backend =
            HeapKeyedStateBackend::<String>::new(8, KeyGroupRange { start: 0, end: 7 });
        let count = backend.register::<u64>("count").unwrap();
        let (a, b) = ("a".to_string(), "b".to_string());
        let (sa, sb) = (
            backend.resolve_key(&a).unwrap(),
            backend.resolve_key(&b).unwrap(),
        );
        backend.update(count, &a, sa, 1u64).unwrap();
        assert!(backend.value_mut::<u64>(count, &b, sb).unwrap().is_none());
        backend.update(count, &b, sb, 5u64).unwrap();
        *backend.value_mut::<u64>(count, &a, sa).unwrap().unwrap() += 1;
        assert_eq!(
            backend.value_mut::<u64>(count, &a, sa).unwrap().copied(),
            Some(2)
        );
        backend.clear::<u64>(count, &a, sa).unwrap();
        assert_eq!(backend.len::<u64>(count).unwrap(), 1);
    }

    #[test]
    fn rejects_keys_of_foreign_key_groups() {
        let range = key_group_range_for_operator(128, 4, 0);
        let mut backend = HeapKeyedStateBackend::<u64>::new(128, range);
        let foreign = (0u64..10_000)
            .find(|k| !range.contains(KeyGroupAssigner::new(128).key_group(k).unwrap()))
            .unwrap();
        let err = backend.resolve_key(&foreign).unwrap_err();
        assert!(err.to_string().contains("does not belong"), "{err}");
    }

    #[test]
    fn type_mismatch_is_an_error() {
        let mut backend = HeapKeyedStateBackend::<u32>::new(1, KeyGroupRange { start: 0, end: 0 });
        let s = backend.register::<u64>("s").unwrap();
        assert!(matches!(
            backend.register::<String>("s"),
            Err(StateError::TypeMismatch { .. })
        ));
        let slot = backend.resolve_key(&1).unwrap();
        assert!(matches!(
            backend.update(s, &1, slot, "x".to_string()),
            Err(StateError::TypeMismatch { .. })
        ));
    }

    #[test]
    fn snapshot_restores_into_a_rescaled_backend_and_carries_unregistered_state() {
        let full = KeyGroupRange { start: 0, end: 15 };
        let mut backend = HeapKeyedStateBackend::<u64>::new(16, full);
        let count = backend.register::<u64>("count").unwrap();
        for k in 0..1000u64 {
            let slot = backend.resolve_key(&k).unwrap();
            backend.update(count, &k, slot, k * 2).unwrap();
        }
        let (bytes, entries) = backend.snapshot().write().unwrap();
        // Restore the upper half of the key groups only.
        let half = KeyGroupRange { start: 8, end: 15 };
        let blocks = entries
            .iter()
            .filter(|e| half.contains(e.key_group))
            .map(|e| {
                let block = &bytes[e.offset as usize..(e.offset + e.length) as usize];
                decode_key_group_block(e, block, "test").unwrap()
            })
            .collect();
        let mut restored = HeapKeyedStateBackend::<u64>::new(16, half);
        restored.restore(blocks).unwrap();
        // Not registered yet: a snapshot still carries it.
        let (again, again_entries) = restored.snapshot().write().unwrap();
        assert!(!again_entries.is_empty() && again.len() > 8);
        let count = restored.register::<u64>("count").unwrap();
        let mut owned = 0;
        for k in 0..1000u64 {
            if let Ok(slot) = restored.resolve_key(&k) {
                owned += 1;
                assert_eq!(
                    restored.value_mut::<u64>(count, &k, slot).unwrap().copied(),
                    Some(k * 2)
                );
            }
        }
        assert_eq!(restored.len::<u64>(count).unwrap(), owned);
        assert!(owned > 300 && owned < 700, "{owned}");
    }
}
