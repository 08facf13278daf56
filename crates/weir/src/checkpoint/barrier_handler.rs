//! What a task with input channels does with the barriers it receives (Flink's
//! `CheckpointBarrierHandler`). Pure decision logic: the task applies the actions.
//!
//! Exactly-once, aligned: on the first barrier of checkpoint n the channel is held back;
//! each further channel is held back as its barrier n arrives; once every open channel has
//! delivered it (an ended channel counts as aligned), the task snapshots, forwards the
//! barrier and releases all channels. A newer barrier while aligning aborts the older
//! checkpoint.
//!
//! Exactly-once, unaligned (FLIP-76; only barriers marked `unaligned`): such a barrier comes
//! twice on each channel, ahead of the queue (priority) and in order. The task snapshots at
//! the first of either, forwards the barrier at once and holds nothing back; the records
//! that each other channel delivers until its in-order barrier are the checkpoint's channel
//! state. With an aligned-checkpoint timeout the task aligns first, and switches to an
//! unaligned snapshot when the alignment has lasted that long: channels whose barrier came
//! are aligned, the others' records until their barrier become channel state.
//!
//! At-least-once: nothing is held back; the snapshot happens when the last barrier arrives.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::checkpoint::config::CheckpointingMode;
use crate::runtime::stream_element::CheckpointBarrier;

/// What the task must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BarrierAction {
    /// Stop reading this channel until the alignment ends.
    Block(usize),
    /// Snapshot now, forward the barrier, release every channel.
    Snapshot(CheckpointBarrier),
    /// Snapshot now without waiting for the other channels: forward the barrier, release
    /// every channel, and capture as channel state what each channel of `capture` delivers
    /// until its own in-order barrier.
    SnapshotUnaligned {
        /// The checkpoint's barrier.
        barrier: CheckpointBarrier,
        /// The open channels whose in-order barrier has not come yet.
        capture: Vec<usize>,
    },
    /// Give up checkpoint `.0`, overtaken by a newer one (release every channel) and tell the
    /// coordinator.
    Abort(u64),
}

/// A checkpoint whose barriers have started to arrive.
#[derive(Debug, Clone)]
struct Pending {
    barrier: CheckpointBarrier,
    /// Channels whose in-order barrier arrived.
    received: BTreeSet<usize>,
    /// When the first barrier (of either kind) arrived.
    first_seen: Instant,
}

/// Barrier alignment state of one task.
#[derive(Debug, Clone)]
pub struct BarrierHandler {
    mode: CheckpointingMode,
    /// Checkpoints whose barriers have started to arrive. Exactly-once holds at most one;
    /// at-least-once tracks several.
    pending: BTreeMap<u64, Pending>,
    /// Highest checkpoint id snapshotted; older barriers are ignored.
    latest_handled: u64,
    /// Checkpoints aborted by the coordinator; their late barriers are ignored.
    aborted: BTreeSet<u64>,
    /// How long an unaligned-capable checkpoint aligns before it snapshots unaligned.
    aligned_timeout: Duration,
}

impl BarrierHandler {
    /// A handler for `mode`.
    pub fn new(mode: CheckpointingMode) -> Self {
        Self {
            mode,
            pending: BTreeMap::new(),
            latest_handled: 0,
            aborted: BTreeSet::new(),
            aligned_timeout: Duration::ZERO,
        }
    }

    /// Aligns unaligned-capable checkpoints for `timeout` before snapshotting unaligned
    /// (zero: unaligned at the first barrier).
    pub fn with_aligned_timeout(mut self, timeout: Duration) -> Self {
        self.aligned_timeout = timeout;
        self
    }

    /// The oldest checkpoint being aligned, if any.
    pub fn pending_checkpoint(&self) -> Option<u64> {
        self.pending.keys().next().copied()
    }

    fn may_be_unaligned(&self, barrier: &CheckpointBarrier) -> bool {
        barrier.unaligned && self.mode == CheckpointingMode::ExactlyOnce
    }

    /// Snapshots the newest aligned checkpoint, dropping (aborting) older pending ones.
    fn complete_aligned(&mut self, open: &[bool]) -> Vec<BarrierAction> {
        let aligned = self
            .pending
            .iter()
            .rev()
            .find(|(_, p)| {
                open.iter()
                    .enumerate()
                    .all(|(ch, is_open)| !is_open || p.received.contains(&ch))
            })
            .map(|(id, p)| (*id, p.barrier));
        let Some((id, barrier)) = aligned else {
            return Vec::new();
        };
        let mut actions = self.handled(id);
        actions.push(BarrierAction::Snapshot(barrier));
        actions
    }

    /// Checkpoint `id` is being snapshotted: older pending ones are aborted.
    fn handled(&mut self, id: u64) -> Vec<BarrierAction> {
        let older: Vec<u64> = self.pending.range(..id).map(|(k, _)| *k).collect();
        self.pending.retain(|k, _| *k > id);
        self.latest_handled = id;
        self.aborted.retain(|k| *k > id);
        older.into_iter().map(BarrierAction::Abort).collect()
    }

    /// Snapshots pending checkpoint `id` unaligned now.
    fn snapshot_unaligned(&mut self, id: u64, open: &[bool]) -> Vec<BarrierAction> {
        let Some(pending) = self.pending.get(&id) else {
            return Vec::new();
        };
        let barrier = pending.barrier;
        let capture = open
            .iter()
            .enumerate()
            .filter(|(ch, is_open)| **is_open && !pending.received.contains(ch))
            .map(|(ch, _)| ch)
            .collect();
        let mut actions = self.handled(id);
        actions.push(BarrierAction::SnapshotUnaligned { barrier, capture });
        actions
    }

    /// Registers a barrier of `id` (in order on `channel`, or ahead of the queue with
    /// `None`); returns the aborts of older checkpoints it overtakes, or `None` when the
    /// barrier is stale and must be ignored.
    fn register(
        &mut self,
        channel: Option<usize>,
        barrier: CheckpointBarrier,
        now: Instant,
    ) -> Option<Vec<BarrierAction>> {
        let id = barrier.checkpoint_id;
        if id <= self.latest_handled || self.aborted.contains(&id) {
            // A late barrier of a checkpoint already taken or given up.
            return None;
        }
        let mut actions = Vec::new();
        if self.mode == CheckpointingMode::ExactlyOnce {
            // Exactly-once checkpoints run one at a time: a newer barrier overtakes the
            // older one.
            if self
                .pending
                .keys()
                .next_back()
                .is_some_and(|newest| *newest > id)
            {
                return None;
            }
            let older: Vec<u64> = self.pending.range(..id).map(|(k, _)| *k).collect();
            for old in older {
                self.pending.remove(&old);
                actions.push(BarrierAction::Abort(old));
            }
        }
        let pending = self.pending.entry(id).or_insert_with(|| Pending {
            barrier,
            received: BTreeSet::new(),
            first_seen: now,
        });
        if let Some(channel) = channel {
            pending.received.insert(channel);
        }
        Some(actions)
    }

    /// Barrier `barrier` arrived in order on `channel` at `now`; `open[c]` tells whether
    /// channel c has not ended.
    pub fn on_barrier(
        &mut self,
        channel: usize,
        barrier: CheckpointBarrier,
        open: &[bool],
        now: Instant,
    ) -> Vec<BarrierAction> {
        let Some(mut actions) = self.register(Some(channel), barrier, now) else {
            return Vec::new();
        };
        if self.may_be_unaligned(&barrier) && self.aligned_timeout.is_zero() {
            actions.extend(self.snapshot_unaligned(barrier.checkpoint_id, open));
            return actions;
        }
        let done = self.complete_aligned(open);
        if done.is_empty() && self.mode == CheckpointingMode::ExactlyOnce {
            actions.push(BarrierAction::Block(channel));
        }
        actions.extend(done);
        actions
    }

    /// Barrier `barrier` overtook the queue of a channel at `now` (an unaligned
    /// checkpoint's): snapshot at once, or start the alignment timeout.
    pub fn on_priority_barrier(
        &mut self,
        barrier: CheckpointBarrier,
        open: &[bool],
        now: Instant,
    ) -> Vec<BarrierAction> {
        if !self.may_be_unaligned(&barrier) {
            return Vec::new();
        }
        let Some(mut actions) = self.register(None, barrier, now) else {
            return Vec::new();
        };
        if self.aligned_timeout.is_zero() {
            actions.extend(self.snapshot_unaligned(barrier.checkpoint_id, open));
        } else {
            actions.extend(self.on_timer(open, now));
        }
        actions
    }

    /// When the alignment in progress times out into an unaligned snapshot, if it can.
    pub fn alignment_deadline(&self) -> Option<Instant> {
        if self.aligned_timeout.is_zero() {
            return None;
        }
        self.pending
            .values()
            .filter(|p| self.may_be_unaligned(&p.barrier))
            .map(|p| p.first_seen + self.aligned_timeout)
            .min()
    }

    /// Time has passed: an alignment that has lasted the aligned-checkpoint timeout
    /// switches to an unaligned snapshot.
    pub fn on_timer(&mut self, open: &[bool], now: Instant) -> Vec<BarrierAction> {
        let due = self
            .pending
            .iter()
            .filter(|(_, p)| self.may_be_unaligned(&p.barrier))
            .find(|(_, p)| now >= p.first_seen + self.aligned_timeout)
            .map(|(id, _)| *id);
        match due {
            Some(id) if !self.aligned_timeout.is_zero() => self.snapshot_unaligned(id, open),
            _ => Vec::new(),
        }
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

    fn t() -> Instant {
        Instant::now()
    }

    fn u(id: u64) -> CheckpointBarrier {
        CheckpointBarrier {
            unaligned: true,
            ..b(id)
        }
    }

    #[test]
    fn an_unaligned_barrier_snapshots_at_once_capturing_the_channels_still_to_deliver_it() {
        let mut h = BarrierHandler::new(CheckpointingMode::ExactlyOnce);
        let open = [true, true, false];
        // Ahead of the queue: every open channel's records until its barrier are in flight.
        assert_eq!(
            h.on_priority_barrier(u(1), &open, t()),
            vec![SnapshotUnaligned {
                barrier: u(1),
                capture: vec![0, 1]
            }]
        );
        // The in-order copies that follow change nothing.
        assert!(h.on_barrier(0, u(1), &open, t()).is_empty());
        assert!(h.on_priority_barrier(u(1), &open, t()).is_empty());
        // In order first: that channel has nothing in flight.
        assert_eq!(
            h.on_barrier(1, u(2), &open, t()),
            vec![SnapshotUnaligned {
                barrier: u(2),
                capture: vec![0]
            }]
        );
        assert_eq!(h.pending_checkpoint(), None);
    }

    #[test]
    fn aligned_barriers_ignore_the_priority_lane_and_at_least_once_never_goes_unaligned() {
        let mut h = BarrierHandler::new(CheckpointingMode::ExactlyOnce);
        assert!(h.on_priority_barrier(b(1), &[true, true], t()).is_empty());
        assert_eq!(h.on_barrier(0, b(1), &[true, true], t()), vec![Block(0)]);
        let mut h = BarrierHandler::new(CheckpointingMode::AtLeastOnce);
        assert!(h.on_priority_barrier(u(1), &[true, true], t()).is_empty());
        assert!(h.on_barrier(0, u(1), &[true, true], t()).is_empty());
        assert_eq!(
            h.on_barrier(1, u(1), &[true, true], t()),
            vec![Snapshot(u(1))]
        );
    }

    #[test]
    fn an_alignment_that_lasts_the_timeout_switches_to_unaligned() {
        let start = Instant::now();
        let timeout = Duration::from_millis(100);
        let mut h =
            BarrierHandler::new(CheckpointingMode::ExactlyOnce).with_aligned_timeout(timeout);
        let open = [true, true, true];
        assert!(h.on_priority_barrier(u(1), &open, start).is_empty());
        assert_eq!(h.alignment_deadline(), Some(start + timeout));
        assert_eq!(h.on_barrier(0, u(1), &open, start), vec![Block(0)]);
        assert!(h.on_timer(&open, start + timeout / 2).is_empty());
        assert_eq!(
            h.on_timer(&open, start + timeout),
            vec![SnapshotUnaligned {
                barrier: u(1),
                capture: vec![1, 2]
            }]
        );
        assert_eq!(h.alignment_deadline(), None);
        // Aligned in time: an aligned snapshot, no channel state.
        let later = start + timeout * 3;
        assert!(h.on_priority_barrier(u(2), &open, later).is_empty());
        for ch in 0..2 {
            assert_eq!(h.on_barrier(ch, u(2), &open, later), vec![Block(ch)]);
        }
        assert_eq!(h.on_barrier(2, u(2), &open, later), vec![Snapshot(u(2))]);
        assert!(h.on_timer(&open, later + timeout).is_empty());
    }

    #[test]
    fn a_newer_unaligned_barrier_aborts_the_alignment_in_progress() {
        let start = Instant::now();
        let mut h = BarrierHandler::new(CheckpointingMode::ExactlyOnce)
            .with_aligned_timeout(Duration::from_secs(1));
        let open = [true, true];
        assert_eq!(h.on_barrier(0, u(1), &open, start), vec![Block(0)]);
        assert_eq!(h.on_priority_barrier(u(2), &open, start), vec![Abort(1)]);
        assert!(h.on_barrier(1, u(1), &open, start).is_empty(), "stale");
    }

    fn b(id: u64) -> CheckpointBarrier {
        CheckpointBarrier {
            checkpoint_id: id,
            timestamp_millis: 0,
            snapshot_type: SnapshotType::Checkpoint,
            is_final: false,
            unaligned: false,
            stop: None,
        }
    }

    #[test]
    fn exactly_once_blocks_until_all_channels_delivered() {
        let mut h = BarrierHandler::new(CheckpointingMode::ExactlyOnce);
        let open = [true, true, true];
        assert_eq!(h.on_barrier(0, b(1), &open, t()), vec![Block(0)]);
        assert_eq!(h.on_barrier(2, b(1), &open, t()), vec![Block(2)]);
        assert_eq!(h.on_barrier(1, b(1), &open, t()), vec![Snapshot(b(1))]);
        assert_eq!(h.pending_checkpoint(), None);
    }

    #[test]
    fn single_channel_snapshots_at_once() {
        let mut h = BarrierHandler::new(CheckpointingMode::ExactlyOnce);
        assert_eq!(h.on_barrier(0, b(4), &[true], t()), vec![Snapshot(b(4))]);
        assert!(
            h.on_barrier(0, b(4), &[true], t()).is_empty(),
            "duplicate ignored"
        );
        assert!(
            h.on_barrier(0, b(3), &[true], t()).is_empty(),
            "older ignored"
        );
    }

    #[test]
    fn ended_channels_count_as_aligned() {
        let mut h = BarrierHandler::new(CheckpointingMode::ExactlyOnce);
        assert_eq!(h.on_barrier(0, b(1), &[true, true], t()), vec![Block(0)]);
        assert_eq!(h.on_channel_finished(&[true, false]), vec![Snapshot(b(1))]);
        let mut h = BarrierHandler::new(CheckpointingMode::ExactlyOnce);
        assert_eq!(
            h.on_barrier(1, b(2), &[false, true], t()),
            vec![Snapshot(b(2))]
        );
    }

    #[test]
    fn newer_barrier_aborts_the_alignment_in_progress() {
        let mut h = BarrierHandler::new(CheckpointingMode::ExactlyOnce);
        let open = [true, true];
        assert_eq!(h.on_barrier(0, b(1), &open, t()), vec![Block(0)]);
        assert_eq!(h.on_barrier(1, b(2), &open, t()), vec![Abort(1), Block(1)]);
        assert_eq!(
            h.on_barrier(0, b(1), &open, t()),
            vec![],
            "late barrier of aborted checkpoint"
        );
        assert_eq!(h.on_barrier(0, b(2), &open, t()), vec![Snapshot(b(2))]);
    }

    #[test]
    fn coordinator_abort_releases_alignment() {
        let mut h = BarrierHandler::new(CheckpointingMode::ExactlyOnce);
        assert_eq!(h.on_barrier(0, b(1), &[true, true], t()), vec![Block(0)]);
        assert!(h.on_abort(1));
        assert!(h.on_barrier(1, b(1), &[true, true], t()).is_empty());
        assert!(!h.on_abort(7));
    }

    #[test]
    fn abort_before_any_barrier_ignores_the_late_barriers() {
        let mut h = BarrierHandler::new(CheckpointingMode::ExactlyOnce);
        assert!(!h.on_abort(3));
        assert!(
            h.on_barrier(0, b(3), &[true, true], t()).is_empty(),
            "no channel held for an aborted checkpoint"
        );
        assert_eq!(h.on_barrier(0, b(4), &[true, true], t()), vec![Block(0)]);
    }

    #[test]
    fn at_least_once_tracks_overlapping_checkpoints() {
        let mut h = BarrierHandler::new(CheckpointingMode::AtLeastOnce);
        let open = [true, true];
        assert!(h.on_barrier(0, b(1), &open, t()).is_empty());
        assert!(h.on_barrier(0, b(2), &open, t()).is_empty());
        assert_eq!(h.on_barrier(1, b(1), &open, t()), vec![Snapshot(b(1))]);
        assert_eq!(h.on_barrier(1, b(2), &open, t()), vec![Snapshot(b(2))]);
    }

    #[test]
    fn at_least_once_never_blocks() {
        let mut h = BarrierHandler::new(CheckpointingMode::AtLeastOnce);
        let open = [true, true];
        assert!(h.on_barrier(0, b(1), &open, t()).is_empty());
        assert_eq!(h.on_barrier(1, b(1), &open, t()), vec![Snapshot(b(1))]);
    }
}
