//! The keyed state of an operator subtask as its operator and the state handles see it: the
//! heap backend, typed and accessed in place (the fast path), or typed state over a
//! byte-level [`KeyedStateBackend`](crate::state::backend::KeyedStateBackend).

use crate::error::StateError;
use crate::record::Key;
use crate::runtime::snapshot::CheckpointNotification;
use crate::runtime::stream_element::{CheckpointBarrier, SnapshotType};
use crate::state::backend::{KeyedBackendSnapshot, StateKind};
use crate::state::heap_keyed_state_backend::{HeapKeyedStateBackend, KeyGroupSlot};
use crate::state::key_group::KeyGroupRange;
use crate::state::keyed_state_table::StateValue;
use crate::state::serialized_keyed_state::SerializedKeyedState;
use crate::state::ttl::{StateTtlConfig, TtlClock};

/// Where an operator subtask's keyed state lives.
pub enum KeyedStateStore<K> {
    /// On the heap, as typed values (`state.backend.type: heap`).
    Heap(HeapKeyedStateBackend<K>),
    /// In a byte-level backend.
    Serialized(SerializedKeyedState<K>),
}

impl<K: Key> KeyedStateStore<K> {
    /// Identity of this store instance (state handles cache their index per store).
    pub fn id(&self) -> u64 {
        match self {
            Self::Heap(h) => h.id(),
            Self::Serialized(s) => s.id(),
        }
    }

    /// The backend's name, as `state.backend.type` spells it.
    pub fn backend_name(&self) -> &'static str {
        match self {
            Self::Heap(_) => "heap",
            Self::Serialized(s) => s.backend_name(),
        }
    }

    /// The key groups owned.
    pub fn key_group_range(&self) -> KeyGroupRange {
        match self {
            Self::Heap(h) => h.key_group_range(),
            Self::Serialized(s) => s.key_group_range(),
        }
    }

    /// Sets the clock of state TTL (tests drive time by hand).
    pub fn set_ttl_clock(&mut self, clock: TtlClock) {
        match self {
            Self::Heap(h) => h.set_ttl_clock(clock),
            Self::Serialized(s) => s.set_ttl_clock(clock),
        }
    }

    /// Finds `key`'s key group and checks that this subtask owns it.
    #[inline]
    pub fn resolve_key(&mut self, key: &K) -> Result<KeyGroupSlot, StateError> {
        match self {
            Self::Heap(h) => h.resolve_key(key),
            Self::Serialized(s) => s.resolve_key(key),
        }
    }

    /// The slot of `key`, whose key group the record's sender computed already (a hash
    /// partitioner's batch): only checked to be owned, not computed again.
    #[inline]
    pub fn resolve_key_in_group(
        &mut self,
        key: &K,
        key_group: u32,
    ) -> Result<KeyGroupSlot, StateError> {
        match self {
            Self::Heap(h) => h.slot_of_group(key_group),
            Self::Serialized(s) => s.resolve_key_in_group(key, key_group),
        }
    }

    /// The slot of `key`, in `key_group` if its sender computed it, else hashed here.
    #[inline]
    pub fn resolve(&mut self, key: &K, key_group: Option<u32>) -> Result<KeyGroupSlot, StateError> {
        match key_group {
            Some(group) => self.resolve_key_in_group(key, group),
            None => self.resolve_key(key),
        }
    }

    /// Registers (or looks up) a value or list state whose per-key value is `S`.
    pub fn register<S: StateValue>(
        &mut self,
        name: &str,
        kind: StateKind,
        ttl: Option<StateTtlConfig>,
    ) -> Result<usize, StateError> {
        match self {
            Self::Heap(h) => h.register_with_ttl::<S>(name, ttl),
            Self::Serialized(s) => s.register::<S>(name, kind, ttl),
        }
    }

    /// Registers (or looks up) a map state.
    pub fn register_map<UK, UV>(
        &mut self,
        name: &str,
        ttl: Option<StateTtlConfig>,
    ) -> Result<usize, StateError>
    where
        UK: StateValue + std::hash::Hash + Eq,
        UV: StateValue,
    {
        match self {
            Self::Heap(h) => h.register_with_ttl::<std::collections::HashMap<UK, UV>>(name, ttl),
            Self::Serialized(s) => s.register_map::<UK, UV>(name, ttl),
        }
    }

    /// `key`'s value of value state `index`, read without refreshing a time to live (for
    /// the runtime's own use, as timers).
    pub fn get<S: StateValue>(
        &mut self,
        index: usize,
        key: &K,
        slot: KeyGroupSlot,
    ) -> Result<Option<S>, StateError> {
        match self {
            Self::Heap(h) => Ok(h.table::<S>(index)?.get(slot.index, key).cloned()),
            Self::Serialized(s) => s.get::<S>(index, StateKind::Value, key, slot),
        }
    }

    /// Applies `f` to `key`'s value of value state `index` (`None` if it has none): in place
    /// on the heap, decoded and written back otherwise.
    #[inline]
    pub fn modify<S: StateValue, R>(
        &mut self,
        index: usize,
        key: &K,
        slot: KeyGroupSlot,
        f: impl FnOnce(Option<&mut S>) -> R,
    ) -> Result<R, StateError> {
        match self {
            Self::Heap(h) => Ok(f(h.value_mut::<S>(index, key, slot)?)),
            Self::Serialized(s) => match s.get::<S>(index, StateKind::Value, key, slot)? {
                None => Ok(f(None)),
                Some(mut value) => {
                    let result = f(Some(&mut value));
                    s.put(index, StateKind::Value, key, slot, &value)?;
                    Ok(result)
                }
            },
        }
    }

    /// Updates `key`'s value of value state `index` with `f`, which gets the value in place
    /// (`Some`) or, when there is none, returns the value to insert; `f`'s own error is the
    /// inner result, the store's the outer one.
    #[inline]
    pub fn upsert<S: StateValue, R, E>(
        &mut self,
        index: usize,
        key: &K,
        slot: KeyGroupSlot,
        f: impl FnOnce(Option<&mut S>) -> Result<(Option<S>, R), E>,
    ) -> Result<Result<R, E>, StateError> {
        match self {
            Self::Heap(h) => match h.value_mut::<S>(index, key, slot)? {
                Some(value) => Ok(f(Some(value)).map(|(_, result)| result)),
                None => match f(None) {
                    Ok((Some(value), result)) => {
                        h.update(index, key, slot, value)?;
                        Ok(Ok(result))
                    }
                    Ok((None, result)) => Ok(Ok(result)),
                    Err(e) => Ok(Err(e)),
                },
            },
            Self::Serialized(s) => {
                let mut current = s.get::<S>(index, StateKind::Value, key, slot)?;
                let (inserted, result) = match f(current.as_mut()) {
                    Ok(done) => done,
                    Err(e) => return Ok(Err(e)),
                };
                if let Some(value) = inserted.as_ref().or(current.as_ref()) {
                    s.put(index, StateKind::Value, key, slot, value)?;
                }
                Ok(Ok(result))
            }
        }
    }

    /// Takes `key`'s value of value state `index` out for the caller to change and
    /// [`put`](Self::put) back (the heap leaves an empty value behind, without a copy; a
    /// byte-level backend keeps its copy until it is overwritten).
    pub fn take<S: StateValue + Default>(
        &mut self,
        index: usize,
        key: &K,
        slot: KeyGroupSlot,
    ) -> Result<S, StateError> {
        match self {
            Self::Heap(h) => Ok(h
                .value_mut::<S>(index, key, slot)?
                .map(std::mem::take)
                .unwrap_or_default()),
            Self::Serialized(s) => Ok(s
                .get::<S>(index, StateKind::Value, key, slot)?
                .unwrap_or_default()),
        }
    }

    /// Sets `key`'s value of value state `index`.
    #[inline]
    pub fn put<S: StateValue>(
        &mut self,
        index: usize,
        key: &K,
        slot: KeyGroupSlot,
        value: S,
    ) -> Result<(), StateError> {
        match self {
            Self::Heap(h) => h.update(index, key, slot, value),
            Self::Serialized(s) => s.put(index, StateKind::Value, key, slot, &value),
        }
    }

    /// Removes `key`'s value of state `index`, whose per-key value is `S`.
    pub fn delete<S: StateValue>(
        &mut self,
        index: usize,
        key: &K,
        slot: KeyGroupSlot,
    ) -> Result<(), StateError> {
        match self {
            Self::Heap(h) => h.clear::<S>(index, key, slot),
            Self::Serialized(s) => s.delete(index, key, slot),
        }
    }

    /// Every key with a value in state `index` (per-key value `S`), with its slot, in
    /// key-group order.
    pub fn keys<S: StateValue>(
        &mut self,
        index: usize,
    ) -> Result<Vec<(K, KeyGroupSlot)>, StateError> {
        match self {
            Self::Heap(h) => {
                let start = h.key_group_range().start;
                Ok(h.table::<S>(index)?
                    .keys()
                    .into_iter()
                    .map(|(offset, key)| {
                        let slot = KeyGroupSlot {
                            key_group: start + offset as u32,
                            index: offset,
                        };
                        (key, slot)
                    })
                    .collect())
            }
            Self::Serialized(s) => s.keys(index),
        }
    }

    /// Number of keys with a value in state `index`.
    pub fn len<S: StateValue>(&mut self, index: usize) -> Result<usize, StateError> {
        match self {
            Self::Heap(h) => h.len::<S>(index),
            Self::Serialized(s) => s.len(index),
        }
    }

    /// The synchronous part of a snapshot.
    pub fn snapshot(
        &mut self,
        barrier: CheckpointBarrier,
    ) -> Result<Box<dyn KeyedBackendSnapshot>, StateError> {
        match self {
            Self::Heap(h) => Ok(Box::new(h.snapshot())),
            Self::Serialized(s) => s.snapshot(
                barrier.checkpoint_id,
                barrier.snapshot_type == SnapshotType::Savepoint,
            ),
        }
    }

    /// Passes a checkpoint's completion on to the backend.
    pub fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), StateError> {
        self.notify(CheckpointNotification::Complete(checkpoint_id))
    }

    /// Passes a checkpoint's completion or abort on to the backend.
    pub fn notify(&mut self, notification: CheckpointNotification) -> Result<(), StateError> {
        match self {
            Self::Heap(_) => Ok(()),
            Self::Serialized(s) => s.notify(notification),
        }
    }
}
