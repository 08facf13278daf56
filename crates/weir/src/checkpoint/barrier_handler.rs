//! What a task with input channels does with the barriers it receives (Flink's
//! `CheckpointBarrierHandler`). Pure decision logic: the task applies the actions.
//!
//! Exactly-once: on the first barrier of checkpoint n the channel is held back; each further
//! channel is held back as its barrier n arrives; once every open channel has delivered it
//! (an ended channel counts as aligned), the task snapshots, forwards the barrier and
//! releases all channels. A newer barrier while aligning aborts the older checkpoint.
//! At-least-once: nothing is held back; the snapshot happens when the last barrier arrives.

use std::collections::BTreeSet;

use crate::checkpoint::config::CheckpointingMode;
use crate::runtime::stream_element::CheckpointBarrier;

/// What the task must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BarrierAction {
    /// Stop reading this channel until the alignment ends.
    Block(usize),
    /// Snapshot now, forward the barrier, release every channel.
    Snapshot(CheckpointBarrier),
    /// Give up checkpoint `id` (release every channel) and tell the coordinator.
    Abort(u64),
}

/// The alignment in progress.
#[derive(Debug, Clone)]
struct Alignment {
    barrier: CheckpointBarrier,
    received: BTreeSet<usize>,
}

/// Barrier alignment state of one task.
#[derive(Debug, Clone)]
pub struct BarrierHandler {
    mode: CheckpointingMode,
    pending: Option<Alignment>,
    /// Highest checkpoint id snapshotted or aborted; older barriers are ignored.
    latest_handled: u64,
}

impl BarrierHandler {
    /// A handler for `mode`.
    pub fn new(mode: CheckpointingMode) -> Self {
        Self {
            mode,
            pending: None,
            latest_handled: 0,
        }
    }

    /// The checkpoint being aligned, if any.
    pub fn pending_checkpoint(&self) -> Option<u64> {
        self.pending.as_ref().map(|a| a.barrier.checkpoint_id)
    }

    fn complete_if_aligned(&mut self, open: &[bool]) -> Vec<BarrierAction> {
        let aligned = match &self.pending {
            Some(a) => open
                .iter()
                .enumerate()
                .all(|(ch, is_open)| !is_open || a.received.contains(&ch)),
            None => false,
        };
        if !aligned {
            return Vec::new();
        }
        match self.pending.take() {
            Some(a) => {
                self.latest_handled = a.barrier.checkpoint_id;
                vec![BarrierAction::Snapshot(a.barrier)]
            }
            None => Vec::new(),
        }
    }

    /// Barrier `barrier` arrived on `channel`; `open[c]` tells whether channel c has not
    /// ended.
    pub fn on_barrier(
        &mut self,
        channel: usize,
        barrier: CheckpointBarrier,
        open: &[bool],
    ) -> Vec<BarrierAction> {
        let id = barrier.checkpoint_id;
        if id <= self.latest_handled {
            // A late barrier of a checkpoint already taken or given up.
            return Vec::new();
        }
        let mut actions = Vec::new();
        match &mut self.pending {
            Some(a) if a.barrier.checkpoint_id == id => {
                a.received.insert(channel);
            }
            Some(a) if a.barrier.checkpoint_id > id => return Vec::new(),
            other => {
                if let Some(old) = other.take() {
                    actions.push(BarrierAction::Abort(old.barrier.checkpoint_id));
                }
                *other = Some(Alignment {
                    barrier,
                    received: BTreeSet::from([channel]),
                });
            }
        }
        let done = self.complete_if_aligned(open);
        if done.is_empty() && self.mode == CheckpointingMode::ExactlyOnce {
            actions.push(BarrierAction::Block(channel));
        }
        actions.extend(done);
        actions
    }

    /// `channel` has ended; it counts as aligned from now on.
    pub fn on_channel_finished(&mut self, open: &[bool]) -> Vec<BarrierAction> {
        self.complete_if_aligned(open)
    }

    /// The coordinator aborted checkpoint `id`: stop aligning it.
    pub fn on_abort(&mut self, id: u64) -> bool {
        if self.pending_checkpoint() == Some(id) {
            self.pending = None;
            self.latest_handled = self.latest_handled.max(id);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::stream_element::SnapshotType;
    use BarrierAction::*;

    fn b(id: u64) -> CheckpointBarrier {
        CheckpointBarrier {
            checkpoint_id: id,
            timestamp_millis: 0,
            snapshot_type: SnapshotType::Checkpoint,
        }
    }

    #[test]
    fn exactly_once_blocks_until_all_channels_delivered() {
        let mut h = BarrierHandler::new(CheckpointingMode::ExactlyOnce);
        let open = [true, true, true];
        assert_eq!(h.on_barrier(0, b(1), &open), vec![Block(0)]);
        assert_eq!(h.on_barrier(2, b(1), &open), vec![Block(2)]);
        assert_eq!(h.on_barrier(1, b(1), &open), vec![Snapshot(b(1))]);
        assert_eq!(h.pending_checkpoint(), None);
    }

    #[test]
    fn single_channel_snapshots_at_once() {
        let mut h = BarrierHandler::new(CheckpointingMode::ExactlyOnce);
        assert_eq!(h.on_barrier(0, b(4), &[true]), vec![Snapshot(b(4))]);
        assert!(
            h.on_barrier(0, b(4), &[true]).is_empty(),
            "duplicate ignored"
        );
        assert!(h.on_barrier(0, b(3), &[true]).is_empty(), "older ignored");
    }

    #[test]
    fn ended_channels_count_as_aligned() {
        let mut h = BarrierHandler::new(CheckpointingMode::ExactlyOnce);
        assert_eq!(h.on_barrier(0, b(1), &[true, true]), vec![Block(0)]);
        assert_eq!(h.on_channel_finished(&[true, false]), vec![Snapshot(b(1))]);
        let mut h = BarrierHandler::new(CheckpointingMode::ExactlyOnce);
        assert_eq!(h.on_barrier(1, b(2), &[false, true]), vec![Snapshot(b(2))]);
    }

    #[test]
    fn newer_barrier_aborts_the_alignment_in_progress() {
        let mut h = BarrierHandler::new(CheckpointingMode::ExactlyOnce);
        let open = [true, true];
        assert_eq!(h.on_barrier(0, b(1), &open), vec![Block(0)]);
        assert_eq!(h.on_barrier(1, b(2), &open), vec![Abort(1), Block(1)]);
        assert_eq!(
            h.on_barrier(0, b(1), &open),
            vec![],
            "late barrier of aborted checkpoint"
        );
        assert_eq!(h.on_barrier(0, b(2), &open), vec![Snapshot(b(2))]);
    }

    #[test]
    fn coordinator_abort_releases_alignment() {
        let mut h = BarrierHandler::new(CheckpointingMode::ExactlyOnce);
        assert_eq!(h.on_barrier(0, b(1), &[true, true]), vec![Block(0)]);
        assert!(h.on_abort(1));
        assert!(h.on_barrier(1, b(1), &[true, true]).is_empty());
        assert!(!h.on_abort(7));
    }

    #[test]
    fn at_least_once_never_blocks() {
        let mut h = BarrierHandler::new(CheckpointingMode::AtLeastOnce);
        let open = [true, true];
        assert!(h.on_barrier(0, b(1), &open).is_empty());
        assert_eq!(h.on_barrier(1, b(1), &open), vec![Snapshot(b(1))]);
    }
}
