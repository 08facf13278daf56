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
use crate::state::ttl::{TableTtl, TtlUpdateType};

/// What a keyed state's per-key value must support: cloning (copy-on-write of a key group),
/// serialization (snapshots), and crossing to the snapshot thread.
pub trait StateValue: serde::Serialize + DeserializeOwned + Clone + Send + Sync + 'static {}
impl<T: serde::Serialize + DeserializeOwned + Clone + Send + Sync + 'static> StateValue for T {}

/// The values of one state for every key of the owned key groups, and — for a state with a
/// time to live — when each key's value was last touched.
pub struct StateTable<K, S> {
    groups: Vec<Arc<HashMap<K, S>>>,
    ttl: Option<TableTtl>,
    /// Per group, when each key was last touched (a state with a time to live only).
    touched: Vec<Arc<HashMap<K, i64>>>,
    /// The next key group the incremental TTL cleanup sweeps.
    sweep_cursor: usize,
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
            ttl: None,
            touched: Vec::new(),
            sweep_cursor: 0,
        }
    }

    /// An empty table whose entries expire after `ttl`.
    pub(crate) fn with_ttl(key_groups: usize, ttl: TableTtl) -> Self {
        Self {
            touched: (0..key_groups).map(|_| Arc::new(HashMap::new())).collect(),
            ttl: Some(ttl),
            ..Self::new(key_groups)
        }
    }

    /// Whether `key`'s value in `group` has expired (never, without a time to live).
    #[inline]
    fn is_expired(&self, group: usize, key: &K, now: i64) -> bool {
        match &self.ttl {
            None => false,
            Some(ttl) => self.touched[group]
                .get(key)
                .is_none_or(|t| ttl.expired(*t, now)),
        }
    }

    fn now(&self) -> i64 {
        self.ttl.as_ref().map_or(0, |t| t.clock.now())
    }

    fn touch(&mut self, group: usize, key: &K, now: i64) {
        if self.ttl.is_some() {
            Arc::make_mut(&mut self.touched[group]).insert(key.clone(), now);
        }
    }

    /// With a time to live: removes `key` if expired (returns whether it did), and sweeps one
    /// more key group if incremental cleanup is on.
    fn expire_on_access(&mut self, group: usize, key: &K, now: i64) -> bool {
        let Some(ttl) = &self.ttl else {
            return false;
        };
        if ttl.config.incremental_cleanup && !self.groups.is_empty() {
            let next = self.sweep_cursor % self.groups.len();
            self.sweep_cursor = next + 1;
            self.sweep_group(next, now);
        }
        if self.is_expired(group, key, now) && self.groups[group].contains_key(key) {
            self.remove(group, key);
            return true;
        }
        false
    }

    /// Removes the expired entries of `group`.
    fn sweep_group(&mut self, group: usize, now: i64) {
        let Some(ttl) = self.ttl.clone() else {
            return;
        };
        let expired: Vec<K> = self.touched[group]
            .iter()
            .filter(|(_, t)| ttl.expired(**t, now))
            .map(|(k, _)| k.clone())
            .collect();
        for key in expired {
            self.remove(group, &key);
        }
    }

    /// Every key with a (live) value, with the index of its key group, in key-group order.
    pub fn keys(&self) -> Vec<(usize, K)> {
        let now = self.now();
        self.groups
            .iter()
            .enumerate()
            .flat_map(|(group, map)| map.keys().map(move |k| (group, k.clone())))
            .filter(|(group, k)| !self.is_expired(*group, k, now))
            .collect()
    }

    /// The value of `key` in group `group` (never an expired one).
    #[inline]
    pub fn get(&self, group: usize, key: &K) -> Option<&S> {
        if self.ttl.is_some() && self.is_expired(group, key, self.now()) {
            return None;
        }
        self.groups[group].get(key)
    }

    /// The value of `key`, read by a user function: with a time to live, an expired value is
    /// removed and a read refreshes the entry if so configured.
    #[inline]
    pub fn get_touch(&mut self, group: usize, key: &K) -> Option<&S> {
        if let Some(ttl) = &self.ttl {
            let refresh = ttl.config.update_type == TtlUpdateType::OnReadAndWrite;
            let now = self.now();
            if self.expire_on_access(group, key, now) {
                return None;
            }
            if refresh && self.groups[group].contains_key(key) {
                self.touch(group, key, now);
            }
        }
        self.groups[group].get(key)
    }

    /// The value of `key` in group `group`, mutable (copies the group if a snapshot holds it);
    /// for writing, so it refreshes a time to live (an expired value is gone).
    #[inline]
    pub fn get_mut(&mut self, group: usize, key: &K) -> Option<&mut S> {
        if self.ttl.is_some() {
            let now = self.now();
            if self.expire_on_access(group, key, now) {
                return None;
            }
            if self.groups[group].contains_key(key) {
                self.touch(group, key, now);
            }
        }
        Arc::make_mut(&mut self.groups[group]).get_mut(key)
    }

    /// Sets the value of `key`.
    #[inline]
    pub fn insert(&mut self, group: usize, key: &K, value: S) {
        if self.ttl.is_some() {
            let now = self.now();
            self.expire_on_access(group, key, now);
            self.touch(group, key, now);
        }
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
        if self.ttl.is_some() && self.touched[group].contains_key(key) {
            Arc::make_mut(&mut self.touched[group]).remove(key);
        }
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

/// Per key group, when each key was last touched.
type TouchedGroups<K> = Vec<Arc<HashMap<K, i64>>>;

struct FrozenTable<K, S> {
    groups: Vec<Arc<HashMap<K, S>>>,
    /// With a time to live: when each entry was touched, the TTL, and the snapshot's time.
    ttl: Option<(TouchedGroups<K>, TableTtl, i64)>,
}

/// Serializes the live entries of a TTL state as `(key, value, last touched)` triples.
struct TouchedTriples<'a, K, S> {
    values: &'a HashMap<K, S>,
    touched: &'a HashMap<K, i64>,
    /// Expired entries are left out when set: (TTL, now).
    drop_expired: Option<(&'a TableTtl, i64)>,
}

impl<K, S> TouchedTriples<'_, K, S>
where
    K: std::hash::Hash + Eq,
{
    fn live(&self) -> impl Iterator<Item = (&K, &S, i64)> {
        self.values.iter().filter_map(move |(k, v)| {
            let touched = self.touched.get(k).copied().unwrap_or(i64::MIN);
            match self.drop_expired {
                Some((ttl, now)) if ttl.expired(touched, now) => None,
                _ => Some((k, v, touched)),
            }
        })
    }
}

impl<K, S> Serialize for TouchedTriples<'_, K, S>
where
    K: serde::Serialize + std::hash::Hash + Eq,
    S: serde::Serialize,
{
    fn serialize<Z: Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        let mut seq = serializer.serialize_seq(Some(self.live().count()))?;
        for triple in self.live() {
            seq.serialize_element(&triple)?;
        }
        seq.end()
    }
}

impl<K, S> StateTableSnapshot for FrozenTable<K, S>
where
    K: StateValue + std::hash::Hash + Eq,
    S: StateValue,
{
    fn is_group_empty(&self, group: usize) -> bool {
        match &self.ttl {
            Some((touched, ttl, now)) if ttl.config.cleanup_in_full_snapshot => TouchedTriples {
                values: &self.groups[group],
                touched: &touched[group],
                drop_expired: Some((ttl, *now)),
            }
            .live()
            .next()
            .is_none(),
            _ => self.groups[group].is_empty(),
        }
    }
    fn write_group(&self, group: usize, out: &mut Vec<u8>) -> Result<(), StateError> {
        let buf = std::mem::take(out);
        *out = match &self.ttl {
            None => postcard::to_extend(&PairsOf(&self.groups[group]), buf)?,
            Some((touched, ttl, now)) => postcard::to_extend(
                &TouchedTriples {
                    values: &self.groups[group],
                    touched: &touched[group],
                    drop_expired: ttl.config.cleanup_in_full_snapshot.then_some((ttl, *now)),
                },
                buf,
            )?,
        };
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
            ttl: self
                .ttl
                .as_ref()
                .map(|ttl| (self.touched.clone(), ttl.clone(), ttl.clock.now())),
        })
    }
    fn restore_group(&mut self, group: usize, bytes: &[u8]) -> Result<(), StateError> {
        if self.ttl.is_some() {
            let triples: Vec<(K, S, i64)> = postcard::from_bytes(bytes)?;
            let (map, touched) = (
                Arc::make_mut(&mut self.groups[group]),
                Arc::make_mut(&mut self.touched[group]),
            );
            for (k, v, t) in triples {
                touched.insert(k.clone(), t);
                map.insert(k, v);
            }
            return Ok(());
        }
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
