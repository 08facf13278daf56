//! What travels in a channel: batches of records and in-band events.

use serde::{Deserialize, Serialize};

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
}

/// An event that travels in-band, ordered with the records of its channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StreamEvent {
    /// A checkpoint barrier.
    Barrier(CheckpointBarrier),
    /// The producer has no more records for this channel.
    EndOfStream,
}

/// One message of a channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum StreamElement<T> {
    /// A batch of records, in order.
    Records(Vec<T>),
    /// An event, after every record sent before it.
    Event(StreamEvent),
}
