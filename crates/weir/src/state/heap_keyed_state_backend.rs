//! The heap keyed state backend: state lives in hash maps, one map per key group per state,
//! so that snapshots and rescaling work key group by key group.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};

use hashbrown::HashMap;

use crate::error::StateError;
use crate::record::Key;
use crate::state::key_group::{KeyGroupAssigner, KeyGroupRange};

/// Distinguishes backend instances so a state handle never uses an index cached for another.
static NEXT_BACKEND_ID: AtomicU64 = AtomicU64::new(1);

/// A key resolved to its key group within one backend; obtained from
/// [`HeapKeyedStateBackend::resolve_key`], it scopes every state access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyGroupSlot {
    /// Absolute key group.
    pub key_group: u32,
    /// Index of the key group within the backend's range.
    index: usize,
}

/// Value state of every key, partitioned by key group (index = key group − range start).
struct ValueStateTable<K, V> {
    groups: Vec<HashMap<K, V>>,
}

struct RegisteredState {
    name: String,
    value_type: &'static str,
    table: Box<dyn Any + Send>,
}

fn downcast_table<K: Key, V: Send + 'static>(
    state: &mut RegisteredState,
) -> Result<&mut ValueStateTable<K, V>, StateError> {
    let (name, existing) = (&state.name, state.value_type);
    match state.table.downcast_mut::<ValueStateTable<K, V>>() {
        Some(table) => Ok(table),
        None => Err(StateError::TypeMismatch {
            state: name.clone(),
            existing,
            requested: std::any::type_name::<V>(),
        }),
    }
}

/// Keyed state of one operator subtask, for the key groups that subtask owns.
///
/// The backend does not hold a "current key": callers resolve a key to its
/// [`KeyGroupSlot`] once per record and pass both to each access, which keeps the hot path
/// free of key clones.
pub struct HeapKeyedStateBackend<K> {
    id: u64,
    range: KeyGroupRange,
    assigner: KeyGroupAssigner,
    states: Vec<RegisteredState>,
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
            _key: std::marker::PhantomData,
        }
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
    pub fn resolve_key(&mut self, key: &K) -> Result<KeyGroupSlot, StateError> {
        let group = self.assigner.key_group(key)?;
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

    /// Registers (or looks up) the value state `name`; returns its index.
    pub fn register_value_state<V: Send + 'static>(
        &mut self,
        name: &str,
    ) -> Result<usize, StateError> {
        let requested = std::any::type_name::<V>();
        if let Some(index) = self.states.iter().position(|s| s.name == name) {
            downcast_table::<K, V>(&mut self.states[index])?;
            return Ok(index);
        }
        let groups = (0..self.range.len()).map(|_| HashMap::new()).collect();
        self.states.push(RegisteredState {
            name: name.to_string(),
            value_type: requested,
            table: Box::new(ValueStateTable::<K, V> { groups }),
        });
        Ok(self.states.len() - 1)
    }

    /// The value of state `index` for `key`, mutable.
    pub fn value_mut<V: Send + 'static>(
        &mut self,
        index: usize,
        key: &K,
        slot: KeyGroupSlot,
    ) -> Result<Option<&mut V>, StateError> {
        let table = downcast_table::<K, V>(&mut self.states[index])?;
        Ok(table.groups[slot.index].get_mut(key))
    }

    /// Sets the value of state `index` for `key`.
    pub fn update<V: Send + 'static>(
        &mut self,
        index: usize,
        key: &K,
        slot: KeyGroupSlot,
        value: V,
    ) -> Result<(), StateError> {
        let group = &mut downcast_table::<K, V>(&mut self.states[index])?.groups[slot.index];
        match group.get_mut(key) {
            Some(existing) => *existing = value,
            None => {
                group.insert(key.clone(), value);
            }
        }
        Ok(())
    }

    /// Removes the value of state `index` for `key`.
    pub fn clear<V: Send + 'static>(
        &mut self,
        index: usize,
        key: &K,
        slot: KeyGroupSlot,
    ) -> Result<(), StateError> {
        downcast_table::<K, V>(&mut self.states[index])?.groups[slot.index].remove(key);
        Ok(())
    }

    /// Number of keys holding a value in state `index`, over all owned key groups.
    pub fn len<V: Send + 'static>(&mut self, index: usize) -> Result<usize, StateError> {
        Ok(downcast_table::<K, V>(&mut self.states[index])?
            .groups
            .iter()
            .map(HashMap::len)
            .sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::key_group::key_group_range_for_operator;

    #[test]
    fn values_are_scoped_to_their_key() {
        let mut backend =
            HeapKeyedStateBackend::<String>::new(8, KeyGroupRange { start: 0, end: 7 });
        let count = backend.register_value_state::<u64>("count").unwrap();
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
        let s = backend.register_value_state::<u64>("s").unwrap();
        assert!(matches!(
            backend.register_value_state::<String>("s"),
            Err(StateError::TypeMismatch { .. })
        ));
        let slot = backend.resolve_key(&1).unwrap();
        assert!(matches!(
            backend.update(s, &1, slot, "x".to_string()),
            Err(StateError::TypeMismatch { .. })
        ));
    }
}
