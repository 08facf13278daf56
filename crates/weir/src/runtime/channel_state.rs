//! The channel state of unaligned checkpoints (Flink's FLIP-76): the records that were in
//! flight to a task — sent before a checkpoint's barrier, not yet processed when the task
//! snapshotted at the barrier that overtook them — stored with the checkpoint and replayed
//! into the task before any new input when the job restores.
//!
//! They are stored as operator list state of the task's chain head, under reserved names,
//! so that they move with the same machinery when parallelism changes: records of a keyed
//! exchange go by key group to the subtask owning it, a broadcast input's to new subtask
//! `j` from old subtask `j mod P_old`, any other input's from old subtask `s` to new
//! subtask `s mod P`.

use std::collections::BTreeMap;

use crate::checkpoint::metadata::{ListRedistribution, ListStateEntry};
use crate::error::TaskError;
use crate::graph::ids::NodeId;
use crate::record::Record;
use crate::runtime::batch::RecordBatch;

/// The names of channel-state list entries start with this; operators never see them.
const PREFIX: &str = "weir.in-flight.";

/// What a task reading channels needs for its channel state.
#[derive(Debug, Clone)]
pub struct ChannelStateSetup {
    /// The chain head, whose list state carries the channel state.
    pub head: NodeId,
    /// Per input (first, second): whether a broadcast exchange feeds it.
    pub broadcast_inputs: [bool; 2],
    /// The task's doorbell, rung on a priority barrier (with unaligned checkpoints): its
    /// bell for the input channels, and its receiving end, which the task's record writers
    /// watch while they wait for room.
    pub doorbell: Option<(
        crossbeam_channel::Sender<()>,
        crossbeam_channel::Receiver<()>,
    )>,
}

/// Whether list state `name` is channel state rather than an operator's.
pub fn is_channel_state(name: &str) -> bool {
    name.starts_with(PREFIX)
}

/// The records in flight to one input of a task, as they are captured.
#[derive(Debug, Default)]
pub struct InFlightRecorder {
    input: u8,
    broadcast: bool,
    /// Per key group (records of a keyed exchange), encoded chunks.
    keyed: BTreeMap<u32, Vec<Vec<u8>>>,
    /// Records of any other exchange, encoded chunks.
    unkeyed: Vec<Vec<u8>>,
    records: u64,
}

impl InFlightRecorder {
    /// A recorder for input `input` (0 or 1), fed by a broadcast exchange or not.
    pub fn new(input: u8, broadcast: bool) -> Self {
        Self {
            input,
            broadcast,
            ..Self::default()
        }
    }

    /// Records captured since the last [`InFlightRecorder::take`].
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Captures a copy of `batch`'s records.
    pub fn record<T: Record>(&mut self, batch: &RecordBatch<T>) -> Result<(), TaskError> {
        let encode = |rows: &[(&T, Option<i64>)]| {
            postcard::to_allocvec(rows)
                .map_err(|e| TaskError::Internal(format!("cannot encode in-flight records: {e}")))
        };
        let records = batch.records();
        self.records += records.len() as u64;
        if batch.has_key_groups() {
            let mut groups: BTreeMap<u32, Vec<(&T, Option<i64>)>> = BTreeMap::new();
            for (i, record) in records.iter().enumerate() {
                match batch.key_group(i) {
                    Some(group) => groups
                        .entry(group)
                        .or_default()
                        .push((record, batch.timestamp(i))),
                    None => {
                        return Err(TaskError::Internal(
                            "an in-flight record of a keyed exchange has no key group".into(),
                        ))
                    }
                }
            }
            for (group, rows) in groups {
                let chunk = encode(&rows)?;
                self.keyed.entry(group).or_default().push(chunk);
            }
        } else if !records.is_empty() {
            let rows: Vec<(&T, Option<i64>)> = records
                .iter()
                .enumerate()
                .map(|(i, r)| (r, batch.timestamp(i)))
                .collect();
            self.unkeyed.push(encode(&rows)?);
        }
        Ok(())
    }

    /// Forgets what was captured (the checkpoint was given up).
    pub fn clear(&mut self) {
        self.keyed.clear();
        self.unkeyed.clear();
        self.records = 0;
    }

    /// What was captured, as list state entries; the recorder is left empty.
    pub fn take(&mut self) -> Vec<ListStateEntry> {
        let input = self.input;
        let mut entries: Vec<ListStateEntry> = std::mem::take(&mut self.keyed)
            .into_iter()
            .map(|(group, items)| ListStateEntry {
                name: format!("{PREFIX}{input}.kg{group}"),
                mode: ListRedistribution::KeyGroup(group),
                items,
            })
            .collect();
        let unkeyed = std::mem::take(&mut self.unkeyed);
        if !unkeyed.is_empty() {
            entries.push(ListStateEntry {
                name: format!("{PREFIX}{input}"),
                mode: if self.broadcast {
                    ListRedistribution::Broadcast
                } else {
                    ListRedistribution::ModuloSubtask
                },
                items: unkeyed,
            });
        }
        self.records = 0;
        entries
    }
}

/// Which input a channel-state entry belongs to, and its key group if it has one.
fn parse(name: &str) -> Option<(u8, Option<u32>)> {
    let rest = name.strip_prefix(PREFIX)?;
    match rest.split_once(".kg") {
        Some((input, group)) => Some((input.parse().ok()?, Some(group.parse().ok()?))),
        None => Some((rest.parse().ok()?, None)),
    }
}

/// The in-flight records of input `input` in restored `entries`, as batches to replay
/// before any new input (keyed ones with their key groups).
pub fn restore_batches<T: Record>(
    entries: &[ListStateEntry],
    input: u8,
) -> Result<Vec<RecordBatch<T>>, TaskError> {
    let mut batches = Vec::new();
    for entry in entries {
        let Some((of, group)) = parse(&entry.name) else {
            return Err(TaskError::Internal(format!(
                "channel state `{}` has a name this version does not know",
                entry.name
            )));
        };
        if of != input {
            continue;
        }
        for item in &entry.items {
            let rows: Vec<(T, Option<i64>)> = postcard::from_bytes(item).map_err(|e| {
                TaskError::Internal(format!(
                    "channel state `{}` holds undecodable records: {e}",
                    entry.name
                ))
            })?;
            let mut batch = match group {
                Some(_) => RecordBatch::keyed_with_capacity(rows.len()),
                None => RecordBatch::with_capacity(rows.len()),
            };
            for (record, timestamp) in rows {
                match group {
                    Some(group) => batch.push_keyed(record, timestamp, group),
                    None => batch.push(record, timestamp),
                }
            }
            batches.push(batch);
        }
    }
    Ok(batches)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_records_are_stored_by_key_group_and_come_back_with_it() {
        let mut recorder = InFlightRecorder::new(1, false);
        let mut batch = RecordBatch::keyed_with_capacity(4);
        batch.push_keyed("a".to_string(), Some(5), 3);
        batch.push_keyed("b".to_string(), None, 7);
        batch.push_keyed("c".to_string(), Some(6), 3);
        recorder.record(&batch).unwrap();
        assert_eq!(recorder.records(), 3);
        let entries = recorder.take();
        assert_eq!(
            entries.iter().map(|e| e.mode).collect::<Vec<_>>(),
            vec![
                ListRedistribution::KeyGroup(3),
                ListRedistribution::KeyGroup(7)
            ]
        );
        assert!(entries.iter().all(|e| is_channel_state(&e.name)));
        let back: Vec<RecordBatch<String>> = restore_batches(&entries, 1).unwrap();
        let rows: Vec<(String, Option<i64>, Option<u32>)> = back
            .into_iter()
            .flat_map(|mut b| b.drain_keyed().collect::<Vec<_>>())
            .collect();
        assert_eq!(
            rows,
            vec![
                ("a".into(), Some(5), Some(3)),
                ("c".into(), Some(6), Some(3)),
                ("b".into(), None, Some(7)),
            ]
        );
        assert!(
            restore_batches::<String>(&entries, 0).unwrap().is_empty(),
            "other input"
        );
        assert_eq!(recorder.records(), 0);
    }

    #[test]
    fn unkeyed_records_keep_their_order_and_broadcast_inputs_say_so() {
        let mut recorder = InFlightRecorder::new(0, true);
        recorder.record(&RecordBatch::from(vec![1u64, 2])).unwrap();
        recorder.record(&RecordBatch::from(vec![3u64])).unwrap();
        let entries = recorder.take();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].mode, ListRedistribution::Broadcast);
        let back: Vec<RecordBatch<u64>> = restore_batches(&entries, 0).unwrap();
        let records: Vec<u64> = back
            .into_iter()
            .flat_map(RecordBatch::into_records)
            .collect();
        assert_eq!(records, vec![1, 2, 3]);
        let mut garbage = entries.clone();
        garbage[0].items[0] = vec![0xff; 3];
        assert!(restore_batches::<u64>(&garbage, 0).is_err());
    }
}
