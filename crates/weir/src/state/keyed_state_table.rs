//! The storage of one keyed state: per key group, a hash map from key to the state's value.
//!
//! Each key group's map sits behind an `Arc`. A snapshot clones the `Arc`s — a few hundred
//! pointer copies, whatever the state size — and hands them to a writer thread, so its
//! synchronous part never copies the state. The task keeps going meanwhile; before it writes
//! to a key group the snapshot still holds, it serializes that group into the snapshot itself
//! (or waits while the writer does), after which the group is its own again. A group is
//! never copied: the state never needs twice its memory during a checkpoint, only the
//! serialized bytes of the groups written ahead of the writer.

use std::any::Any;
use std::sync::{Arc, Condvar, Mutex};

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
    /// The snapshot being written, which may still hold groups.
    in_flight: Option<Arc<SharedFrozen<K, S>>>,
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
            in_flight: None,
        }
    }

    /// Makes group `group` this table's alone before a write: a snapshot that still holds
    /// it gets it serialized first (by this thread, or by the writer if it is at it).
    #[inline]
    fn own_group(&mut self, group: usize) {
        if Arc::strong_count(&self.groups[group]) == 1
            && self
                .touched
                .get(group)
                .is_none_or(|t| Arc::strong_count(t) == 1)
        {
            return;
        }
        self.release_cold(group);
    }

    #[cold]
    #[inline(never)]
    fn release_cold(&mut self, group: usize) {
        let Some(frozen) = &self.in_flight else {
            return;
        };
        if Arc::strong_count(frozen) == 1 {
            // The snapshot was dropped unwritten: what it held goes with it.
            self.in_flight = None;
            return;
        }
        frozen.release(group);
    }

    /// Group `group`'s map, for writing.
    #[inline]
    fn values_mut(&mut self, group: usize) -> &mut HashMap<K, S> {
        self.own_group(group);
        Arc::make_mut(&mut self.groups[group])
    }

    /// Group `group`'s last-access times, for writing.
    #[inline]
    fn touched_mut(&mut self, group: usize) -> &mut HashMap<K, i64> {
        self.own_group(group);
        Arc::make_mut(&mut self.touched[group])
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
            self.touched_mut(group).insert(key.clone(), now);
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
        self.values_mut(group).get_mut(key)
    }

    /// Sets the value of `key`.
    #[inline]
    pub fn insert(&mut self, group: usize, key: &K, value: S) {
        if self.ttl.is_some() {
            let now = self.now();
            self.expire_on_access(group, key, now);
            self.touch(group, key, now);
        }
        let map = self.values_mut(group);
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
            self.touched_mut(group).remove(key);
        }
        if !self.groups[group].contains_key(key) {
            return None;
        }
        self.values_mut(group).remove(key)
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

/// A frozen view of one state table, writable from another thread.
pub trait StateTableSnapshot: Send {
    /// Appends group `group`'s entries, serialized, to `out`; returns whether it has any.
    /// Each group is written once.
    fn write_group(&self, group: usize, out: &mut Vec<u8>) -> Result<bool, StateError>;
}

/// What a snapshot holds of one key group: the maps as they were at the barrier.
struct GroupHold<K, S> {
    values: Arc<HashMap<K, S>>,
    touched: Option<Arc<HashMap<K, i64>>>,
}

/// Where one key group of a snapshot stands.
enum Slot<K, S> {
    /// Held, not serialized yet.
    Held(GroupHold<K, S>),
    /// The writer is serializing it.
    Writing,
    /// Serialized by the task, ahead of the writer (`None`: no entries).
    Serialized(Option<Vec<u8>>),
    /// Written out.
    Done,
}

/// A snapshot of one table, shared by the writer and the task.
struct SharedFrozen<K, S> {
    slots: Vec<Mutex<Slot<K, S>>>,
    /// Signalled when the writer finishes a group.
    written: Condvar,
    /// With a time to live: the TTL and the snapshot's time.
    ttl: Option<(TableTtl, i64)>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<K, S> SharedFrozen<K, S>
where
    K: StateValue + std::hash::Hash + Eq,
    S: StateValue,
{
    /// Serializes `hold` into `out` (appending); returns whether it has any entry.
    fn serialize(&self, hold: &GroupHold<K, S>, out: &mut Vec<u8>) -> Result<bool, StateError> {
        let buf = std::mem::take(out);
        let (bytes, any) = match (&self.ttl, &hold.touched) {
            (Some((ttl, now)), Some(touched)) => {
                let triples = TouchedTriples {
                    values: &hold.values,
                    touched,
                    drop_expired: ttl.config.cleanup_in_full_snapshot.then_some((ttl, *now)),
                };
                let any = triples.live().next().is_some();
                (postcard::to_extend(&triples, buf)?, any)
            }
            _ => (
                postcard::to_extend(&PairsOf(&hold.values), buf)?,
                !hold.values.is_empty(),
            ),
        };
        *out = bytes;
        Ok(any)
    }

    /// The task is about to write to `group`: if the snapshot still holds it, serialize it
    /// now (or wait for the writer, if it is at it), so that the hold goes.
    fn release(&self, group: usize) {
        let Some(slot) = self.slots.get(group) else {
            return;
        };
        let mut slot = lock(slot);
        loop {
            match &*slot {
                Slot::Held(_) => {
                    let Slot::Held(hold) = std::mem::replace(&mut *slot, Slot::Done) else {
                        return;
                    };
                    let mut bytes = Vec::new();
                    // On an error the writer will find no bytes and fail the snapshot.
                    *slot = match self.serialize(&hold, &mut bytes) {
                        Ok(true) => Slot::Serialized(Some(bytes)),
                        Ok(false) => Slot::Serialized(None),
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot serialize a key group for a snapshot");
                            Slot::Held(hold)
                        }
                    };
                    return;
                }
                Slot::Writing => {
                    slot = self
                        .written
                        .wait(slot)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
                Slot::Serialized(_) | Slot::Done => return,
            }
        }
    }
}

impl<K, S> StateTableSnapshot for Arc<SharedFrozen<K, S>>
where
    K: StateValue + std::hash::Hash + Eq,
    S: StateValue,
{
    fn write_group(&self, group: usize, out: &mut Vec<u8>) -> Result<bool, StateError> {
        let slot = self.slots.get(group).ok_or_else(|| StateError::Corrupt {
            state: "snapshot".into(),
            reason: format!("no key group {group} in the snapshot"),
        })?;
        let mut guard = lock(slot);
        match std::mem::replace(&mut *guard, Slot::Writing) {
            Slot::Held(hold) => {
                drop(guard);
                let written = self.serialize(&hold, out);
                // The hold goes first, so that a task woken by the signal owns the group.
                drop(hold);
                *lock(slot) = Slot::Done;
                self.written.notify_all();
                written
            }
            Slot::Serialized(bytes) => {
                *guard = Slot::Done;
                drop(guard);
                self.written.notify_all();
                Ok(match bytes {
                    Some(bytes) => {
                        out.extend_from_slice(&bytes);
                        true
                    }
                    None => false,
                })
            }
            Slot::Writing | Slot::Done => {
                *guard = Slot::Done;
                Err(StateError::Corrupt {
                    state: "snapshot".into(),
                    reason: format!("key group {group} was written twice"),
                })
            }
        }
    }
}

/// A state table behind type erasure, as the backend keeps it.
pub trait ErasedStateTable: Send {
    /// The table itself, to downcast.
    fn as_any_mut(&mut self) -> &mut dyn Any;
    /// The table itself, to downcast.
    fn as_any(&self) -> &dyn Any;
    /// Freezes the table for a snapshot (clones `Arc`s only).
    fn snapshot(&mut self) -> Box<dyn StateTableSnapshot>;
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
    fn snapshot(&mut self) -> Box<dyn StateTableSnapshot> {
        let slots = (0..self.groups.len())
            .map(|g| {
                Mutex::new(Slot::Held(GroupHold {
                    values: Arc::clone(&self.groups[g]),
                    touched: self.touched.get(g).map(Arc::clone),
                }))
            })
            .collect();
        let frozen = Arc::new(SharedFrozen {
            slots,
            written: Condvar::new(),
            ttl: self.ttl.as_ref().map(|ttl| (ttl.clone(), ttl.clock.now())),
        });
        self.in_flight = Some(Arc::clone(&frozen));
        Box::new(frozen)
    }
    fn restore_group(&mut self, group: usize, bytes: &[u8]) -> Result<(), StateError> {
        if self.ttl.is_some() {
            let triples: Vec<(K, S, i64)> = postcard::from_bytes(bytes)?;
            self.own_group(group);
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
        let map = self.values_mut(group);
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
        let frozen = ErasedStateTable::snapshot(&mut table);
        table.insert(0, &1, 11);
        table.insert(0, &3, 30);
        let mut bytes = Vec::new();
        assert!(frozen.write_group(0, &mut bytes).unwrap());
        let mut restored = StateTable::<u64, u64>::new(2);
        restored.restore_group(0, &bytes).unwrap();
        assert_eq!(restored.get(0, &1), Some(&10));
        assert_eq!(restored.get(0, &3), None);
        assert_eq!(table.get(0, &1), Some(&11));
        assert!(frozen.write_group(1, &mut Vec::new()).unwrap());
    }

    #[test]
    fn writes_during_a_snapshot_never_copy_a_group_and_the_snapshot_holds_the_barrier_state() {
        const GROUPS: usize = 64;
        let mut table = StateTable::<u64, u64>::new(GROUPS);
        for k in 0..20_000u64 {
            table.insert((k % GROUPS as u64) as usize, &k, k);
        }
        let at_barrier: Vec<HashMap<u64, u64>> =
            table.groups.iter().map(|g| (**g).clone()).collect();
        let before: Vec<*const HashMap<u64, u64>> = table.groups.iter().map(Arc::as_ptr).collect();
        let frozen = ErasedStateTable::snapshot(&mut table);
        // The writer runs on its thread while the task writes to every group.
        let writer = std::thread::spawn(move || {
            (0..GROUPS)
                .map(|g| {
                    let mut bytes = Vec::new();
                    frozen.write_group(g, &mut bytes).map(|_| bytes)
                })
                .collect::<Result<Vec<_>, _>>()
        });
        for round in 0..3u64 {
            for k in (0..20_000u64).rev() {
                let group = (k % GROUPS as u64) as usize;
                match table.get_mut(group, &k) {
                    Some(v) => *v += 1_000_000 * (round + 1),
                    None => unreachable!("every key is there"),
                }
                table.insert(group, &(k + 1_000_000), round);
            }
        }
        let written = writer.join().unwrap().unwrap();
        let after: Vec<*const HashMap<u64, u64>> = table.groups.iter().map(Arc::as_ptr).collect();
        assert_eq!(before, after, "a group was copied");
        for (g, bytes) in written.iter().enumerate() {
            let mut restored = StateTable::<u64, u64>::new(GROUPS);
            restored.restore_group(g, bytes).unwrap();
            assert_eq!(*restored.groups[g], at_barrier[g], "group {g}");
        }
        assert_eq!(table.get(0, &0), Some(&6_000_000));
    }
}
