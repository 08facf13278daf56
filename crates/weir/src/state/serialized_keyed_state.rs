//! Typed keyed state over a byte-level [`KeyedStateBackend`]: what the state handles call when
//! the backend is not the heap. Keys and values are postcard bytes laid out as
//! [`StateKind`] says; the current key is encoded once per key (the bytes its key group was
//! hashed from) and reused by every access until the key changes.
//!
//! Restored state in the canonical format (the heap's snapshot format, which savepoints
//! always use) waits in the backend until its state is registered, because only then are
//! its key and value types known to re-encode it as rows.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::StateError;
use crate::record::Key;
use crate::state::backend::{
    write_varint, ExpiryCutoff, KeyedBackendSnapshot, KeyedStateBackend, ScanControl,
    SnapshotRequest, StateDescriptor, StateId, StateKind,
};
use crate::state::heap_keyed_state_backend::KeyGroupSlot;
use crate::state::key_bytes::encode_key;
use crate::state::key_group::{KeyGroupAssigner, KeyGroupRange};
use crate::state::keyed_state_table::StateValue;
use crate::state::ttl::{StateTtlConfig, TableTtl, TtlClock, TtlUpdateType};

/// Distinguishes store instances so a state handle never uses an index cached for another.
static NEXT_STORE_ID: AtomicU64 = AtomicU64::new(1 << 40);

struct RegisteredState {
    name: String,
    id: StateId,
    kind: StateKind,
    value_type: &'static str,
    ttl: Option<TableTtl>,
}

/// Keyed state of one operator subtask kept by a byte-level backend.
pub struct SerializedKeyedState<K> {
    id: u64,
    backend: Box<dyn KeyedStateBackend>,
    range: KeyGroupRange,
    assigner: KeyGroupAssigner,
    states: Vec<RegisteredState>,
    ttl_clock: TtlClock,
    /// The key whose encoding `key_bytes` holds.
    current: Option<K>,
    key_bytes: Vec<u8>,
    /// Scratch: a map row's key, a value read, a value to write.
    row: Vec<u8>,
    read: Vec<u8>,
    write: Vec<u8>,
    _key: PhantomData<fn() -> K>,
}

impl<K: Key> SerializedKeyedState<K> {
    /// Typed state over `backend`, whose keys hash into `max_parallelism` key groups.
    pub fn new(backend: Box<dyn KeyedStateBackend>, max_parallelism: u32) -> Self {
        Self {
            id: NEXT_STORE_ID.fetch_add(1, Ordering::Relaxed),
            range: backend.key_group_range(),
            backend,
            assigner: KeyGroupAssigner::new(max_parallelism),
            states: Vec::new(),
            ttl_clock: TtlClock::Wall,
            current: None,
            key_bytes: Vec::with_capacity(32),
            row: Vec::new(),
            read: Vec::new(),
            write: Vec::new(),
            _key: PhantomData,
        }
    }

    /// Identity of this store.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The backend's name (`state.backend.type`).
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// The key groups owned.
    pub fn key_group_range(&self) -> KeyGroupRange {
        self.range
    }

    /// Sets the clock of state TTL; applies to states registered afterwards.
    pub fn set_ttl_clock(&mut self, clock: TtlClock) {
        self.ttl_clock = clock;
    }

    /// Finds `key`'s key group, checks that it is owned, and keeps its bytes for the accesses
    /// that follow.
    #[inline]
    pub fn resolve_key(&mut self, key: &K) -> Result<KeyGroupSlot, StateError> {
        let group = self.assigner.key_group(key)?;
        if !self.range.contains(group) {
            return Err(StateError::KeyGroupOutOfRange {
                key_group: group,
                range: self.range.to_string(),
            });
        }
        self.key_bytes.clear();
        self.key_bytes
            .extend_from_slice(self.assigner.last_key_bytes());
        self.current = Some(key.clone());
        Ok(KeyGroupSlot {
            key_group: group,
            index: (group - self.range.start) as usize,
        })
    }

    /// Like [`resolve_key`](Self::resolve_key) for a key whose group its sender computed:
    /// the key is encoded (its bytes are the rows' keys) but not hashed again.
    #[inline]
    pub fn resolve_key_in_group(
        &mut self,
        key: &K,
        key_group: u32,
    ) -> Result<KeyGroupSlot, StateError> {
        if !self.range.contains(key_group) {
            return Err(StateError::KeyGroupOutOfRange {
                key_group,
                range: self.range.to_string(),
            });
        }
        self.current = None;
        self.scope(key)?;
        Ok(KeyGroupSlot {
            key_group,
            index: (key_group - self.range.start) as usize,
        })
    }

    /// Makes `key_bytes` hold `key`'s encoding.
    #[inline]
    fn scope(&mut self, key: &K) -> Result<(), StateError> {
        if self.current.as_ref() != Some(key) {
            self.key_bytes.clear();
            encode_key(key, &mut self.key_bytes)
                .map_err(|e| StateError::KeyEncoding(e.to_string()))?;
            self.current = Some(key.clone());
        }
        Ok(())
    }

    /// Registers (or looks up) state `name` of `kind` whose canonical per-key value is `S`;
    /// restored data of it is re-encoded as rows now. Map states register with
    /// [`register_map`](Self::register_map).
    pub fn register<S: StateValue>(
        &mut self,
        name: &str,
        kind: StateKind,
        ttl: Option<StateTtlConfig>,
    ) -> Result<usize, StateError> {
        let (index, fresh) = self.register_state(name, kind, std::any::type_name::<S>(), ttl)?;
        if fresh {
            let restored = self.backend.take_restored(name)?;
            let with_ttl = self.states[index].ttl.is_some();
            for (key_group, bytes) in restored {
                self.restore_rows::<S>(index, key_group, &bytes, with_ttl)?;
            }
        }
        Ok(index)
    }

    /// Registers (or looks up) map state `name` with user keys `UK` and values `UV`.
    pub fn register_map<UK, UV>(
        &mut self,
        name: &str,
        ttl: Option<StateTtlConfig>,
    ) -> Result<usize, StateError>
    where
        UK: StateValue + std::hash::Hash + Eq,
        UV: StateValue,
    {
        let type_name = std::any::type_name::<std::collections::HashMap<UK, UV>>();
        let (index, fresh) = self.register_state(name, StateKind::Map, type_name, ttl)?;
        if fresh {
            let restored = self.backend.take_restored(name)?;
            let with_ttl = self.states[index].ttl.is_some();
            for (key_group, bytes) in restored {
                self.restore_map_rows::<UK, UV>(index, key_group, &bytes, with_ttl)?;
            }
        }
        Ok(index)
    }

    fn register_state(
        &mut self,
        name: &str,
        kind: StateKind,
        value_type: &'static str,
        ttl: Option<StateTtlConfig>,
    ) -> Result<(usize, bool), StateError> {
        if let Some(index) = self.states.iter().position(|s| s.name == name) {
            let state = &self.states[index];
            if state.value_type != value_type || state.kind != kind {
                return Err(StateError::TypeMismatch {
                    state: name.to_string(),
                    existing: state.value_type,
                    requested: value_type,
                });
            }
            return Ok((index, false));
        }
        let id = self.backend.register_state(&StateDescriptor {
            name: name.to_string(),
            kind,
            with_ttl: ttl.is_some(),
        })?;
        self.states.push(RegisteredState {
            name: name.to_string(),
            id,
            kind,
            value_type,
            ttl: ttl.map(|config| TableTtl {
                config,
                clock: self.ttl_clock.clone(),
            }),
        });
        Ok((self.states.len() - 1, true))
    }

    /// Checks that state `index` holds `S` values of `kind`.
    #[inline]
    fn check<S>(&self, index: usize, kind: StateKind) -> Result<&RegisteredState, StateError> {
        let state = &self.states[index];
        if state.kind != kind || state.value_type != std::any::type_name::<S>() {
            return Err(StateError::TypeMismatch {
                state: state.name.clone(),
                existing: state.value_type,
                requested: std::any::type_name::<S>(),
            });
        }
        Ok(state)
    }

    /// Re-encodes canonical entries `(K, S)` — or `(K, S, touched)` with a time to live — of
    /// one key group as rows.
    fn restore_rows<S: StateValue>(
        &mut self,
        index: usize,
        key_group: u32,
        bytes: &[u8],
        with_ttl: bool,
    ) -> Result<(), StateError> {
        let id = self.states[index].id;
        let entries: Vec<(K, S, i64)> = if with_ttl {
            postcard::from_bytes(bytes)?
        } else {
            let pairs: Vec<(K, S)> = postcard::from_bytes(bytes)?;
            pairs.into_iter().map(|(k, v)| (k, v, 0)).collect()
        };
        for (key, value, touched) in entries {
            self.key_bytes.clear();
            encode_key(&key, &mut self.key_bytes)
                .map_err(|e| StateError::KeyEncoding(e.to_string()))?;
            encode_value(&value, with_ttl.then_some(touched), &mut self.write)?;
            self.backend
                .put(id, key_group, &self.key_bytes, &self.write)?;
        }
        self.current = None;
        Ok(())
    }

    fn restore_map_rows<UK, UV>(
        &mut self,
        index: usize,
        key_group: u32,
        bytes: &[u8],
        with_ttl: bool,
    ) -> Result<(), StateError>
    where
        UK: StateValue + std::hash::Hash + Eq,
        UV: StateValue,
    {
        type Map<UK, UV> = std::collections::HashMap<UK, UV>;
        let id = self.states[index].id;
        let entries: Vec<(K, Map<UK, UV>, i64)> = if with_ttl {
            postcard::from_bytes(bytes)?
        } else {
            let pairs: Vec<(K, Map<UK, UV>)> = postcard::from_bytes(bytes)?;
            pairs.into_iter().map(|(k, m)| (k, m, 0)).collect()
        };
        for (key, map, touched) in entries {
            self.key_bytes.clear();
            encode_key(&key, &mut self.key_bytes)
                .map_err(|e| StateError::KeyEncoding(e.to_string()))?;
            for (user_key, user_value) in map {
                map_row(&self.key_bytes, &user_key, &mut self.row)?;
                encode_value(&user_value, with_ttl.then_some(touched), &mut self.write)?;
                self.backend.put(id, key_group, &self.row, &self.write)?;
            }
        }
        self.current = None;
        Ok(())
    }

    /// The current time of state `index`'s TTL, if it has one.
    fn ttl_now(&self, index: usize) -> Option<(i64, &TableTtl)> {
        self.states[index]
            .ttl
            .as_ref()
            .map(|ttl| (ttl.clock.now(), ttl))
    }

    /// Reads `key`'s value of state `index` (a value or list state), dropping it if expired
    /// and refreshing it if reads refresh.
    pub fn get<S: StateValue>(
        &mut self,
        index: usize,
        kind: StateKind,
        key: &K,
        slot: KeyGroupSlot,
    ) -> Result<Option<S>, StateError> {
        let id = self.check::<S>(index, kind)?.id;
        self.scope(key)?;
        if !self
            .backend
            .get(id, slot.key_group, &self.key_bytes, &mut self.read)?
        {
            return Ok(None);
        }
        let Some((now, ttl)) = self.ttl_now(index) else {
            return Ok(Some(postcard::from_bytes(&self.read)?));
        };
        let (value, touched) = decode_ttl_value::<S>(&self.read)?;
        if ttl.expired(touched, now) {
            self.backend.delete(id, slot.key_group, &self.key_bytes)?;
            return Ok(None);
        }
        if ttl.config.update_type == TtlUpdateType::OnReadAndWrite {
            encode_value(&value, Some(now), &mut self.write)?;
            self.backend
                .put(id, slot.key_group, &self.key_bytes, &self.write)?;
        }
        Ok(Some(value))
    }

    /// Sets `key`'s value of state `index`.
    pub fn put<S: StateValue>(
        &mut self,
        index: usize,
        kind: StateKind,
        key: &K,
        slot: KeyGroupSlot,
        value: &S,
    ) -> Result<(), StateError> {
        let id = self.check::<S>(index, kind)?.id;
        self.scope(key)?;
        let now = self.ttl_now(index).map(|(now, _)| now);
        encode_value(value, now, &mut self.write)?;
        self.backend
            .put(id, slot.key_group, &self.key_bytes, &self.write)
    }

    /// Appends `value` to `key`'s list in state `index` (a merge, without reading the list,
    /// unless the state has a time to live).
    pub fn append<V: StateValue>(
        &mut self,
        index: usize,
        key: &K,
        slot: KeyGroupSlot,
        value: V,
    ) -> Result<(), StateError> {
        let id = self.check::<Vec<V>>(index, StateKind::List)?.id;
        if self.states[index].ttl.is_some() {
            let mut list = self
                .get::<Vec<V>>(index, StateKind::List, key, slot)?
                .unwrap_or_default();
            list.push(value);
            return self.put(index, StateKind::List, key, slot, &list);
        }
        self.scope(key)?;
        self.write.clear();
        write_varint(1, &mut self.write);
        self.write = postcard::to_extend(&value, std::mem::take(&mut self.write))?;
        self.backend
            .merge(id, slot.key_group, &self.key_bytes, &self.write)
    }

    /// Removes `key`'s value of state `index` (for a map state, its whole map).
    pub fn delete(&mut self, index: usize, key: &K, slot: KeyGroupSlot) -> Result<(), StateError> {
        let (id, kind) = (self.states[index].id, self.states[index].kind);
        self.scope(key)?;
        if kind != StateKind::Map {
            return self.backend.delete(id, slot.key_group, &self.key_bytes);
        }
        self.row.clear();
        write_varint(self.key_bytes.len() as u64, &mut self.row);
        self.row.extend_from_slice(&self.key_bytes);
        let mut rows = Vec::new();
        self.backend
            .scan(id, slot.key_group, &self.row, &mut |row, _| {
                rows.push(row.to_vec());
                Ok(ScanControl::Continue)
            })?;
        for row in rows {
            self.backend.delete(id, slot.key_group, &row)?;
        }
        Ok(())
    }

    /// The value under `user_key` in `key`'s map of state `index`.
    pub fn map_get<UK, UV>(
        &mut self,
        index: usize,
        key: &K,
        slot: KeyGroupSlot,
        user_key: &UK,
    ) -> Result<Option<UV>, StateError>
    where
        UK: StateValue + std::hash::Hash + Eq,
        UV: StateValue,
    {
        let id = self
            .check::<std::collections::HashMap<UK, UV>>(index, StateKind::Map)?
            .id;
        self.scope(key)?;
        map_row(&self.key_bytes, user_key, &mut self.row)?;
        if !self
            .backend
            .get(id, slot.key_group, &self.row, &mut self.read)?
        {
            return Ok(None);
        }
        let Some((now, ttl)) = self.ttl_now(index) else {
            return Ok(Some(postcard::from_bytes(&self.read)?));
        };
        let (value, touched) = decode_ttl_value::<UV>(&self.read)?;
        if ttl.expired(touched, now) {
            self.backend.delete(id, slot.key_group, &self.row)?;
            return Ok(None);
        }
        if ttl.config.update_type == TtlUpdateType::OnReadAndWrite {
            encode_value(&value, Some(now), &mut self.write)?;
            self.backend
                .put(id, slot.key_group, &self.row, &self.write)?;
        }
        Ok(Some(value))
    }

    /// Puts `user_value` under `user_key` in `key`'s map of state `index`.
    pub fn map_put<UK, UV>(
        &mut self,
        index: usize,
        key: &K,
        slot: KeyGroupSlot,
        user_key: &UK,
        user_value: &UV,
    ) -> Result<(), StateError>
    where
        UK: StateValue + std::hash::Hash + Eq,
        UV: StateValue,
    {
        let id = self
            .check::<std::collections::HashMap<UK, UV>>(index, StateKind::Map)?
            .id;
        self.scope(key)?;
        map_row(&self.key_bytes, user_key, &mut self.row)?;
        let now = self.ttl_now(index).map(|(now, _)| now);
        encode_value(user_value, now, &mut self.write)?;
        self.backend.put(id, slot.key_group, &self.row, &self.write)
    }

    /// Removes `user_key` from `key`'s map of state `index`, returning its value.
    pub fn map_remove<UK, UV>(
        &mut self,
        index: usize,
        key: &K,
        slot: KeyGroupSlot,
        user_key: &UK,
    ) -> Result<Option<UV>, StateError>
    where
        UK: StateValue + std::hash::Hash + Eq,
        UV: StateValue,
    {
        let removed = self.map_get::<UK, UV>(index, key, slot, user_key)?;
        if removed.is_some() {
            let id = self.states[index].id;
            self.backend.delete(id, slot.key_group, &self.row)?;
        }
        Ok(removed)
    }

    /// Every live entry of `key`'s map of state `index`, in user-key byte order.
    pub fn map_entries<UK, UV>(
        &mut self,
        index: usize,
        key: &K,
        slot: KeyGroupSlot,
    ) -> Result<Vec<(UK, UV)>, StateError>
    where
        UK: StateValue + std::hash::Hash + Eq,
        UV: StateValue,
    {
        let id = self
            .check::<std::collections::HashMap<UK, UV>>(index, StateKind::Map)?
            .id;
        self.scope(key)?;
        self.row.clear();
        write_varint(self.key_bytes.len() as u64, &mut self.row);
        self.row.extend_from_slice(&self.key_bytes);
        let prefix_len = self.row.len();
        let ttl = self.ttl_now(index).map(|(now, ttl)| (now, ttl.clone()));
        let mut entries = Vec::new();
        let mut expired = Vec::new();
        self.backend
            .scan(id, slot.key_group, &self.row, &mut |row, value| {
                let user_key: UK = postcard::from_bytes(&row[prefix_len..])?;
                match &ttl {
                    None => entries.push((user_key, postcard::from_bytes(value)?)),
                    Some((now, ttl)) => {
                        let (user_value, touched) = decode_ttl_value::<UV>(value)?;
                        if ttl.expired(touched, *now) {
                            expired.push(row.to_vec());
                        } else {
                            entries.push((user_key, user_value));
                        }
                    }
                }
                Ok(ScanControl::Continue)
            })?;
        for row in expired {
            self.backend.delete(id, slot.key_group, &row)?;
        }
        Ok(entries)
    }

    /// Every key with a live value in state `index`, with its slot, in key-group order
    /// (each key once, also for map states).
    pub fn keys(&mut self, index: usize) -> Result<Vec<(K, KeyGroupSlot)>, StateError> {
        let (id, kind) = (self.states[index].id, self.states[index].kind);
        let ttl = self.ttl_now(index).map(|(now, ttl)| (now, ttl.clone()));
        let mut keys: Vec<(K, KeyGroupSlot)> = Vec::new();
        for (offset, key_group) in self.range.iter().enumerate() {
            let slot = KeyGroupSlot {
                key_group,
                index: offset,
            };
            let mut last: Option<Vec<u8>> = None;
            self.backend.scan(id, key_group, &[], &mut |row, value| {
                if let Some((now, ttl)) = &ttl {
                    let touched = trailing_timestamp(value)?;
                    if ttl.expired(touched, *now) {
                        return Ok(ScanControl::Continue);
                    }
                }
                let key_bytes = match kind {
                    StateKind::Map => map_row_key(row)?,
                    _ => row,
                };
                if last.as_deref() != Some(key_bytes) {
                    keys.push((postcard::from_bytes(key_bytes)?, slot));
                    last = Some(key_bytes.to_vec());
                }
                Ok(ScanControl::Continue)
            })?;
        }
        Ok(keys)
    }

    /// Number of keys with a live value in state `index`.
    pub fn len(&mut self, index: usize) -> Result<usize, StateError> {
        Ok(self.keys(index)?.len())
    }

    /// The synchronous part of a snapshot; `canonical` asks for a self-contained one in the
    /// canonical format (a savepoint).
    pub fn snapshot(
        &mut self,
        checkpoint_id: u64,
        canonical: bool,
    ) -> Result<Box<dyn KeyedBackendSnapshot>, StateError> {
        let expiry = self
            .states
            .iter()
            .filter_map(|state| {
                let ttl = state.ttl.as_ref()?;
                ttl.config.cleanup_in_full_snapshot.then(|| {
                    let cutoff = ExpiryCutoff {
                        ttl_millis: ttl.config.ttl_millis,
                        now: ttl.clock.now(),
                    };
                    (state.id, cutoff)
                })
            })
            .collect();
        self.backend.snapshot(&SnapshotRequest {
            checkpoint_id,
            expiry,
            canonical,
        })
    }

    /// Passes a checkpoint's completion or abort to the backend.
    pub fn notify(
        &mut self,
        notification: crate::runtime::snapshot::CheckpointNotification,
    ) -> Result<(), StateError> {
        use crate::runtime::snapshot::CheckpointNotification;
        match notification {
            CheckpointNotification::Complete(id) => self.backend.notify_checkpoint_complete(id),
            CheckpointNotification::Aborted(id) => self.backend.notify_checkpoint_aborted(id),
        }
    }
}

/// Encodes `value`, followed by `touched` for a state with a time to live, into `out`.
fn encode_value<S: Serialize>(
    value: &S,
    touched: Option<i64>,
    out: &mut Vec<u8>,
) -> Result<(), StateError> {
    out.clear();
    *out = postcard::to_extend(value, std::mem::take(out))?;
    if let Some(touched) = touched {
        out.extend_from_slice(&touched.to_le_bytes());
    }
    Ok(())
}

/// Decodes a value with its trailing last-access time.
fn decode_ttl_value<S: DeserializeOwned>(bytes: &[u8]) -> Result<(S, i64), StateError> {
    let touched = trailing_timestamp(bytes)?;
    Ok((postcard::from_bytes(&bytes[..bytes.len() - 8])?, touched))
}

/// The last-access time at the end of a value of a state with a time to live.
pub(crate) fn trailing_timestamp(bytes: &[u8]) -> Result<i64, StateError> {
    let tail = bytes
        .len()
        .checked_sub(8)
        .and_then(|start| bytes.get(start..))
        .and_then(|tail| <[u8; 8]>::try_from(tail).ok())
        .ok_or_else(|| StateError::Corrupt {
            state: "state with a time to live".into(),
            reason: format!("a {}-byte value has no last-access time", bytes.len()),
        })?;
    Ok(i64::from_le_bytes(tail))
}

/// Writes the row key of `user_key` in the map of the key encoded as `key_bytes`.
fn map_row<UK: Serialize>(
    key_bytes: &[u8],
    user_key: &UK,
    row: &mut Vec<u8>,
) -> Result<(), StateError> {
    row.clear();
    write_varint(key_bytes.len() as u64, row);
    row.extend_from_slice(key_bytes);
    *row = postcard::to_extend(user_key, std::mem::take(row))?;
    Ok(())
}

/// The key bytes of a map row.
pub(crate) fn map_row_key(row: &[u8]) -> Result<&[u8], StateError> {
    Ok(split_map_row(row)?.0)
}

/// A map row's key bytes and user key bytes.
pub(crate) fn split_map_row(row: &[u8]) -> Result<(&[u8], &[u8]), StateError> {
    let (len, prefix) = crate::state::backend::read_varint(row)?;
    let end = usize::try_from(len)
        .ok()
        .and_then(|len| prefix.checked_add(len))
        .filter(|end| *end <= row.len())
        .ok_or_else(|| StateError::Corrupt {
            state: "map state".into(),
            reason: format!("a row's key length {len} runs past its {} bytes", row.len()),
        })?;
    Ok((&row[prefix..end], &row[end..]))
}
