//! What a task with input channels does with the barriers it receives (Flink's
//! `CheckpointBarrierHandler`). Pure decision logic: the task applies the actions.
//!
//! Exactly-once: on the first barrier of checkpoint n the channel is held back; each further
//! channel is held back as its barrier n arrives; once every open channel has delivered it
//! (an ended channel counts as aligned), the task snapshots, forwards the barrier and
//! releases all channels. A newer barrier while aligning aborts the older checkpoint.
//! At-least-once: nothing is held back; the snapshot happens when the last barrier arrives.

use std::collections::{BTreeMap, BTreeSet};

use crate::checkpoint::config::CheckpointingMode;
use crate::runtime::stream_element::CheckpointBarrier;

/// What the task must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BarrierAction {
    /// Stop reading this channel until the alignment ends.
    Block(usize),
    /// Snapshot now, forward the barrier, release every channel.
    Snapshot(CheckpointBarrier),
    /// Give up checkpoint `.0`, overtaken by a newer one (release every channel) and tell the
    /// coordinator.
    Abort(u64),
}

/// Barrier alignment state of one task.
#[derive(Debug, Clone)]
pub struct BarrierHandler {
    mode: CheckpointingMode,
    /// Checkpoints whose barriers have started to arrive: the barrier and the channels that
    /// delivered it. Exactly-once holds at most one; at-least-once tracks several.
    pending: BTreeMap<u64, (CheckpointBarrier, BTreeSet<usize>)>,
    /// Highest checkpoint id snapshotted; older barriers are ignored.
    latest_handled: u64,
    /// Checkpoints aborted by the coordinator; their late barriers are ignored.
    aborted: BTreeSet<u64>,
}

impl BarrierHandler {
    /// A handler for `mode`.
    pub fn new(mode: CheckpointingMode) -> Self {
        Self {
            mode,
            pending: BTreeMap::new(),
            latest_handled: 0,
            aborted: BTreeSet::new(),
        }
    }

    /// The oldest checkpoint being aligned, if any.
    pub fn pending_checkpoint(&self) -> Option<u64> {
        self.pending.keys().next().copied()
    }

    /// Snapshots the newest aligned checkpoint, dropping (aborting) older pending ones.
    fn complete_aligned(&mut self, open: &[bool]) -> Vec<BarrierAction> {
        let aligned = self
            .pending
            .iter()
            .rev()
            .find(|(_, (_, received))| {
                open.iter()
                    .enumerate()
                    .all(|(ch, is_open)| !is_open || received.contains(&ch))
            })
            .map(|(id, (barrier, _))| (*id, *barrier));
        let Some((id, barrier)) = aligned else {
            return Vec::new();
        };
        let older: Vec<u64> = self.pending.range(..id).map(|(k, _)| *k).collect();
        let mut actions: Vec<BarrierAction> = older.into_iter().map(BarrierAction::Abort).collect();
        self.pending.retain(|k, _| *k > id);
        self.latest_handled = id;
        self.aborted.retain(|k| *k > id);
        actions.push(BarrierAction::Snapshot(barrier));
        actions
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
        if id <= self.latest_handled || self.aborted.contains(&id) {
            // A late barrier of a checkpoint already taken or given up.
            return Vec::new();
        }
        let mut actions = Vec::new();
        if self.mode == CheckpointingMode::ExactlyOnce {
            // Aligned checkpoints run one at a time: a newer barrier overtakes the older one.
            if self
                .pending
                .keys()
                .next_back()
                .is_some_and(|newest| *newest > id)
            {
                return Vec::new();
            }
            let older: Vec<u64> = self.pending.range(..id).map(|(k, _)| *k).collect();
            for old in older {
                self.pending.remove(&old);
                actions.push(BarrierAction::Abort(old));
            }
        }
        self.pending
            .entry(id)
            .or_insert_with(|| (barrier, BTreeSet::new()))
            .1
            .insert(channel);
        let done = self.complete_aligned(open);
        if done.is_empty() && self.mode == CheckpointingMode::ExactlyOnce {
            actions.push(BarrierAction::Block(channel));
        }
        actions.extend(done);
        actions
    }

    /// A channel has ended; it counts as aligned from now on.
    pub fn on_channel_finished(&mut self, open: &[bool]) -> Vec<BarrierAction> {
        self.complete_aligned(open)
    }

    /// The coordinator aborted checkpoint `id`: stop aligning it and ignore its late
    /// barriers. Returns whether it was being aligned (so held-back channels must be released).
    pub fn on_abort(&mut self, id: u64) -> bool {
        if id > self.latest_handled {
            self.aborted.insert(id);
        }
        self.pending.remove(&id).is_some()
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
            is_final: false,
            stop: None,
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
    fn abort_before_any_barrier_ignores_the_late_barriers() {
        let mut h = BarrierHandler::new(CheckpointingMode::ExactlyOnce);
        assert!(!h.on_abort(3));
        assert!(
            h.on_barrier(0, b(3), &[true, true]).is_empty(),
            "no channel held for an aborted checkpoint"
        );
        assert_eq!(h.on_barrier(0, b(4), &[true, true]), vec![Block(0)]);
    }

    #[test]
    fn at_least_once_tracks_overlapping_checkpoints() {
        let mut h = BarrierHandler::new(CheckpointingMode::AtLeastOnce);
        let open = [true, true];
        assert!(h.on_barrier(0, b(1), &open).is_empty());
        assert!(h.on_barrier(0, b(2), &open).is_empty());
        assert_eq!(h.on_barrier(1, b(1), &open), vec![Snapshot(b(1))]);
        assert_eq!(h.on_barrier(1, b(2), &open), vec![Snapshot(b(2))]);
    }

    #[test]
    fn at_least_once_never_blocks() {
        let mut h = BarrierHandler::new(CheckpointingMode::AtLeastOnce);
        let open = [true, true];
        assert!(h.on_barrier(0, b(1), &open).is_empty());
        assert_eq!(h.on_barrier(1, b(1), &open), vec![Snapshot(b(1))]);
    }
}
