//! A task's side of a checkpoint: the synchronous snapshot of its chain at the barrier, the
//! asynchronous write of that snapshot to checkpoint storage, and the acknowledgement (or
//! decline) sent to the job manager.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::checkpoint::coordinator::Acknowledgement;
use crate::checkpoint::metadata::{
    ListItem, ListStateEntry, ListStateHandle, OperatorSubtaskState, StoredItem,
};
use crate::checkpoint::stats::SubtaskCheckpointStats;
use crate::checkpoint::storage::StorageError;
use crate::error::{panic_message, StateError, TaskError};
use crate::graph::ids::NodeId;
use crate::runtime::chain::OperatorChain;
use crate::runtime::stream_element::CheckpointBarrier;
use crate::runtime::task::{TaskControl, TaskEnvironment, TaskEvent};
use crate::state::backend::{KeyedBackendSnapshot, SnapshotOutput};
use crate::state::backend_factory::RestoredStateFiles;
use crate::state::keyed_state_snapshot::KeyGroupBlock;

/// What a checkpoint notification says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CheckpointNotification {
    /// Checkpoint `id` is complete (its metadata is durable).
    Complete(u64),
    /// Checkpoint `id` was aborted.
    Aborted(u64),
}

/// The frozen state of one operator subtask, taken on the task thread.
pub struct OperatorSnapshot {
    /// The operator.
    pub node: NodeId,
    /// Keyed state, written asynchronously by its backend.
    pub keyed: Option<Box<dyn KeyedBackendSnapshot>>,
    /// Operator list states (already serialized).
    pub lists: Vec<ListStateEntry>,
}

/// State handed to an operator subtask when the job starts from a checkpoint.
#[derive(Debug, Default)]
pub struct RestoredOperatorState {
    /// Keyed state of the key groups this subtask owns.
    pub keyed: Vec<KeyGroupBlock>,
    /// Keyed state as a backend's own files (incremental checkpoints), downloaded.
    pub keyed_files: Vec<RestoredStateFiles>,
    /// Operator list states after redistribution.
    pub lists: Vec<ListStateEntry>,
}

/// After the final checkpoint's barrier and end-of-stream went downstream, waits until that
/// checkpoint completes, passing every notification to `on_notification` (the chain commits
/// its last transactions on the completion notice).
pub fn await_final_checkpoint(
    env: &TaskEnvironment,
    final_id: u64,
    mut on_notification: impl FnMut(CheckpointNotification) -> Result<(), TaskError>,
) -> Result<(), TaskError> {
    loop {
        crossbeam_channel::select! {
            recv(env.control) -> message => match message {
                Ok(TaskControl::Notify(notification)) => {
                    on_notification(notification)?;
                    match notification {
                        CheckpointNotification::Complete(id) if id >= final_id => return Ok(()),
                        // The job manager fails the job; it is restored from its last checkpoint.
                        CheckpointNotification::Aborted(id) if id == final_id => return Err(TaskError::Cancelled),
                        _ => {}
                    }
                }
                // No records flow any more: nothing to trace.
                Ok(TaskControl::StopTracingOrigins) => {}
                Ok(TaskControl::Stop) | Err(_) => return Err(TaskError::Cancelled),
            },
            recv(env.cancel.receiver()) -> _ => return Err(TaskError::Cancelled),
        }
    }
}

/// How a stop-with-savepoint at whose barrier a task waited ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopOutcome {
    /// The savepoint completed (its notice was passed on, so sinks committed it): the task
    /// ends.
    Completed,
    /// The savepoint failed and the job runs on: the task resumes where it stopped.
    Resumed,
}

/// After taking a stop-with-savepoint's snapshot at `barrier`, waits for the savepoint's
/// fate, passing every message from the job manager to `on_control` (which delivers
/// notifications to the chain). Nothing else is read meanwhile: nothing follows the barrier
/// in any channel, and the task's own input waits unread in case the savepoint fails.
pub fn await_stop_savepoint(
    env: &TaskEnvironment,
    barrier: CheckpointBarrier,
    mut on_control: impl FnMut(TaskControl) -> Result<(), TaskError>,
) -> Result<StopOutcome, TaskError> {
    let id = barrier.checkpoint_id;
    loop {
        crossbeam_channel::select! {
            recv(env.control) -> message => {
                let control = message.map_err(|_| TaskError::Cancelled)?;
                on_control(control)?;
                match control {
                    TaskControl::Notify(CheckpointNotification::Complete(done)) if done >= id => {
                        return Ok(StopOutcome::Completed)
                    }
                    // Having ended its input, a drained chain cannot take records again; the
                    // job manager fails the job over to its latest restore point.
                    TaskControl::Notify(CheckpointNotification::Aborted(aborted))
                        if aborted == id && barrier.drains() =>
                    {
                        return Err(TaskError::Cancelled)
                    }
                    TaskControl::Notify(CheckpointNotification::Aborted(aborted)) if aborted == id => {
                        return Ok(StopOutcome::Resumed)
                    }
                    _ => {}
                }
            },
            recv(env.cancel.receiver()) -> _ => return Err(TaskError::Cancelled),
        }
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Fires `chain`'s processing-time timers that are due (on the task thread, between
/// records); returns when the next one is, for the task's next wait.
pub fn fire_due_processing_timers(chain: &mut OperatorChain) -> Result<Option<Instant>, TaskError> {
    let Some(next) = chain.next_processing_time() else {
        return Ok(None);
    };
    let now = i64::try_from(now_millis()).unwrap_or(i64::MAX);
    if now >= next {
        chain.fire_processing_timers(now)?;
    }
    Ok(chain.next_processing_time().map(|next| {
        let wait = u64::try_from(next.saturating_sub(now)).unwrap_or(0);
        Instant::now() + Duration::from_millis(wait)
    }))
}

/// The channel state an unaligned snapshot is still capturing: it arrives on `state` once
/// every channel's barrier is in, and is stored with operator `head` (the chain's first).
pub struct PendingChannelState {
    /// The chain head, whose list state carries the channel state.
    pub head: NodeId,
    /// Where the captured state comes from; dropped unsent when the capture is given up.
    pub state: crossbeam_channel::Receiver<Vec<ListStateEntry>>,
}

/// Takes checkpoint `barrier` at a task running `chain`: the chain's operators do their
/// pre-barrier work, the barrier leaves on every record writer, every operator's state is
/// frozen, and the write is handed to a snapshot thread. `extra` holds state taken before
/// the chain's (a source reader's position). An unaligned snapshot's thread also waits for
/// its `channel_state` before it acknowledges.
pub fn checkpoint_chain(
    chain: &mut OperatorChain,
    mut extra: Vec<OperatorSnapshot>,
    barrier: CheckpointBarrier,
    env: &TaskEnvironment,
    alignment_duration: Duration,
    channel_state: Option<PendingChannelState>,
) -> Result<(), TaskError> {
    let started = Instant::now();
    let start_delay = Duration::from_millis(now_millis().saturating_sub(barrier.timestamp_millis));
    chain.checkpoint(barrier, &mut extra)?;
    let stats = SubtaskCheckpointStats {
        task: env.task_name.clone(),
        sync_duration: started.elapsed(),
        alignment_duration,
        start_delay,
        unaligned: channel_state.is_some(),
        ..SubtaskCheckpointStats::default()
    };
    let Some(storage) = env.storage.clone() else {
        return Err(TaskError::Internal(
            "checkpoint barrier at a task without checkpoint storage".into(),
        ));
    };
    let (task, events) = (env.task, env.events.clone());
    let threshold = env.state_file_threshold;
    let id = barrier.checkpoint_id;
    let location = storage.location(id, barrier.snapshot_type);
    let spawned = std::thread::Builder::new()
        .name(format!("snapshot {id} {}", env.task_name))
        .spawn(move || {
            let write_started = Instant::now();
            let mut persisted = 0;
            if let Some(pending) = channel_state {
                let Ok(lists) = pending.state.recv() else {
                    drop(stats);
                    let _ = events.send(TaskEvent::Decline {
                        task,
                        checkpoint_id: id,
                        reason: "the capture of its in-flight records was given up".into(),
                        subsumed: true,
                    });
                    return;
                };
                persisted = lists
                    .iter()
                    .flat_map(|l| l.items.iter().map(|i| i.len() as u64))
                    .sum();
                match extra.iter_mut().find(|s| s.node == pending.head) {
                    Some(head) => head.lists.extend(lists),
                    None if lists.is_empty() => {}
                    None => extra.push(OperatorSnapshot {
                        node: pending.head,
                        keyed: None,
                        lists,
                    }),
                }
            }
            let written = catch_unwind(AssertUnwindSafe(|| {
                write_snapshots(
                    storage.as_ref(),
                    id,
                    &location,
                    task.subtask,
                    threshold,
                    extra,
                )
            }))
            .unwrap_or_else(|p| {
                Err(format!(
                    "snapshot writer panicked: {}",
                    panic_message(p.as_ref())
                ))
            });
            let event = match written {
                Ok(states) => {
                    let mut stats = stats;
                    stats.async_duration = write_started.elapsed();
                    stats.persisted_data = persisted;
                    stats.state_size = states.iter().map(|(_, s)| s.size()).sum();
                    stats.checkpointed_size = states.iter().map(|(_, s)| s.uploaded_size(id)).sum();
                    TaskEvent::Acknowledge {
                        task,
                        checkpoint_id: id,
                        ack: Acknowledgement::Task { states, stats },
                    }
                }
                Err(reason) => TaskEvent::Decline {
                    task,
                    checkpoint_id: id,
                    reason,
                    subsumed: false,
                },
            };
            // The job manager may have moved on (job cancelled); the ack is then moot.
            let _ = events.send(event);
        });
    spawned
        .map(|_| ())
        .map_err(|e| TaskError::Internal(format!("cannot start snapshot thread: {e}")))
}

/// Where an operator subtask's keyed state files go: its checkpoint's location, under names
/// that start with the operator and subtask, and the job's shared location.
struct StorageOutput<'a> {
    storage: &'a dyn crate::checkpoint::storage::CheckpointStorage,
    checkpoint_id: u64,
    location: &'a str,
    stem: String,
}

fn storage_error(file: &str) -> impl FnOnce(StorageError) -> StateError + '_ {
    move |e| StateError::Storage {
        file: file.to_string(),
        reason: e.to_string(),
    }
}

impl SnapshotOutput for StorageOutput<'_> {
    fn checkpoint_id(&self) -> u64 {
        self.checkpoint_id
    }

    fn write_file(&mut self, name: &str, bytes: &[u8]) -> Result<(), StateError> {
        self.storage
            .write_file(self.location, name, bytes)
            .map_err(storage_error(name))
    }

    fn copy_file(&mut self, name: &str, source: &Path) -> Result<(), StateError> {
        self.storage
            .copy_file_in(self.location, name, source)
            .map_err(storage_error(name))
    }

    fn copy_shared_file(&mut self, name: &str, source: &Path) -> Result<(), StateError> {
        let shared = self
            .storage
            .shared_location()
            .map_err(storage_error(name))?;
        self.storage
            .copy_file_in(&shared, name, source)
            .map_err(storage_error(name))
    }

    fn file_name(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.stem)
    }
}

/// The asynchronous part: writes keyed state files and assembles the subtask states.
fn write_snapshots(
    storage: &dyn crate::checkpoint::storage::CheckpointStorage,
    checkpoint_id: u64,
    location: &str,
    subtask: u32,
    threshold: u64,
    snapshots: Vec<OperatorSnapshot>,
) -> Result<Vec<(NodeId, OperatorSubtaskState)>, String> {
    let mut states = Vec::with_capacity(snapshots.len());
    for snapshot in snapshots {
        let keyed = match snapshot.keyed {
            Some(keyed) => {
                let mut output = StorageOutput {
                    storage,
                    checkpoint_id,
                    location,
                    stem: format!("{}-{subtask}", snapshot.node),
                };
                keyed.write(&mut output).map_err(|e| e.to_string())?
            }
            None => None,
        };
        if keyed.is_none() && snapshot.lists.is_empty() {
            continue;
        }
        let file = format!("{}-{subtask}.operator", snapshot.node);
        let lists = store_lists(storage, location, &file, threshold, snapshot.lists)?;
        states.push((
            snapshot.node,
            OperatorSubtaskState {
                subtask,
                keyed,
                lists,
            },
        ));
    }
    Ok(states)
}

/// An operator subtask's list states as its checkpoint records them: inline in the
/// metadata when small, otherwise their items in state file `file` and references in the
/// metadata (so that the metadata stays small and a restore reads only the items it gets).
fn store_lists(
    storage: &dyn crate::checkpoint::storage::CheckpointStorage,
    location: &str,
    file: &str,
    threshold: u64,
    lists: Vec<ListStateEntry>,
) -> Result<Vec<ListStateHandle>, String> {
    let total: u64 = lists
        .iter()
        .flat_map(|l| l.items.iter().map(|i| i.len() as u64))
        .sum();
    if total <= threshold {
        return Ok(lists.into_iter().map(ListStateHandle::inline).collect());
    }
    let mut bytes = Vec::with_capacity(total as usize);
    let mut handles = Vec::with_capacity(lists.len());
    for list in lists {
        let items = list
            .items
            .iter()
            .map(|item| {
                let offset = bytes.len() as u64;
                bytes.extend_from_slice(item);
                ListItem::Stored(StoredItem {
                    file: file.to_string(),
                    offset,
                    length: item.len() as u64,
                    crc32: crc32fast::hash(item),
                })
            })
            .collect();
        handles.push(ListStateHandle {
            name: list.name,
            mode: list.mode,
            items,
        });
    }
    storage
        .write_file(location, file, &bytes)
        .map_err(|e| e.to_string())?;
    Ok(handles)
}
