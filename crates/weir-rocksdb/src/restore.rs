//! Opening a subtask's database: empty, from the files of one incremental checkpoint of the
//! same key groups (the files become the database), or at another parallelism from several.
//!
//! Rescaled, the database starts from the restored files that share the most key groups
//! with the subtask's range; the key groups outside it are removed with two range
//! deletions, and the rows of the other files' shares are copied in with bounded scans
//! (Flink's approach in `RocksDBIncrementalRestoreOperation`). State ids are remapped by
//! state name, since each old subtask numbered its states in the order it registered them.

use std::path::Path;

use rocksdb::{Cache, Options, ReadOptions, WriteBatch, WriteOptions, DB};
use weir::error::StateError;
use weir::state::backend::StateDescriptor;
use weir::state::backend_factory::{BackendContext, RestoredStateFiles};
use weir::state::key_group::KeyGroupRange;

use crate::backend::{engine, local_io, OpenDb};
use crate::keys::{self, MAX_KEY_GROUPS, RESTORED_STATE};
use crate::options::RocksDbOptions;
use crate::snapshot::Uploads;

/// Rows copied per write batch when cutting key groups out of another subtask's files.
const COPY_BATCH_BYTES: usize = 4 << 20;

/// Moves the files of `from` into `to` (a rename on one filesystem, a copy otherwise).
fn move_files(from: &Path, to: &Path) -> Result<(), StateError> {
    std::fs::create_dir_all(to).map_err(local_io("create its database directory", to))?;
    for entry in std::fs::read_dir(from).map_err(local_io("list restored files", from))? {
        let entry = entry.map_err(local_io("list restored files", from))?;
        let dest = to.join(entry.file_name());
        if std::fs::rename(entry.path(), &dest).is_err() {
            std::fs::copy(entry.path(), &dest).map_err(local_io("copy a restored file", &dest))?;
        }
    }
    Ok(())
}

/// The number of key groups `files` shares with `range`.
fn overlap(files: &RestoredStateFiles, range: &KeyGroupRange) -> usize {
    files
        .handle
        .key_groups
        .intersection(range)
        .map_or(0, |r| r.len())
}

/// Opens the database of the subtask `context` describes, in `db_dir`.
pub(crate) fn open(
    context: &BackendContext<'_>,
    options: &RocksDbOptions,
    db_dir: &Path,
) -> Result<OpenDb, StateError> {
    let cache =
        Cache::new_lru_cache(options.cache_bytes()).map_err(engine("create its block cache"))?;
    let db_options = options.db_options(&cache);
    let range = context.key_groups;
    let files = context.restored_files;
    let open = |dir: &Path| DB::open(&db_options, dir).map_err(engine("open its database"));
    let Some(base) = files.iter().max_by_key(|f| overlap(f, &range)) else {
        std::fs::create_dir_all(db_dir)
            .map_err(local_io("create its database directory", db_dir))?;
        return Ok(OpenDb {
            db: open(db_dir)?,
            cache,
            states: Vec::new(),
            uploads: Uploads::default(),
        });
    };
    move_files(base.dir(), db_dir)?;
    let db = open(db_dir)?;
    let mut states = base.handle.states.clone();
    if files.len() == 1 && base.handle.key_groups == range {
        // The same key groups: the files are the database, and the job's next checkpoints
        // may refer to them again if they are this job's own.
        let uploads = match base.owned {
            true => Uploads::restored(&base.handle.shared),
            false => Uploads::default(),
        };
        return Ok(OpenDb {
            db,
            cache,
            states,
            uploads,
        });
    }
    keep_only(&db, range)?;
    for other in files.iter().filter(|f| !std::ptr::eq(*f, base)) {
        copy_share(&db, &db_options, other, range, &mut states)?;
    }
    Ok(OpenDb {
        db,
        cache,
        states,
        uploads: Uploads::default(),
    })
}

/// Removes every key group outside `range`.
fn keep_only(db: &DB, range: KeyGroupRange) -> Result<(), StateError> {
    let mut write = WriteOptions::default();
    write.disable_wal(true);
    let mut batch = WriteBatch::default();
    if range.start > 0 {
        batch.delete_range(keys::group_start(0), keys::group_start(range.start));
    }
    batch.delete_range(
        keys::group_start(range.end + 1),
        keys::group_start(MAX_KEY_GROUPS),
    );
    db.write_opt(batch, &write)
        .map_err(engine("cut its key groups out of restored files"))
}

/// The id in `states` of the state `descriptor` describes, added if it is not there yet.
fn state_id(
    states: &mut Vec<StateDescriptor>,
    descriptor: &StateDescriptor,
) -> Result<u16, StateError> {
    if let Some(index) = states.iter().position(|s| s.name == descriptor.name) {
        if states[index] != *descriptor {
            return Err(StateError::Corrupt {
                state: descriptor.name.clone(),
                reason: format!(
                    "the restored subtasks disagree on its kind: {:?} and {:?}",
                    states[index], descriptor
                ),
            });
        }
        return Ok(index as u16);
    }
    states.push(descriptor.clone());
    Ok((states.len() - 1) as u16)
}

/// Copies the rows of `files` in the key groups it shares with `range` into `db`.
fn copy_share(
    db: &DB,
    db_options: &Options,
    files: &RestoredStateFiles,
    range: KeyGroupRange,
    states: &mut Vec<StateDescriptor>,
) -> Result<(), StateError> {
    let Some(share) = files.handle.key_groups.intersection(&range) else {
        return Ok(());
    };
    let ids: Vec<u16> = files
        .handle
        .states
        .iter()
        .map(|d| state_id(states, d))
        .collect::<Result<_, _>>()?;
    let source = DB::open_for_read_only(db_options, files.dir(), false)
        .map_err(engine("open restored files"))?;
    let mut read = ReadOptions::default();
    read.set_iterate_upper_bound(keys::group_start(share.end + 1));
    let mut iterator = source.raw_iterator_opt(read);
    iterator.seek(keys::group_start(share.start));
    let mut write = WriteOptions::default();
    write.disable_wal(true);
    let mut batch = WriteBatch::default();
    let mut key = Vec::new();
    while iterator.valid() {
        let (Some(old_key), Some(value)) = (iterator.key(), iterator.value()) else {
            break;
        };
        let (key_group, state, row) =
            keys::split_key(old_key).ok_or_else(|| StateError::Corrupt {
                state: files.dir().display().to_string(),
                reason: format!("a {}-byte key is too short", old_key.len()),
            })?;
        let state = match state {
            RESTORED_STATE => RESTORED_STATE,
            id => *ids
                .get(usize::from(id))
                .ok_or_else(|| StateError::Corrupt {
                    state: files.dir().display().to_string(),
                    reason: format!("rows of state id {id}, which its checkpoint does not name"),
                })?,
        };
        keys::write_key(&mut key, key_group, state, row);
        batch.put(&key, value);
        if batch.size_in_bytes() >= COPY_BATCH_BYTES {
            db.write_opt(std::mem::take(&mut batch), &write)
                .map_err(engine("copy restored rows"))?;
        }
        iterator.next();
    }
    iterator.status().map_err(engine("read restored files"))?;
    db.write_opt(batch, &write)
        .map_err(engine("copy restored rows"))
}
