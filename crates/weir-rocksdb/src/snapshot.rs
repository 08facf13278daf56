//! The RocksDB backend's snapshots.
//!
//! - **Incremental** (checkpoints with `state.backend.incremental: true`): the synchronous
//!   part only holds the database (writes go to the overlay); the asynchronous part makes a
//!   RocksDB checkpoint — a memtable flush and hard links to the immutable SST files —
//!   lets the database go, and uploads the SST files no checkpoint known complete has
//!   uploaded yet into the job's shared location, and the few small files that describe
//!   the database (`MANIFEST`, `CURRENT`, `OPTIONS`) into the checkpoint's own location.
//! - **Canonical** (savepoints, and checkpoints without incremental): the synchronous part
//!   takes a RocksDB snapshot (a sequence number, no copy); the asynchronous part writes its
//!   rows in the canonical key-group format that every backend restores.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rocksdb::checkpoint::Checkpoint;
use rocksdb::{ReadOptions, WriteBatch, WriteOptions, DB};
use weir::checkpoint::metadata::{
    IncrementalKeyedStateHandle, KeyGroupsStateHandle, KeyedStateHandle, StateFile,
};
use weir::error::StateError;
use weir::state::backend::{
    KeyedBackendSnapshot, ScanControl, ScanVisitor, SnapshotOutput, SnapshotRequest,
    StateDescriptor,
};
use weir::state::canonical_snapshot::{write_canonical, CanonicalState};
use weir::state::key_group::KeyGroupRange;

use crate::backend::{engine, local_io, lock, FileNaming};
use crate::keys::{self, PREFIX_LEN, RESTORED_STATE};
use crate::overlay::{Overlay, Pending};
use crate::BACKEND_NAME;

/// Which SST files later checkpoints may refer to instead of uploading them again.
///
/// Only the files of a checkpoint the backend heard completed: an upload of a checkpoint
/// that is aborted is deleted. If the files of a completed checkpoint were released before
/// the backend heard of a later one, the job manager refuses the checkpoint that refers to
/// them; the abort notice then empties the set, and the next checkpoint uploads everything.
#[derive(Debug, Default)]
pub(crate) struct Uploads {
    /// By local name (`000042.sst`).
    confirmed: BTreeMap<String, StateFile>,
    /// The SST files of checkpoints not known complete yet, by checkpoint.
    pending: BTreeMap<u64, BTreeMap<String, StateFile>>,
}

impl Uploads {
    /// The shared files of a restored checkpoint of this job, which its database still has.
    pub(crate) fn restored(files: &[StateFile]) -> Self {
        Self {
            confirmed: files
                .iter()
                .map(|f| (f.local_name.clone(), f.clone()))
                .collect(),
            pending: BTreeMap::new(),
        }
    }

    /// Checkpoint `id` completed: its files are the ones to refer to from now on.
    pub(crate) fn complete(&mut self, id: u64) {
        if let Some(files) = self.pending.remove(&id) {
            self.confirmed = files;
        }
        self.pending.retain(|pending, _| *pending > id);
    }

    /// Checkpoint `id` was aborted: its uploads are deleted, and what it referred to may be.
    pub(crate) fn abort(&mut self, id: u64) {
        self.pending.remove(&id);
        self.confirmed.clear();
    }
}

/// Lets the database go when dropped: the task's writes reach it again.
struct Release(Arc<AtomicBool>);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// A snapshot's hold on the database: the writes frozen at its barrier, to land in the
/// database before the snapshot takes what it needs of it, and the release (also on an
/// error or a panic, when the hold is dropped).
pub(crate) struct Hold {
    db: Arc<DB>,
    frozen: Arc<Overlay>,
    _release: Release,
}

impl Hold {
    /// Holds `db` with `frozen` writes; lets it go by setting `released`.
    pub(crate) fn new(db: Arc<DB>, frozen: Arc<Overlay>, released: Arc<AtomicBool>) -> Self {
        Self {
            db,
            frozen,
            _release: Release(released),
        }
    }

    /// Writes the frozen writes into the database in one atomic batch.
    fn land(&self) -> Result<(), StateError> {
        if self.frozen.is_empty() {
            return Ok(());
        }
        let mut batch = WriteBatch::default();
        for (key, pending) in self.frozen.iter() {
            match pending {
                Pending::Put(value) => batch.put(key, value),
                Pending::Delete => batch.delete(key),
                Pending::Merge(operands) => batch.merge(key, operands),
            }
        }
        let mut write = WriteOptions::default();
        write.disable_wal(true);
        self.db
            .write_opt(batch, &write)
            .map_err(engine("write held-back state"))
    }
}

/// The asynchronous part of an incremental snapshot.
pub(crate) struct IncrementalSnapshot {
    hold: Hold,
    dir: PathBuf,
    range: KeyGroupRange,
    states: Vec<StateDescriptor>,
    uploads: Arc<Mutex<Uploads>>,
    naming: FileNaming,
}

impl IncrementalSnapshot {
    /// A snapshot held by `hold` until its RocksDB checkpoint is made in `dir`.
    pub(crate) fn new(
        hold: Hold,
        dir: PathBuf,
        range: KeyGroupRange,
        states: Vec<StateDescriptor>,
        uploads: Arc<Mutex<Uploads>>,
        naming: FileNaming,
    ) -> Self {
        Self {
            hold,
            dir,
            range,
            states,
            uploads,
            naming,
        }
    }
}

/// CRC-32 of the file at `path`.
fn file_crc(path: &Path) -> Result<u32, StateError> {
    let mut file = std::fs::File::open(path).map_err(local_io("read a checkpoint file", path))?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let read = file
            .read(&mut buffer)
            .map_err(local_io("read a checkpoint file", path))?;
        if read == 0 {
            return Ok(hasher.finalize());
        }
        hasher.update(&buffer[..read]);
    }
}

impl IncrementalUpload<'_> {
    /// Uploads what the RocksDB checkpoint in `self.dir` has that storage lacks.
    fn upload(
        &self,
        output: &mut dyn SnapshotOutput,
    ) -> Result<Option<KeyedStateHandle>, StateError> {
        let id = output.checkpoint_id();
        let confirmed = lock(self.uploads).confirmed.clone();
        let mut names = Vec::new();
        let listing =
            std::fs::read_dir(self.dir).map_err(local_io("list a checkpoint", self.dir))?;
        for entry in listing {
            let entry = entry.map_err(local_io("list a checkpoint", self.dir))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        let (mut shared, mut private) = (Vec::new(), Vec::new());
        for name in names {
            let path = self.dir.join(&name);
            let size = std::fs::metadata(&path)
                .map_err(local_io("read a checkpoint file", &path))?
                .len();
            if name.ends_with(".sst") {
                // An SST file never changes once written: the same name is the same file.
                if let Some(known) = confirmed.get(&name).filter(|f| f.size == size) {
                    shared.push(known.clone());
                    continue;
                }
                let stored_name = format!("{}-{}-{name}", self.naming.stem, self.naming.instance);
                let crc32 = file_crc(&path)?;
                output.copy_shared_file(&stored_name, &path)?;
                shared.push(StateFile {
                    local_name: name,
                    stored_name,
                    size,
                    crc32,
                    uploaded_in: id,
                });
            } else {
                let stored_name = output.file_name(&format!("-{name}"));
                let crc32 = file_crc(&path)?;
                output.copy_file(&stored_name, &path)?;
                private.push(StateFile {
                    local_name: name,
                    stored_name,
                    size,
                    crc32,
                    uploaded_in: id,
                });
            }
        }
        lock(self.uploads).pending.insert(
            id,
            shared
                .iter()
                .map(|f| (f.local_name.clone(), f.clone()))
                .collect(),
        );
        Ok(Some(KeyedStateHandle::Incremental(
            IncrementalKeyedStateHandle {
                backend: BACKEND_NAME.to_string(),
                key_groups: self.range,
                shared,
                private,
                states: self.states.to_vec(),
            },
        )))
    }
}

impl KeyedBackendSnapshot for IncrementalSnapshot {
    fn write(
        self: Box<Self>,
        output: &mut dyn SnapshotOutput,
    ) -> Result<Option<KeyedStateHandle>, StateError> {
        let this = *self;
        let made = this.hold.land().and_then(|()| {
            Checkpoint::new(&this.hold.db)
                .and_then(|checkpoint| checkpoint.create_checkpoint(&this.dir))
                .map_err(engine("make a checkpoint"))
        });
        // The files are fixed now: the task may write again while they are uploaded.
        drop(this.hold);
        let uploaded = made.and_then(|()| {
            let parts = IncrementalUpload {
                dir: &this.dir,
                range: this.range,
                states: &this.states,
                uploads: &this.uploads,
                naming: &this.naming,
            };
            parts.upload(output)
        });
        if let Err(e) = std::fs::remove_dir_all(&this.dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(dir = %this.dir.display(), error = %e,
                    "cannot remove a RocksDB checkpoint after uploading it");
            }
        }
        uploaded
    }
}

/// What uploading an incremental snapshot needs once the database is let go.
struct IncrementalUpload<'a> {
    dir: &'a Path,
    range: KeyGroupRange,
    states: &'a [StateDescriptor],
    uploads: &'a Mutex<Uploads>,
    naming: &'a FileNaming,
}

type DbSnapshot<'a> = rocksdb::Snapshot<'a>;

self_cell::self_cell!(
    /// A RocksDB snapshot that holds its database, so that it can go to the snapshot
    /// thread.
    pub(crate) struct OwnedSnapshot {
        owner: Arc<DB>,
        #[covariant]
        dependent: DbSnapshot,
    }
);

/// The asynchronous part of a canonical snapshot.
pub(crate) struct CanonicalSnapshot {
    hold: Hold,
    range: KeyGroupRange,
    states: Vec<CanonicalState>,
}

impl CanonicalSnapshot {
    /// Rows in `range` of `states` (by id), with the expiry `request` asks, of the database
    /// `hold` holds until a RocksDB snapshot of it is taken.
    pub(crate) fn new(
        hold: Hold,
        range: KeyGroupRange,
        states: Vec<StateDescriptor>,
        request: &SnapshotRequest,
    ) -> Self {
        let states = states
            .into_iter()
            .enumerate()
            .map(|(id, d)| CanonicalState {
                expiry: request
                    .expiry
                    .iter()
                    .find(|(state, _)| state.0 as usize == id)
                    .map(|(_, cutoff)| *cutoff),
                name: d.name,
                kind: d.kind,
                with_ttl: d.with_ttl,
            })
            .collect();
        Self {
            hold,
            range,
            states,
        }
    }
}

/// Visits the rows of `snapshot` under `prefix`, passing row keys without the first
/// `PREFIX_LEN` bytes.
fn scan_snapshot(
    snapshot: &OwnedSnapshot,
    prefix: &[u8],
    visit: &mut ScanVisitor<'_>,
) -> Result<(), StateError> {
    snapshot.with_dependent(|_, snapshot| {
        let mut options = ReadOptions::default();
        if let Some(end) = keys::prefix_end(prefix) {
            options.set_iterate_upper_bound(end);
        }
        let mut iterator = snapshot.raw_iterator_opt(options);
        iterator.seek(prefix);
        while iterator.valid() {
            let (Some(key), Some(value)) = (iterator.key(), iterator.value()) else {
                break;
            };
            if visit(&key[PREFIX_LEN..], value)? == ScanControl::Stop {
                break;
            }
            iterator.next();
        }
        iterator.status().map_err(engine("read a snapshot"))
    })
}

impl KeyedBackendSnapshot for CanonicalSnapshot {
    fn write(
        self: Box<Self>,
        output: &mut dyn SnapshotOutput,
    ) -> Result<Option<KeyedStateHandle>, StateError> {
        let this = *self;
        this.hold.land()?;
        let snapshot = OwnedSnapshot::new(Arc::clone(&this.hold.db), |db| db.snapshot());
        // A sequence number is all the snapshot needs: the task may write again.
        drop(this.hold);
        let (range, states) = (this.range, this.states);
        // Restored entries of states never registered are carried as they are.
        let mut pending: BTreeMap<String, BTreeMap<u32, Vec<u8>>> = BTreeMap::new();
        let mut prefix = Vec::new();
        for key_group in range.iter() {
            keys::write_key(&mut prefix, key_group, RESTORED_STATE, &[]);
            scan_snapshot(&snapshot, &prefix, &mut |name, entries| {
                pending
                    .entry(String::from_utf8_lossy(name).into_owned())
                    .or_default()
                    .insert(key_group, entries.to_vec());
                Ok(ScanControl::Continue)
            })?;
        }
        let (bytes, key_groups) =
            write_canonical(range, &states, &pending, &mut |state, key_group, visit| {
                let mut prefix = Vec::with_capacity(PREFIX_LEN);
                keys::write_key(&mut prefix, key_group, state as u16, &[]);
                scan_snapshot(&snapshot, &prefix, visit)
            })?;
        if key_groups.is_empty() {
            return Ok(None);
        }
        let file = output.file_name(".keyed");
        output.write_file(&file, &bytes)?;
        Ok(Some(KeyedStateHandle::KeyGroups(KeyGroupsStateHandle {
            file,
            key_groups,
        })))
    }
}
