//! How an edge distributes records over the subtasks of its consumer.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The partitioner of an edge, as the graph layers see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PartitionerKind {
    /// Subtask i sends to subtask i; requires equal parallelism. The only chainable edge.
    Forward,
    /// Round-robin over all consumer subtasks.
    Rebalance,
    /// Every record to every consumer subtask.
    Broadcast,
    /// By key group of the record's key.
    Hash,
}

impl PartitionerKind {
    /// Whether each producer subtask connects to every consumer subtask.
    pub fn is_all_to_all(self) -> bool {
        !matches!(self, PartitionerKind::Forward)
    }
}

impl fmt::Display for PartitionerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PartitionerKind::Forward => "FORWARD",
            PartitionerKind::Rebalance => "REBALANCE",
            PartitionerKind::Broadcast => "BROADCAST",
            PartitionerKind::Hash => "HASH",
        })
    }
}
