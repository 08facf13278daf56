//! The storage of one keyed state: per key group, a hash map from key to the state's value.
//!
//! Each key group's map sits behind an `Arc`. A snapshot clones the `Arc`s — a few hundred
//! pointer copies, whatever the state size — and hands them to a writer thread, so its
//! synchronous part never copies the state. The task keeps going meanwhile; before it writes
//! to a key group the snapshot still holds, it serializes that group into the snapshot itself
//! (or waits while the writer does), after which the group is its own again. A group is
//! never copied: the state never needs twice its memory during a checkpoint, only the
//! serialized bytes of the groups written ahead of the writer.
//!
//! `String` keys, the most common kind, are stored as [`CompactString`]s: 24 bytes like a
//! `String`, but a key of up to 24 bytes sits inline instead of in a heap allocation of its
//! own (which glibc rounds up to 32 bytes plus its header). That saves about a third of the
//! memory of a small state per key. The table looks such keys up by `&str`, hashes them as
//! `str` and serializes them as strings, so the snapshot format is the same either way.

use std::any::{Any, TypeId};
use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::{Arc, Condvar, Mutex};

use compact_str::CompactString;
use hashbrown::HashMap;
use serde::de::DeserializeOwned;
use serde::ser::{Serialize, SerializeSeq, Serializer};

use crate::error::StateError;
use crate::state::ttl::{TableTtl, TtlUpdateType};

/// What a keyed state's per-key value must support: cloning (copy-on-write of a key group),
/// serialization (snapshots), and crossing to the snapshot thread.
pub trait StateValue: serde::Serialize + DeserializeOwned + Clone + Send + Sync + 'static {}
impl<T: serde::Serialize + DeserializeOwned + Clone + Send + Sync + 'static> StateValue for T {}

/// A key as a table stores it, made from the key as the table is asked for it (`Q`).
trait StoredKey<Q: ?Sized>: Hash + Eq + Borrow<Q> + StateValue {
    fn to_stored(key: &Q) -> Self;
}

impl<K: Hash + Eq + StateValue> StoredKey<K> for K {
    #[inline]
    fn to_stored(key: &K) -> K {
        key.clone()
    }
}

impl StoredKey<str> for CompactString {
    #[inline]
    fn to_stored(key: &str) -> CompactString {
        CompactString::from(key)
    }
}

/// `key` as a `str`, for a table whose keys are `String`s. The type test is resolved when
/// the code is compiled for `K`, so it costs nothing at run time.
#[inline]
fn key_str<K: 'static>(key: &K) -> &str {
    match (key as &dyn Any).downcast_ref::<String>() {
        Some(key) => key.as_str(),
        None => unreachable!("only a table of String keys stores compact keys"),
    }
}

/// A stored compact key as the table's key type (`String`).
fn key_from_compact<K: 'static>(key: &CompactString) -> K {
    let mut key = Some(String::from(key.as_str()));
    match (&mut key as &mut dyn Any)
        .downcast_mut::<Option<K>>()
        .and_then(Option::take)
    {
        Some(key) => key,
        None => unreachable!("only a table of String keys stores compact keys"),
    }
}

/// The values of one state for every key of the owned key groups, and — for a state with a
/// time to live — when each key's value was last touched.
pub struct StateTable<K, S> {
    repr: Repr<K, S>,
}

/// How a table stores its keys.
enum Repr<K, S> {
    /// As `K` itself.
    Typed(GroupedMaps<K, S>),
    /// `String` keys, as compact strings.
    Compact(GroupedMaps<CompactString, S>),
}

/// Dispatches `$body` over the representation of `$table`, with `$key` (a `&K`) turned
/// into the key the representation looks up.
macro_rules! with_maps {
    ($table:expr, $maps:ident, $key:ident => $body:expr) => {
        match $table {
            Repr::Typed($maps) => $body,
            Repr::Compact($maps) => {
                let $key = key_str($key);
                $body
            }
        }
    };
}

impl<K, S> StateTable<K, S>
where
    K: Hash + Eq + StateValue,
    S: StateValue,
{
    fn from_maps(key_groups: usize, ttl: Option<TableTtl>) -> Self {
        let repr = if TypeId::of::<K>() == TypeId::of::<String>() {
            Repr::Compact(GroupedMaps::new(key_groups, ttl))
        } else {
            Repr::Typed(GroupedMaps::new(key_groups, ttl))
        };
        Self { repr }
    }

    /// An empty table over `key_groups` groups.
    pub fn new(key_groups: usize) -> Self {
        Self::from_maps(key_groups, None)
    }

    /// An empty table whose entries expire after `ttl`.
    pub(crate) fn with_ttl(key_groups: usize, ttl: TableTtl) -> Self {
        Self::from_maps(key_groups, Some(ttl))
    }

    /// Every key with a (live) value, with the index of its key group, in key-group order.
    pub fn keys(&self) -> Vec<(usize, K)> {
        match &self.repr {
            Repr::Typed(maps) => maps.keys(K::clone),
            Repr::Compact(maps) => maps.keys(key_from_compact::<K>),
        }
    }

    /// The value of `key` in group `group` (never an expired one).
    #[inline]
    pub fn get(&self, group: usize, key: &K) -> Option<&S> {
        with_maps!(&self.repr, maps, key => maps.get(group, key))
    }

    /// The value of `key`, read by a user function: with a time to live, an expired value is
    /// removed and a read refreshes the entry if so configured.
    #[inline]
    pub fn get_touch(&mut self, group: usize, key: &K) -> Option<&S> {
        with_maps!(&mut self.repr, maps, key => maps.get_touch(group, key))
    }

    /// The value of `key` in group `group`, mutable (copies the group if a snapshot holds it);
    /// for writing, so it refreshes a time to live (an expired value is gone).
    #[inline]
    pub fn get_mut(&mut self, group: usize, key: &K) -> Option<&mut S> {
        with_maps!(&mut self.repr, maps, key => maps.get_mut(group, key))
    }

    /// Sets the value of `key`.
    #[inline]
    pub fn insert(&mut self, group: usize, key: &K, value: S) {
        with_maps!(&mut self.repr, maps, key => maps.insert(group, key, value))
    }

    /// Removes the value of `key`.
    pub fn remove(&mut self, group: usize, key: &K) -> Option<S> {
        with_maps!(&mut self.repr, maps, key => maps.remove(group, key))
    }

    /// Number of keys with a value.
    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Typed(maps) => maps.len(),
            Repr::Compact(maps) => maps.len(),
        }
    }

    /// Whether no key has a value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The maps of one table, over the key type they store (`KS`).
struct GroupedMaps<KS, S> {
    groups: Vec<Arc<HashMap<KS, S>>>,
    ttl: Option<TableTtl>,
    /// Per group, when each key was last touched (a state with a time to live only).
    touched: Vec<Arc<HashMap<KS, i64>>>,
    /// The next key group the incremental TTL cleanup sweeps.
    sweep_cursor: usize,
    /// The snapshot being written, which may still hold groups.
    in_flight: Option<Arc<SharedFrozen<KS, S>>>,
}

impl<KS, S> GroupedMaps<KS, S>
where
    KS: Hash + Eq + StateValue,
    S: StateValue,
{
    fn new(key_groups: usize, ttl: Option<TableTtl>) -> Self {
        fn maps<KS, V>(key_groups: usize) -> Vec<Arc<HashMap<KS, V>>> {
            (0..key_groups).map(|_| Arc::new(HashMap::new())).collect()
        }
        Self {
            groups: maps(key_groups),
            touched: if ttl.is_some() {
                maps(key_groups)
            } else {
                Vec::new()
            },
            ttl,
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
    fn values_mut(&mut self, group: usize) -> &mut HashMap<KS, S> {
        self.own_group(group);
        Arc::make_mut(&mut self.groups[group])
    }

    /// Group `group`'s last-access times, for writing.
    #[inline]
    fn touched_mut(&mut self, group: usize) -> &mut HashMap<KS, i64> {
        self.own_group(group);
        Arc::make_mut(&mut self.touched[group])
    }

    /// Whether `key`'s value in `group` has expired (never, without a time to live).
    #[inline]
    fn is_expired<Q: ?Sized + Hash + Eq>(&self, group: usize, key: &Q, now: i64) -> bool
    where
        KS: Borrow<Q>,
    {
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

    fn touch<Q: ?Sized + Hash + Eq>(&mut self, group: usize, key: &Q, now: i64)
    where
        KS: StoredKey<Q>,
    {
        if self.ttl.is_some() {
            let touched = self.touched_mut(group);
            match touched.get_mut(key) {
                Some(t) => *t = now,
                None => {
                    touched.insert(KS::to_stored(key), now);
                }
            }
        }
    }

    /// With a time to live: removes `key` if expired (returns whether it did), and sweeps one
    /// more key group if incremental cleanup is on.
    fn expire_on_access<Q: ?Sized + Hash + Eq>(&mut self, group: usize, key: &Q, now: i64) -> bool
    where
        KS: Borrow<Q>,
    {
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
        let expired: Vec<KS> = self.touched[group]
            .iter()
            .filter(|(_, t)| ttl.expired(**t, now))
            .map(|(k, _)| k.clone())
            .collect();
        for key in expired {
            self.remove::<KS>(group, &key);
        }
    }

    /// Every key with a (live) value as `K` (made by `to_key`), with its key group.
    fn keys<K>(&self, to_key: impl Fn(&KS) -> K) -> Vec<(usize, K)> {
        let now = self.now();
        self.groups
            .iter()
            .enumerate()
            .flat_map(|(group, map)| map.keys().map(move |k| (group, k)))
            .filter(|(group, k)| !self.is_expired::<KS>(*group, k, now))
            .map(|(group, k)| (group, to_key(k)))
            .collect()
    }

    #[inline]
    fn get<Q: ?Sized + Hash + Eq>(&self, group: usize, key: &Q) -> Option<&S>
    where
        KS: Borrow<Q>,
    {
        if self.ttl.is_some() && self.is_expired(group, key, self.now()) {
            return None;
        }
        self.groups[group].get(key)
    }

    #[inline]
    fn get_touch<Q: ?Sized + Hash + Eq>(&mut self, group: usize, key: &Q) -> Option<&S>
    where
        KS: StoredKey<Q>,
    {
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

    #[inline]
    fn get_mut<Q: ?Sized + Hash + Eq>(&mut self, group: usize, key: &Q) -> Option<&mut S>
    where
        KS: StoredKey<Q>,
    {
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

    #[inline]
    fn insert<Q: ?Sized + Hash + Eq>(&mut self, group: usize, key: &Q, value: S)
    where
        KS: StoredKey<Q>,
    {
        if self.ttl.is_some() {
            let now = self.now();
            self.expire_on_access(group, key, now);
            self.touch(group, key, now);
        }
        let map = self.values_mut(group);
        match map.get_mut(key) {
            Some(existing) => *existing = value,
            None => {
                map.insert(KS::to_stored(key), value);
            }
        }
    }

    fn remove<Q: ?Sized + Hash + Eq>(&mut self, group: usize, key: &Q) -> Option<S>
    where
        KS: Borrow<Q>,
    {
        if self.ttl.is_some() && self.touched[group].contains_key(key) {
            self.touched_mut(group).remove(key);
        }
        if !self.groups[group].contains_key(key) {
            return None;
        }
        self.values_mut(group).remove(key)
    }

    fn len(&self) -> usize {
        self.groups.iter().map(|g| g.len()).sum()
    }

    /// Freezes the maps for a snapshot (clones `Arc`s only).
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

    /// Loads group `group` from bytes written by a snapshot.
    fn restore_group(&mut self, group: usize, bytes: &[u8]) -> Result<(), StateError> {
        if self.ttl.is_some() {
            let triples: Vec<(KS, S, i64)> = postcard::from_bytes(bytes)?;
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
        let pairs: Vec<(KS, S)> = postcard::from_bytes(bytes)?;
        let map = self.values_mut(group);
        map.reserve(pairs.len());
        for (k, v) in pairs {
            map.insert(k, v);
        }
        Ok(())
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
    K: Hash + Eq + StateValue,
    S: StateValue,
{
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn snapshot(&mut self) -> Box<dyn StateTableSnapshot> {
        match &mut self.repr {
            Repr::Typed(maps) => maps.snapshot(),
            Repr::Compact(maps) => maps.snapshot(),
        }
    }
    fn restore_group(&mut self, group: usize, bytes: &[u8]) -> Result<(), StateError> {
        match &mut self.repr {
            Repr::Typed(maps) => maps.restore_group(group, bytes),
            Repr::Compact(maps) => maps.restore_group(group, bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed_groups<K, S>(table: &StateTable<K, S>) -> &[Arc<HashMap<K, S>>] {
        match &table.repr {
            Repr::Typed(maps) => &maps.groups,
            Repr::Compact(_) => panic!("a compact table"),
        }
    }

    /// Writes every group of `table`'s snapshot.
    fn snapshot_bytes(table: &mut dyn ErasedStateTable, groups: usize) -> Vec<Vec<u8>> {
        let frozen = table.snapshot();
        (0..groups)
            .map(|g| {
                let mut bytes = Vec::new();
                frozen.write_group(g, &mut bytes).unwrap();
                bytes
            })
            .collect()
    }

    #[test]
    fn string_keys_are_stored_compact_in_the_format_of_string_keys() {
        let mut compact = StateTable::<String, (i64, i64)>::new(2);
        assert!(matches!(compact.repr, Repr::Compact(_)));
        // The same entries in a table that stores `String`s as they are.
        let mut typed = StateTable::<String, (i64, i64)> {
            repr: Repr::Typed(GroupedMaps::new(2, None)),
        };
        let long = "a key longer than twenty-four bytes, on the heap".to_string();
        for (g, key) in [
            (0, "k1".to_string()),
            (1, "k2".to_string()),
            (1, long.clone()),
        ] {
            compact.insert(g, &key, (g as i64, 1));
            typed.insert(g, &key, (g as i64, 1));
        }
        *compact.get_mut(1, &long).unwrap() = (7, 7);
        *typed.get_mut(1, &long).unwrap() = (7, 7);
        assert_eq!(compact.get(0, &"k1".to_string()), Some(&(0, 1)));
        assert_eq!(compact.get(0, &"k2".to_string()), None);
        assert_eq!(compact.len(), 3);
        let mut keys = compact.keys();
        keys.sort();
        let mut expected = vec![
            (0, "k1".to_string()),
            (1, "k2".to_string()),
            (1, long.clone()),
        ];
        expected.sort();
        assert_eq!(keys, expected);
        // Group 1 holds two keys, whose order may differ: compare what each restores.
        let (compact_bytes, typed_bytes) = (
            snapshot_bytes(&mut compact, 2),
            snapshot_bytes(&mut typed, 2),
        );
        assert_eq!(compact_bytes[0], typed_bytes[0]);
        let mut from_typed = StateTable::<String, (i64, i64)>::new(2);
        let mut from_compact = StateTable::<String, (i64, i64)> {
            repr: Repr::Typed(GroupedMaps::new(2, None)),
        };
        for g in 0..2 {
            from_typed.restore_group(g, &typed_bytes[g]).unwrap();
            from_compact.restore_group(g, &compact_bytes[g]).unwrap();
        }
        assert_eq!(from_typed.get(1, &long), Some(&(7, 7)));
        assert_eq!(from_compact.get(1, &long), Some(&(7, 7)));
        assert_eq!(from_compact.remove(1, &"k2".to_string()), Some((1, 1)));
        assert_eq!(from_typed.remove(1, &"k2".to_string()), Some((1, 1)));
        assert_eq!(from_typed.len(), 2);
    }

    #[test]
    fn compact_string_keys_expire_with_a_time_to_live() {
        use crate::state::ttl::{StateTtlConfig, TtlClock};
        use std::sync::atomic::{AtomicI64, Ordering};
        let now = Arc::new(AtomicI64::new(0));
        let ttl = || TableTtl {
            config: StateTtlConfig::new(std::time::Duration::from_millis(10)),
            clock: TtlClock::Manual(Arc::clone(&now)),
        };
        let clock = |t: i64| now.store(t, Ordering::Relaxed);
        let mut table = StateTable::<String, i64>::with_ttl(1, ttl());
        assert!(matches!(table.repr, Repr::Compact(_)));
        table.insert(0, &"old".to_string(), 1);
        clock(8);
        table.insert(0, &"new".to_string(), 2);
        clock(12);
        assert_eq!(table.get(0, &"old".to_string()), None);
        assert_eq!(table.get_touch(0, &"new".to_string()), Some(&2));
        assert_eq!(table.keys(), vec![(0, "new".to_string())]);
        let bytes = snapshot_bytes(&mut table, 1);
        let mut restored = StateTable::<String, i64>::with_ttl(1, ttl());
        restored.restore_group(0, &bytes[0]).unwrap();
        assert_eq!(restored.get(0, &"new".to_string()), Some(&2));
        clock(30);
        assert_eq!(restored.get_touch(0, &"new".to_string()), None);
        assert!(restored.is_empty());
    }

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
            typed_groups(&table).iter().map(|g| (**g).clone()).collect();
        let before: Vec<*const HashMap<u64, u64>> =
            typed_groups(&table).iter().map(Arc::as_ptr).collect();
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
        let after: Vec<*const HashMap<u64, u64>> =
            typed_groups(&table).iter().map(Arc::as_ptr).collect();
        assert_eq!(before, after, "a group was copied");
        for (g, bytes) in written.iter().enumerate() {
            let mut restored = StateTable::<u64, u64>::new(GROUPS);
            restored.restore_group(g, bytes).unwrap();
            assert_eq!(*typed_groups(&restored)[g], at_barrier[g], "group {g}");
        }
        assert_eq!(table.get(0, &0), Some(&6_000_000));
    }
}
