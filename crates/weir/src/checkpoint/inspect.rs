//! Reading a checkpoint or savepoint directory for people (`weir inspect`): what it holds,
//! operator by operator — uids, parallelism, state size per key group, the sinks' pending
//! transactions — and, on request, whether every byte still verifies against its checksum.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::checkpoint::metadata::{
    CheckpointMetadata, KeyGroupsStateHandle, KeyedStateHandle, ListItem, ListRedistribution,
    StateFile, METADATA_FILE,
};
use crate::runtime::stream_element::SnapshotType;
use crate::state::keyed_state_snapshot::decode_key_group_block;

/// Why a checkpoint cannot be inspected at all.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// No metadata where it should be.
    #[error("`{}` is not a checkpoint or savepoint: it has no `{METADATA_FILE}` file (give the `chk-N` or `savepoint-N` directory, or its `{METADATA_FILE}` file)", path.display())]
    NotACheckpoint {
        /// The path given.
        path: PathBuf,
    },
    /// The metadata cannot be read or does not verify.
    #[error("the metadata `{}` is unusable: {reason}", path.display())]
    Metadata {
        /// The metadata file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// One sink transaction that was pre-committed but not yet known to be committed when the
/// snapshot was taken: recovery from this snapshot commits it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PendingTransaction {
    /// The checkpoint it belongs to.
    pub checkpoint_id: u64,
    /// The transaction's handle, where it reads as text (a file name, a transactional id),
    /// else its size.
    pub handle: String,
}

/// One operator list state of a subtask.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ListStateSummary {
    /// Its name.
    pub name: String,
    /// Split evenly or handed whole to every subtask (union) on rescaling.
    pub union: bool,
    /// How it is redistributed on rescaling.
    pub mode: ListRedistribution,
    /// Its items.
    pub items: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Whether its items are in a state file rather than in the metadata.
    pub in_file: bool,
}

/// One subtask's part of an operator's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SubtaskSummary {
    /// The subtask index.
    pub subtask: u32,
    /// Its keyed state file in the canonical format, if any.
    pub keyed_file: Option<String>,
    /// Bytes per key group, in key-group order (canonical format only).
    pub key_groups: Vec<(u32, u64)>,
    /// Its keyed state as a backend's own files (incremental checkpoints), if so.
    pub incremental: Option<IncrementalSummary>,
    /// Its operator list states.
    pub lists: Vec<ListStateSummary>,
    /// Its sink's pending transactions, if it is a transactional sink.
    pub pending_transactions: Vec<PendingTransaction>,
}

/// Keyed state kept as a backend's own files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IncrementalSummary {
    /// The backend that wrote them.
    pub backend: String,
    /// The key groups they hold.
    pub key_groups: (u32, u32),
    /// Files shared with other checkpoints (in the job's shared location).
    pub shared_files: usize,
    /// Files of this checkpoint only.
    pub private_files: usize,
    /// Bytes in all of them.
    pub bytes: u64,
    /// Bytes this checkpoint uploaded.
    pub uploaded_bytes: u64,
    /// The states they hold.
    pub states: Vec<String>,
}

/// One operator's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OperatorSummary {
    /// Its uid.
    pub uid: String,
    /// Its name.
    pub name: String,
    /// Its parallelism when the snapshot was taken.
    pub parallelism: u32,
    /// Its key groups.
    pub max_parallelism: u32,
    /// Bytes of state over all subtasks.
    pub state_size: u64,
    /// Bytes of its source coordinator's (split enumerator's) state, if any.
    pub coordinator_bytes: Option<u64>,
    /// Its subtasks.
    pub subtasks: Vec<SubtaskSummary>,
}

/// What a checkpoint or savepoint holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckpointSummary {
    /// Its directory.
    pub location: PathBuf,
    /// Its id.
    pub checkpoint_id: u64,
    /// Whether it is a savepoint.
    pub savepoint: bool,
    /// The job that wrote it.
    pub job_name: String,
    /// The JobManager epoch that wrote it.
    pub epoch: u64,
    /// When it was taken, in milliseconds since the Unix epoch.
    pub timestamp_millis: u64,
    /// Bytes of state.
    pub state_size: u64,
    /// Its operators.
    pub operators: Vec<OperatorSummary>,
}

/// Something that does not verify.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Damage {
    /// The file.
    pub file: PathBuf,
    /// The operator whose state it holds.
    pub operator: String,
    /// The subtask.
    pub subtask: u32,
    /// What is wrong.
    pub problem: String,
}

/// The directory and metadata file of `path` (a checkpoint directory or its metadata file).
fn locate(path: &Path) -> Result<(PathBuf, PathBuf), InspectError> {
    let (dir, file) = if path.file_name().is_some_and(|n| n == METADATA_FILE) {
        (
            path.parent().unwrap_or(Path::new(".")).to_path_buf(),
            path.to_path_buf(),
        )
    } else {
        (path.to_path_buf(), path.join(METADATA_FILE))
    };
    if !file.is_file() {
        return Err(InspectError::NotACheckpoint {
            path: path.to_path_buf(),
        });
    }
    Ok((dir, file))
}

/// Reads and verifies the metadata of the checkpoint at `path`.
pub fn read_metadata(path: &Path) -> Result<(PathBuf, CheckpointMetadata), InspectError> {
    let (dir, file) = locate(path)?;
    let bytes = std::fs::read(&file).map_err(|e| InspectError::Metadata {
        path: file.clone(),
        reason: e.to_string(),
    })?;
    let metadata = CheckpointMetadata::decode(&bytes).map_err(|reason| InspectError::Metadata {
        path: file.clone(),
        reason,
    })?;
    Ok((dir, metadata))
}

/// The leading varint of postcard bytes, and the rest.
fn varint(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut value = 0u64;
    for (i, byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, &bytes[i + 1..]));
        }
    }
    None
}

/// A pending transaction's item: `(checkpoint id, transaction)` in postcard. The
/// transaction's type is the sink's; it is shown as text where it starts with one.
/// The bytes of a list state item: inline, or read from its state file under `location`
/// (`None` if that cannot be read or does not match its checksum).
fn item_bytes(location: &Path, item: &ListItem) -> Option<Vec<u8>> {
    match item {
        ListItem::Inline(bytes) => Some(bytes.clone()),
        ListItem::Stored(stored) => {
            let bytes = std::fs::read(location.join(&stored.file)).ok()?;
            let start = usize::try_from(stored.offset).ok()?;
            let end = start.checked_add(usize::try_from(stored.length).ok()?)?;
            let slice = bytes.get(start..end)?;
            (crc32fast::hash(slice) == stored.crc32).then(|| slice.to_vec())
        }
    }
}

fn pending_transaction(item: &[u8]) -> PendingTransaction {
    let Some((checkpoint_id, rest)) = varint(item) else {
        return PendingTransaction {
            checkpoint_id: 0,
            handle: format!("{} undecodable bytes", item.len()),
        };
    };
    let text = varint(rest).and_then(|(len, tail)| {
        let text = tail.get(..usize::try_from(len).ok()?)?;
        std::str::from_utf8(text)
            .ok()
            .filter(|t| !t.is_empty() && t.chars().all(|c| !c.is_control()))
            .map(str::to_string)
    });
    PendingTransaction {
        checkpoint_id,
        handle: text.unwrap_or_else(|| format!("{} bytes", rest.len())),
    }
}

/// The list states that hold a transactional sink's pending transactions.
const PENDING_STATES: [&str; 1] = ["two-phase-commit-pending"];

/// What the checkpoint or savepoint at `path` holds.
pub fn summarize(path: &Path) -> Result<CheckpointSummary, InspectError> {
    let (location, metadata) = read_metadata(path)?;
    let operators = metadata
        .operators
        .iter()
        .map(|op| OperatorSummary {
            uid: op.uid.clone(),
            name: op.name.clone(),
            parallelism: op.parallelism,
            max_parallelism: op.max_parallelism,
            state_size: op.subtasks.iter().map(|s| s.size()).sum(),
            coordinator_bytes: op.coordinator.as_ref().map(|c| c.len() as u64),
            subtasks: op
                .subtasks
                .iter()
                .map(|s| SubtaskSummary {
                    subtask: s.subtask,
                    keyed_file: match &s.keyed {
                        Some(KeyedStateHandle::KeyGroups(k)) => Some(k.file.clone()),
                        _ => None,
                    },
                    key_groups: match &s.keyed {
                        Some(KeyedStateHandle::KeyGroups(k)) => k
                            .key_groups
                            .iter()
                            .map(|g| (g.key_group, g.length))
                            .collect(),
                        _ => Vec::new(),
                    },
                    incremental: match &s.keyed {
                        Some(KeyedStateHandle::Incremental(h)) => Some(IncrementalSummary {
                            backend: h.backend.clone(),
                            key_groups: (h.key_groups.start, h.key_groups.end),
                            shared_files: h.shared.len(),
                            private_files: h.private.len(),
                            bytes: h.size(),
                            uploaded_bytes: h.uploaded_size(metadata.checkpoint_id),
                            states: h.states.iter().map(|s| s.name.clone()).collect(),
                        }),
                        _ => None,
                    },
                    lists: s
                        .lists
                        .iter()
                        .map(|l| ListStateSummary {
                            name: l.name.clone(),
                            union: l.mode == ListRedistribution::Union,
                            mode: l.mode,
                            items: l.items.len(),
                            bytes: l.size(),
                            in_file: l.items.iter().any(|i| matches!(i, ListItem::Stored(_))),
                        })
                        .collect(),
                    pending_transactions: s
                        .lists
                        .iter()
                        .filter(|l| PENDING_STATES.contains(&l.name.as_str()))
                        .flat_map(|l| {
                            l.items.iter().map(|i| match item_bytes(&location, i) {
                                Some(bytes) => pending_transaction(&bytes),
                                None => PendingTransaction {
                                    checkpoint_id: 0,
                                    handle: "unreadable (its state file is damaged)".into(),
                                },
                            })
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect();
    Ok(CheckpointSummary {
        location,
        checkpoint_id: metadata.checkpoint_id,
        savepoint: metadata.kind == SnapshotType::Savepoint,
        job_name: metadata.job_name.clone(),
        epoch: metadata.epoch,
        timestamp_millis: metadata.timestamp_millis,
        state_size: metadata.state_size(),
        operators,
    })
}

fn verify_keyed(location: &Path, handle: &KeyGroupsStateHandle) -> Result<(), String> {
    let path = location.join(&handle.file);
    let bytes = std::fs::read(&path).map_err(|e| format!("cannot be read: {e}"))?;
    if !bytes.starts_with(b"WEIRKG01") {
        return Err("is not a Weir keyed state file (wrong magic)".into());
    }
    for entry in &handle.key_groups {
        let block = usize::try_from(entry.offset)
            .ok()
            .zip(usize::try_from(entry.offset.saturating_add(entry.length)).ok())
            .and_then(|(start, end)| bytes.get(start..end))
            .ok_or_else(|| {
                format!(
                    "key group {} lies beyond the end of the file ({} bytes): the file is truncated",
                    entry.key_group,
                    bytes.len()
                )
            })?;
        decode_key_group_block(entry, block, &handle.file).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Checks one file of a backend's own snapshot: its length and checksum.
fn verify_state_file(path: &Path, file: &StateFile) -> Result<(), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot be read: {e}"))?;
    if bytes.len() as u64 != file.size {
        return Err(format!(
            "{} bytes, expected {}: the file is truncated or was replaced",
            bytes.len(),
            file.size
        ));
    }
    if crc32fast::hash(&bytes) != file.crc32 {
        return Err("checksum mismatch".into());
    }
    Ok(())
}

/// The files of a keyed state handle, where they are, paired with how to check each.
fn keyed_files<'h>(
    location: &Path,
    handle: &'h KeyedStateHandle,
) -> Vec<(PathBuf, Option<&'h StateFile>)> {
    match handle {
        KeyedStateHandle::KeyGroups(h) => vec![(location.join(&h.file), None)],
        KeyedStateHandle::Incremental(h) => {
            let shared = location
                .parent()
                .unwrap_or(location)
                .join(crate::checkpoint::storage::SHARED_DIR);
            h.shared
                .iter()
                .map(|f| (shared.join(&f.stored_name), Some(f)))
                .chain(
                    h.private
                        .iter()
                        .map(|f| (location.join(&f.stored_name), Some(f))),
                )
                .collect()
        }
    }
}

/// Checks every checksum of the checkpoint at `path`: the metadata's (an error if it does
/// not verify), then every key group block of every keyed state file. Returns what is
/// damaged; empty when everything verifies.
pub fn verify(path: &Path) -> Result<Vec<Damage>, InspectError> {
    verify_with_progress(path, |_, _| {})
}

/// [`verify`], calling `progress(files checked, files)` after each state file.
pub fn verify_with_progress(
    path: &Path,
    mut progress: impl FnMut(usize, usize),
) -> Result<Vec<Damage>, InspectError> {
    let (location, metadata) = read_metadata(path)?;
    let files: usize = metadata
        .operators
        .iter()
        .flat_map(|op| &op.subtasks)
        .filter_map(|s| s.keyed.as_ref())
        .map(|h| keyed_files(&location, h).len())
        .sum();
    let mut checked = 0;
    let mut damage = Vec::new();
    for op in &metadata.operators {
        for subtask in &op.subtasks {
            // Operator state in files: one finding per damaged file.
            let mut damaged_files = Vec::new();
            for list in &subtask.lists {
                for item in &list.items {
                    let ListItem::Stored(stored) = item else {
                        continue;
                    };
                    if item_bytes(&location, item).is_none()
                        && !damaged_files.contains(&stored.file)
                    {
                        damaged_files.push(stored.file.clone());
                        damage.push(Damage {
                            file: location.join(&stored.file),
                            operator: op.name.clone(),
                            subtask: subtask.subtask,
                            problem: format!(
                                "list state `{}`: the item at offset {} is missing or does not \
                                 match its checksum",
                                list.name, stored.offset
                            ),
                        });
                    }
                }
            }
            let Some(handle) = &subtask.keyed else {
                continue;
            };
            for (path, file) in keyed_files(&location, handle) {
                let outcome = match (handle, file) {
                    (KeyedStateHandle::KeyGroups(h), _) => verify_keyed(&location, h),
                    (_, Some(file)) => verify_state_file(&path, file),
                    (_, None) => Ok(()),
                };
                checked += 1;
                progress(checked, files);
                if let Err(problem) = outcome {
                    damage.push(Damage {
                        file: path,
                        operator: op.name.clone(),
                        subtask: subtask.subtask,
                        problem,
                    });
                }
            }
        }
    }
    Ok(damage)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_transactions_show_their_checkpoint_and_handle() {
        let item = postcard::to_allocvec(&(7u64, "txn-7-0".to_string())).unwrap();
        assert_eq!(
            pending_transaction(&item),
            PendingTransaction {
                checkpoint_id: 7,
                handle: "txn-7-0".into()
            }
        );
        let item = postcard::to_allocvec(&(300u64, (1u8, 2u64))).unwrap();
        let shown = pending_transaction(&item);
        assert_eq!(shown.checkpoint_id, 300);
        assert!(shown.handle.ends_with("bytes"), "{shown:?}");
        assert_eq!(pending_transaction(&[0xff; 11]).checkpoint_id, 0);
    }

    #[test]
    fn a_directory_without_metadata_is_not_a_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let err = summarize(dir.path()).unwrap_err().to_string();
        assert!(err.contains("has no `_metadata` file"), "{err}");
        std::fs::write(dir.path().join(METADATA_FILE), b"WEIRCHK2 garbage").unwrap();
        let err = verify(dir.path()).unwrap_err().to_string();
        assert!(err.contains("is unusable"), "{err}");
    }
}
