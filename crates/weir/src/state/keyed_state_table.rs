//! The storage of one keyed state: per key group, a hash map from key to the state's value.
//!
//! Each key group's map sits behind an `Arc`. A snapshot clones the `Arc`s — a few hundred
//! pointer copies, whatever the state size — and hands them to a writer thread; a write to a
//! key group that a snapshot still holds copies that one group first (`Arc::make_mut`). So the
//! synchronous part of a snapshot never copies the state, and the task keeps going while the
//! snapshot is written.

use std::any::Any;
use std::sync::Arc;

use hashbrown::HashMap;
use serde::de::DeserializeOwned;
use serde::ser::{Serialize, SerializeSeq, Serializer};

use crate::error::StateError;

/// What a keyed state's per-key value must support: cloning (copy-on-write of a key group),
/// serialization (snapshots), and crossing to the snapshot thread.
pub trait StateValue: serde::Serialize + DeserializeOwned + Clone + Send + Sync + 'static {}
impl<T: serde::Serialize + DeserializeOwned + Clone + Send + Sync + 'static> StateValue for T {}

/// The values of one state for every key of the owned key groups.
pub struct StateTable<K, S> {
    groups: Vec<Arc<HashMap<K, S>>>,
}

impl<K, S> StateTable<K, S>
where
    K: std::hash::Hash + Eq + StateValue,
    S: StateValue,
{
    /// An empty table over `key_groups` groups.
    pub fn new(key_groups: usize) -> Self {
        Self {
            groups: (0..key_groups).map(|_| Arc::new(HashMap::new())).collect(),
        }
    }

    /// Every key with a value, with the index of its key group, in key-group order.
    pub fn keys(&self) -> Vec<(usize, K)> {
        self.groups
            .iter()
            .enumerate()
            .flat_map(|(group, map)| map.keys().map(move |k| (group, k.clone())))
            .collect()
    }

    /// The value of `key` in group `group`.
    #[inline]
    pub fn get(&self, group: usize, key: &K) -> Option<&S> {
        self.groups[group].get(key)
    }

    /// The value of `key` in group `group`, mutable (copies the group if a snapshot holds it).
    #[inline]
    pub fn get_mut(&mut self, group: usize, key: &K) -> Option<&mut S> {
        Arc::make_mut(&mut self.groups[group]).get_mut(key)
    }

    /// Sets the value of `key`.
    #[inline]
    pub fn insert(&mut self, group: usize, key: &K, value: S) {
        let map = Arc::make_mut(&mut self.groups[group]);
        match map.get_mut(key) {
            Some(existing) => *existing = value,
            None => {
                map.insert(key.clone(), value);
            }
        }
    }

    /// Removes the value of `key`.
    pub fn remove(&mut self, group: usize, key: &K) -> Option<S> {
        if !self.groups[group].contains_key(key) {
            return None;
        }
        Arc::make_mut(&mut self.groups[group]).remove(key)
    }

    /// Number of keys with a value.
    pub fn len(&self) -> usize {
        self.groups.iter().map(|g| g.len()).sum()
    }

    /// Whether no key has a value.
    pub fn is_empty(&self) -> bool {
        self.groups.iter().all(|g| g.is_empty())
    }
}

/// Serializes a map as a sequence of `(key, value)` pairs, readable as a `Vec<(K, S)>`.
struct PairsOf<'a, K, S>(&'a HashMap<K, S>);

impl<K: serde::Serialize, S: serde::Serialize> Serialize for PairsOf<'_, K, S> {
    fn serialize<Z: Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for pair in self.0.iter() {
            seq.serialize_element(&pair)?;
        }
        seq.end()
    }
}

/// A frozen view of one state table, writable from another thread.
pub trait StateTableSnapshot: Send {
    /// Whether group `group` holds no key.
    fn is_group_empty(&self, group: usize) -> bool;
    /// Appends group `group`'s entries, serialized, to `out`.
    fn write_group(&self, group: usize, out: &mut Vec<u8>) -> Result<(), StateError>;
}

struct FrozenTable<K, S> {
    groups: Vec<Arc<HashMap<K, S>>>,
}

impl<K, S> StateTableSnapshot for FrozenTable<K, S>
where
    K: StateValue,
    S: StateValue,
{
    fn is_group_empty(&self, group: usize) -> bool {
        self.groups[group].is_empty()
    }
    fn write_group(&self, group: usize, out: &mut Vec<u8>) -> Result<(), StateError> {
        let buf = std::mem::take(out);
        *out = postcard::to_extend(&PairsOf(&self.groups[group]), buf)?;
        Ok(())
    }
}

/// A state table behind type erasure, as the backend keeps it.
pub trait ErasedStateTable: Send {
    /// The table itself, to downcast.
    fn as_any_mut(&mut self) -> &mut dyn Any;
    /// The table itself, to downcast.
    fn as_any(&self) -> &dyn Any;
    /// Freezes the table for a snapshot (clones `Arc`s only).
    fn snapshot(&self) -> Box<dyn StateTableSnapshot>;
    /// Loads group `group` from bytes written by [`StateTableSnapshot::write_group`].
    fn restore_group(&mut self, group: usize, bytes: &[u8]) -> Result<(), StateError>;
}

impl<K, S> ErasedStateTable for StateTable<K, S>
where
    K: std::hash::Hash + Eq + StateValue,
    S: StateValue,
{
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn snapshot(&self) -> Box<dyn StateTableSnapshot> {
        Box::new(FrozenTable {
            groups: self.groups.clone(),
        })
    }
    fn restore_group(&mut self, group: usize, bytes: &[u8]) -> Result<(), StateError> {
        let pairs: Vec<(K, S)> = postcard::from_bytes(bytes)?;
        let map = Arc::make_mut(&mut self.groups[group]);
        map.reserve(pairs.len());
        for (k, v) in pairs {
            map.insert(k, v);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_is_isolated_from_later_writes() {
        let mut table = StateTable::<u64, u64>::new(2);
        table.insert(0, &1, 10);
        table.insert(1, &2, 20);
        let frozen = ErasedStateTable::snapshot(&table);
        table.insert(0, &1, 11);
        table.insert(0, &3, 30);
        let mut bytes = Vec::new();
        frozen.write_group(0, &mut bytes).unwrap();
        let mut restored = StateTable::<u64, u64>::new(2);
        restored.restore_group(0, &bytes).unwrap();
        assert_eq!(restored.get(0, &1), Some(&10));
        assert_eq!(restored.get(0, &3), None);
        assert_eq!(table.get(0, &1), Some(&11));
        assert!(!frozen.is_group_empty(1));
    }
}
