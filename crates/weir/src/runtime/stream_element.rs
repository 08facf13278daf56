//! What travels in a channel: batches of records and in-band events.

use serde::{Deserialize, Serialize};

use crate::runtime::batch::RecordBatch;
use crate::time::{Watermark, WatermarkStatus};

/// The kind of snapshot a barrier asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapshotType {
    /// A periodic checkpoint, owned by the system.
    Checkpoint,
    /// A savepoint, owned by the user.
    Savepoint,
}

/// A checkpoint barrier: everything before it in a channel belongs to checkpoint
/// `checkpoint_id`, everything after it to later ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointBarrier {
    /// The checkpoint's id; ids only grow.
    pub checkpoint_id: u64,
    /// When the coordinator triggered it, in milliseconds since the Unix epoch.
    pub timestamp_millis: u64,
    /// Checkpoint or savepoint.
    pub snapshot_type: SnapshotType,
    /// The job's final checkpoint: every source has read all its input and ends right after
    /// it; tasks finish once it completes (Flink's FLIP-147).
    pub is_final: bool,
    /// Set on the barrier of a stop-with-savepoint's savepoint: nothing follows it in any
    /// channel, and every task ends once the savepoint completes (or carries on if it fails,
    /// without drain).
    pub stop: Option<StopMode>,
    /// The checkpoint may be taken unaligned (FLIP-76): senders send the barrier ahead of
    /// their queued output as well as in order, and a receiver snapshots at the first one it
    /// sees (or when its alignment times out), storing the records that were in flight
    /// before each channel's barrier as channel state. Only periodic checkpoints are.
    pub unaligned: bool,
}

impl CheckpointBarrier {
    /// Whether operators end their input at this barrier, before their snapshot.
    pub fn drains(&self) -> bool {
        self.stop == Some(StopMode::Drain)
    }
}

/// How a stop-with-savepoint ends the job (Flink's `StopMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopMode {
    /// Sources stop at the savepoint's barrier and nothing after it is processed; operators
    /// keep their state as it is (no end of input), so the job continues from the savepoint
    /// as if it had never stopped.
    NoDrain,
    /// Sources end their input at the savepoint's barrier and operators process the end of
    /// input (`end_input`) before their snapshot, as if a bounded input had ended: for jobs
    /// that are not meant to be resumed.
    Drain,
}

/// An event that travels in-band, ordered with the records of its channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StreamEvent {
    /// A checkpoint barrier.
    Barrier(CheckpointBarrier),
    /// The producer has no more records for this channel (Flink's `EndOfData`); barriers
    /// may still follow, the final checkpoint's among them. Operators end their input when
    /// every channel has sent it, before that final barrier, so that what they emit then is
    /// in the final checkpoint and committed with it (FLIP-147).
    EndOfData,
    /// The producer sends nothing more on this channel (Flink's `EndOfPartition`).
    EndOfStream,
    /// No record with a timestamp at or below this follows on the channel.
    Watermark(Watermark),
    /// The channel became idle or active again: an idle channel is left out of the minimum
    /// watermark over the channels.
    WatermarkStatus(WatermarkStatus),
}

/// Why an operator's input ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputEnd {
    /// Every input channel sent its end of data (a bounded input was read to its end).
    EndOfData,
    /// A draining stop-with-savepoint's barrier: the operators end their input before their
    /// snapshot, as if a bounded input had ended. Sinks do not flush as at the end of data:
    /// what they hold is committed with the savepoint.
    Drain,
}

/// One message of a channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum StreamElement<T> {
    /// A batch of records, in order, with their timestamps.
    Records(RecordBatch<T>),
    /// An event, after every record sent before it.
    Event(StreamEvent),
}
