//! The keyed state backend of one operator subtask on an embedded RocksDB instance (Flink's
//! `RocksDBKeyedStateBackend`): every state in one database, laid out as [`crate::keys`]
//! says, values merged by RocksDB for list states, and writes held back in an
//! [`Overlay`] while a snapshot holds the database.
//!
//! A snapshot's synchronous part takes no time whatever the state: it freezes the overlay
//! (the writes not moved into the database yet) and holds the database. Its asynchronous
//! part writes the frozen overlay into the database in one atomic batch, takes what it needs
//! (a RocksDB checkpoint, or a RocksDB snapshot) and lets the database go. Meanwhile the
//! task's writes go to a new overlay, and reads look through it, the frozen one, and the
//! database. The frozen overlay holds no merges (they are resolved when it is frozen), so a
//! read never has to know whether the batch has landed yet.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rocksdb::{Cache, ReadOptions, WriteBatch, WriteOptions, DB};
use weir::error::StateError;
use weir::state::backend::{
    KeyedBackendSnapshot, KeyedStateBackend, ScanControl, ScanVisitor, SnapshotRequest,
    StateDescriptor, StateId,
};
use weir::state::key_group::KeyGroupRange;

use crate::keys::{self, PREFIX_LEN, RESTORED_STATE};
use crate::overlay::{resolve, Overlay, Pending};
use crate::snapshot::{CanonicalSnapshot, Hold, IncrementalSnapshot, Uploads};
use crate::BACKEND_NAME;

/// Held-back writes moved into the database per write of the task, once a snapshot let it
/// go: enough to empty the overlay long before the next checkpoint, few enough that no
/// record waits for it.
const DRAIN_PER_WRITE: usize = 8;

/// The error of a RocksDB call made for `operation`.
pub(crate) fn engine(operation: &'static str) -> impl FnOnce(rocksdb::Error) -> StateError {
    move |e| StateError::Backend {
        backend: BACKEND_NAME,
        operation,
        reason: e.into_string(),
    }
}

/// The error of a local file operation made for `operation` on `path`.
pub(crate) fn local_io<'a>(
    operation: &'static str,
    path: &'a std::path::Path,
) -> impl FnOnce(std::io::Error) -> StateError + 'a {
    move |e| StateError::Backend {
        backend: BACKEND_NAME,
        operation,
        reason: format!("`{}`: {e}", path.display()),
    }
}

/// What names this subtask's files in checkpoint storage.
#[derive(Debug, Clone)]
pub(crate) struct FileNaming {
    /// `<operator uid>-<subtask>`.
    pub(crate) stem: String,
    /// Unique to this backend instance, so that no two instances ever upload a shared file
    /// under one name.
    pub(crate) instance: String,
}

/// An open database and what lives beside it.
pub(crate) struct OpenDb {
    pub(crate) db: DB,
    pub(crate) cache: Cache,
    /// The states the database holds, by id.
    pub(crate) states: Vec<StateDescriptor>,
    /// Shared files of the checkpoint it was restored from that it may refer to again.
    pub(crate) uploads: Uploads,
}

/// A directory removed when dropped.
pub(crate) struct WorkingDir(pub(crate) PathBuf);

impl Drop for WorkingDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(dir = %self.0.display(), error = %e,
                    "cannot remove the RocksDB backend's working directory");
            }
        }
    }
}

/// Keyed state of one operator subtask in RocksDB.
pub struct RocksDbKeyedStateBackend {
    /// Declared before `working_dir`, so dropped (closed) before the directory goes —
    /// unless a snapshot thread still holds it.
    db: Arc<DB>,
    _cache: Cache,
    working_dir: WorkingDir,
    range: KeyGroupRange,
    states: Vec<StateDescriptor>,
    overlay: Overlay,
    /// The overlay a snapshot is writing into the database, while it holds it.
    frozen: Option<Arc<Overlay>>,
    /// Set while a snapshot holds the database; the snapshot sets the flag when it lets it
    /// go (its frozen overlay is in the database then).
    held: Option<Arc<AtomicBool>>,
    /// The overlay's bound: beyond it, a write waits for the snapshot to let go.
    max_overlay_bytes: usize,
    write: WriteOptions,
    key: Vec<u8>,
    incremental: bool,
    uploads: Arc<Mutex<Uploads>>,
    naming: FileNaming,
    snapshots: u64,
}

impl RocksDbKeyedStateBackend {
    /// A backend over the opened database, its files under `working_dir` (removed when the
    /// backend is dropped).
    pub(crate) fn new(
        open: OpenDb,
        working_dir: PathBuf,
        range: KeyGroupRange,
        incremental: bool,
        max_overlay_bytes: usize,
        naming: FileNaming,
    ) -> Self {
        let mut write = WriteOptions::default();
        // Checkpoints make state durable; a crashed instance is never reopened.
        write.disable_wal(true);
        Self {
            db: Arc::new(open.db),
            _cache: open.cache,
            working_dir: WorkingDir(working_dir),
            range,
            states: open.states,
            overlay: Overlay::default(),
            frozen: None,
            held: None,
            max_overlay_bytes,
            write,
            key: Vec::with_capacity(64),
            incremental,
            uploads: Arc::new(Mutex::new(open.uploads)),
            naming,
            snapshots: 0,
        }
    }

    fn db(&self) -> &DB {
        &self.db
    }

    /// Whether a snapshot still holds the database (writes then go to the overlay).
    fn is_held(&mut self) -> bool {
        match &self.held {
            Some(released) if !released.load(Ordering::Acquire) => true,
            Some(_) => {
                self.held = None;
                self.frozen = None;
                false
            }
            None => false,
        }
    }

    /// Waits until no snapshot holds the database.
    fn wait_for_release(&mut self) {
        while self.is_held() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// After a write was held back: if the overlay outgrew its bound, waits for the
    /// snapshot to let the database go (backpressure rather than unbounded memory).
    fn bound_overlay(&mut self) {
        let frozen = self.frozen.as_ref().map_or(0, |f| f.bytes());
        if self.overlay.bytes() + frozen > self.max_overlay_bytes {
            tracing::debug!(
                bytes = self.overlay.bytes(),
                "RocksDB backend: writes held back during a snapshot reached their bound"
            );
            self.wait_for_release();
        }
    }

    fn apply(&self, batch: &mut WriteBatch, key: &[u8], pending: Pending) {
        match pending {
            Pending::Put(value) => batch.put(key, value),
            Pending::Delete => batch.delete(key),
            Pending::Merge(operands) => batch.merge(key, operands),
        }
    }

    /// Moves up to `count` held-back writes into the database (all of them for `None`).
    fn drain(&mut self, count: Option<usize>) -> Result<(), StateError> {
        let mut left = count.unwrap_or(usize::MAX);
        while left > 0 && !self.overlay.is_empty() {
            let mut batch = WriteBatch::default();
            let mut in_batch = 0;
            while in_batch < left.min(4096) {
                let Some((key, pending)) = self.overlay.pop_first() else {
                    break;
                };
                self.apply(&mut batch, &key, pending);
                in_batch += 1;
            }
            left -= in_batch;
            self.db()
                .write_opt(batch, &self.write)
                .map_err(engine("write"))?;
        }
        Ok(())
    }

    /// Before a write of `self.key` goes to the database: what the overlay holds of that
    /// key is superseded (a put or delete) or must land first (a merge).
    fn settle_key(&mut self, superseded: bool) -> Result<(), StateError> {
        if self.overlay.is_empty() {
            return Ok(());
        }
        if let Some(pending) = self.overlay.remove(&self.key) {
            if !superseded {
                let mut batch = WriteBatch::default();
                self.apply(&mut batch, &self.key, pending);
                self.db()
                    .write_opt(batch, &self.write)
                    .map_err(engine("write"))?;
            }
        }
        Ok(())
    }

    /// The database's own value of `key`.
    fn db_value(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        Ok(self
            .db()
            .get_pinned(key)
            .map_err(engine("read"))?
            .map(|v| v.to_vec()))
    }

    /// The value of `self.key` through the frozen overlay and the database.
    fn lower_value(&self) -> Result<Option<Vec<u8>>, StateError> {
        if let Some(pending) = self.frozen.as_ref().and_then(|f| f.get(&self.key)) {
            // Never a merge: a put or delete stands whether or not it has landed yet.
            return resolve(pending, None);
        }
        self.db_value(&self.key)
    }

    /// The value of `self.key` through every layer.
    fn layered_value(&self) -> Result<Option<Vec<u8>>, StateError> {
        match self.overlay.get(&self.key) {
            Some(pending @ Pending::Merge(_)) => resolve(pending, self.lower_value()?.as_deref()),
            Some(pending) => resolve(pending, None),
            None => self.lower_value(),
        }
    }

    /// Freezes the overlay for a snapshot, its merges resolved against the database (which
    /// nothing else writes now: no snapshot holds it).
    fn freeze(&mut self) -> Result<Arc<Overlay>, StateError> {
        let mut frozen = std::mem::take(&mut self.overlay);
        let merges: Vec<Vec<u8>> = frozen
            .iter()
            .filter(|(_, p)| matches!(p, Pending::Merge(_)))
            .map(|(k, _)| k.clone())
            .collect();
        for key in merges {
            if let Some(pending) = frozen.get(&key).cloned() {
                let value = resolve(&pending, self.db_value(&key)?.as_deref())?;
                match value {
                    Some(value) => frozen.put(&key, &value),
                    None => frozen.delete(&key),
                }
            }
        }
        Ok(Arc::new(frozen))
    }

    fn state_id(&self, state: StateId) -> Result<u16, StateError> {
        u16::try_from(state.0)
            .ok()
            .filter(|id| usize::from(*id) < self.states.len())
            .ok_or_else(|| StateError::Backend {
                backend: BACKEND_NAME,
                operation: "find a state",
                reason: format!("state id {} was never registered", state.0),
            })
    }

    fn set_key(&mut self, state: StateId, key_group: u32, row: &[u8]) -> Result<(), StateError> {
        let id = self.state_id(state)?;
        keys::write_key(&mut self.key, key_group, id, row);
        Ok(())
    }

    fn read(&mut self, value: &mut Vec<u8>) -> Result<bool, StateError> {
        value.clear();
        if !self.overlay.is_empty() || self.frozen.is_some() {
            return Ok(match self.layered_value()? {
                Some(v) => {
                    value.extend_from_slice(&v);
                    true
                }
                None => false,
            });
        }
        match self.db().get_pinned(&self.key).map_err(engine("read"))? {
            Some(v) => {
                value.extend_from_slice(&v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn write_value(&mut self, value: &[u8]) -> Result<(), StateError> {
        if self.is_held() {
            self.overlay.put(&self.key, value);
            self.bound_overlay();
            return Ok(());
        }
        self.settle_key(true)?;
        self.db()
            .put_opt(&self.key, value, &self.write)
            .map_err(engine("write"))?;
        self.drain(Some(DRAIN_PER_WRITE))
    }

    fn remove_value(&mut self) -> Result<(), StateError> {
        if self.is_held() {
            self.overlay.delete(&self.key);
            self.bound_overlay();
            return Ok(());
        }
        self.settle_key(true)?;
        self.db()
            .delete_opt(&self.key, &self.write)
            .map_err(engine("write"))?;
        self.drain(Some(DRAIN_PER_WRITE))
    }

    /// The key of the restored canonical entries of state `name` in `key_group`.
    fn set_restored_key(&mut self, key_group: u32, name: &str) {
        keys::write_key(&mut self.key, key_group, RESTORED_STATE, name.as_bytes());
    }

    /// Keeps restored canonical entries (`(key group, entries)` of state `name`) until the
    /// state is registered, in the database so that every snapshot carries them.
    pub(crate) fn keep_restored(
        &mut self,
        key_group: u32,
        name: &str,
        entries: &[u8],
    ) -> Result<(), StateError> {
        self.set_restored_key(key_group, name);
        self.write_value(entries)
    }
}

impl KeyedStateBackend for RocksDbKeyedStateBackend {
    fn name(&self) -> &'static str {
        BACKEND_NAME
    }

    fn key_group_range(&self) -> KeyGroupRange {
        self.range
    }

    fn register_state(&mut self, descriptor: &StateDescriptor) -> Result<StateId, StateError> {
        if let Some(index) = self.states.iter().position(|s| s.name == descriptor.name) {
            let known = &self.states[index];
            if known.kind != descriptor.kind || known.with_ttl != descriptor.with_ttl {
                return Err(StateError::Corrupt {
                    state: descriptor.name.clone(),
                    reason: format!(
                        "it was restored as {:?} state{} but is registered now as {:?} state{}",
                        known.kind,
                        if known.with_ttl {
                            " with a time to live"
                        } else {
                            ""
                        },
                        descriptor.kind,
                        if descriptor.with_ttl {
                            " with a time to live"
                        } else {
                            ""
                        },
                    ),
                });
            }
            return Ok(StateId(index as u32));
        }
        if self.states.len() >= usize::from(RESTORED_STATE) {
            return Err(StateError::Backend {
                backend: BACKEND_NAME,
                operation: "register a state",
                reason: format!("an operator may have at most {RESTORED_STATE} states"),
            });
        }
        self.states.push(descriptor.clone());
        Ok(StateId(self.states.len() as u32 - 1))
    }

    fn get(
        &mut self,
        state: StateId,
        key_group: u32,
        key: &[u8],
        value: &mut Vec<u8>,
    ) -> Result<bool, StateError> {
        self.set_key(state, key_group, key)?;
        self.read(value)
    }

    fn put(
        &mut self,
        state: StateId,
        key_group: u32,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), StateError> {
        self.set_key(state, key_group, key)?;
        self.write_value(value)
    }

    fn merge(
        &mut self,
        state: StateId,
        key_group: u32,
        key: &[u8],
        operand: &[u8],
    ) -> Result<(), StateError> {
        self.set_key(state, key_group, key)?;
        if self.is_held() {
            self.overlay.merge(&self.key, operand)?;
            self.bound_overlay();
            return Ok(());
        }
        self.settle_key(false)?;
        self.db()
            .merge_opt(&self.key, operand, &self.write)
            .map_err(engine("write"))?;
        self.drain(Some(DRAIN_PER_WRITE))
    }

    fn take_restored(&mut self, name: &str) -> Result<Vec<(u32, Vec<u8>)>, StateError> {
        let mut taken = Vec::new();
        let mut value = Vec::new();
        for key_group in self.range.iter() {
            self.set_restored_key(key_group, name);
            if self.read(&mut value)? {
                taken.push((key_group, std::mem::take(&mut value)));
                self.remove_value()?;
            }
        }
        Ok(taken)
    }

    fn delete(&mut self, state: StateId, key_group: u32, key: &[u8]) -> Result<(), StateError> {
        self.set_key(state, key_group, key)?;
        self.remove_value()
    }

    fn scan(
        &mut self,
        state: StateId,
        key_group: u32,
        prefix: &[u8],
        visit: &mut ScanVisitor<'_>,
    ) -> Result<(), StateError> {
        let mut start = Vec::with_capacity(PREFIX_LEN + prefix.len());
        keys::write_key(&mut start, key_group, self.state_id(state)?, prefix);
        let end = keys::prefix_end(&start);
        match &self.frozen {
            None => scan_merged(self.db(), &self.overlay, &start, end.as_deref(), visit),
            Some(frozen) => {
                let layers = Overlay::compose(frozen, &self.overlay, &start, end.as_deref())?;
                scan_merged(self.db(), &layers, &start, end.as_deref(), visit)
            }
        }
    }

    fn snapshot(
        &mut self,
        request: &SnapshotRequest,
    ) -> Result<Box<dyn KeyedBackendSnapshot>, StateError> {
        // The previous snapshot let go long ago (one checkpoint at a time): its
        // acknowledgement, which the next checkpoint waits for, follows the release.
        self.wait_for_release();
        self.snapshots += 1;
        let frozen = self.freeze()?;
        let released = Arc::new(AtomicBool::new(false));
        self.held = Some(Arc::clone(&released));
        self.frozen = Some(Arc::clone(&frozen));
        let hold = Hold::new(Arc::clone(&self.db), frozen, released);
        if request.canonical || !self.incremental {
            return Ok(Box::new(CanonicalSnapshot::new(
                hold,
                self.range,
                self.states.clone(),
                request,
            )));
        }
        let dir = self
            .working_dir
            .0
            .join(format!("chk-{}-{}", request.checkpoint_id, self.snapshots));
        Ok(Box::new(IncrementalSnapshot::new(
            hold,
            dir,
            self.range,
            self.states.clone(),
            Arc::clone(&self.uploads),
            self.naming.clone(),
        )))
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), StateError> {
        lock(&self.uploads).complete(checkpoint_id);
        Ok(())
    }

    fn notify_checkpoint_aborted(&mut self, checkpoint_id: u64) -> Result<(), StateError> {
        lock(&self.uploads).abort(checkpoint_id);
        Ok(())
    }
}

/// Locks the upload bookkeeping (plain data: usable after a panic elsewhere).
pub(crate) fn lock(uploads: &Mutex<Uploads>) -> std::sync::MutexGuard<'_, Uploads> {
    uploads
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Visits the entries from `start` to `end` (exclusive) of the database with the overlay's
/// held-back writes over them, in key order, passing each entry's row key (without the key
/// group and state id) and value.
pub(crate) fn scan_merged(
    db: &DB,
    overlay: &Overlay,
    start: &[u8],
    end: Option<&[u8]>,
    visit: &mut ScanVisitor<'_>,
) -> Result<(), StateError> {
    let mut options = ReadOptions::default();
    if let Some(end) = end {
        options.set_iterate_upper_bound(end.to_vec());
    }
    let mut iterator = db.raw_iterator_opt(options);
    iterator.seek(start);
    let mut held = overlay.range(start, end).peekable();
    loop {
        // Which side goes next; the borrows of the iterator's entry end with this block.
        let (advance_db, advance_held, control) = {
            let from_db = match (iterator.key(), iterator.value()) {
                (Some(k), Some(v)) if iterator.valid() => Some((k, v)),
                _ => None,
            };
            match (from_db, held.peek()) {
                (None, None) => break,
                (Some((key, value)), None) => (true, false, visit(&key[PREFIX_LEN..], value)?),
                (None, Some((key, pending))) => {
                    let control = match resolve(pending, None)? {
                        Some(value) => visit(&key[PREFIX_LEN..], &value)?,
                        None => ScanControl::Continue,
                    };
                    (false, true, control)
                }
                (Some((key, value)), Some((held_key, pending))) => {
                    match key.cmp(held_key.as_slice()) {
                        std::cmp::Ordering::Less => {
                            (true, false, visit(&key[PREFIX_LEN..], value)?)
                        }
                        std::cmp::Ordering::Greater => {
                            let control = match resolve(pending, None)? {
                                Some(v) => visit(&held_key[PREFIX_LEN..], &v)?,
                                None => ScanControl::Continue,
                            };
                            (false, true, control)
                        }
                        std::cmp::Ordering::Equal => {
                            let control = match resolve(pending, Some(value))? {
                                Some(v) => visit(&key[PREFIX_LEN..], &v)?,
                                None => ScanControl::Continue,
                            };
                            (true, true, control)
                        }
                    }
                }
            }
        };
        if advance_db {
            iterator.next();
        }
        if advance_held {
            held.next();
        }
        if control == ScanControl::Stop {
            break;
        }
    }
    iterator.status().map_err(engine("scan"))
}
