//! The `CheckpointCoordinator`'s decisions, free of I/O: when to trigger, which
//! acknowledgements are still awaited, when a checkpoint is complete, expired, subsumed or
//! aborted, and when too many failures must fail the job. The job manager performs the I/O
//! (barrier injection, metadata write, notifications) that these decisions call for.
//!
//! Invariants kept here:
//! - ids only grow (the first id is given, so ids continue after a restore);
//! - a checkpoint completes only when every participant has acknowledged it;
//! - completing checkpoint n subsumes (aborts) every pending checkpoint older than n;
//! - at most `max_concurrent` checkpoints are pending, and a new one starts no earlier than
//!   `min_pause` after the previous completion.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::checkpoint::config::CheckpointConfig;
use crate::checkpoint::metadata::{CheckpointMetadata, OperatorState, OperatorSubtaskState};
use crate::checkpoint::stats::{
    CheckpointHistory, CheckpointStats, CheckpointStatus, SubtaskCheckpointStats,
};
use crate::graph::execution_graph::SubtaskRef;
use crate::graph::ids::NodeId;
use crate::runtime::stream_element::{CheckpointBarrier, SnapshotType, StopMode};

/// Who must acknowledge a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Participant {
    /// A subtask.
    Task(SubtaskRef),
    /// A source's split enumerator.
    Coordinator(NodeId),
}

/// What a participant hands in.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Acknowledgement {
    /// A subtask's operator states and timings.
    Task {
        /// State per operator of the chain.
        states: Vec<(NodeId, OperatorSubtaskState)>,
        /// Timings.
        stats: SubtaskCheckpointStats,
    },
    /// A source enumerator's serialized state.
    Coordinator {
        /// The state.
        state: Vec<u8>,
    },
}

impl Acknowledgement {
    /// The shared state files this acknowledgement of checkpoint `id` uploaded for it.
    pub fn shared_uploads(&self, id: u64) -> Vec<String> {
        match self {
            Acknowledgement::Task { states, .. } => states
                .iter()
                .filter_map(|(_, s)| s.keyed.as_ref())
                .flat_map(|k| k.shared_files())
                .filter(|f| f.uploaded_in == id)
                .map(|f| f.stored_name.clone())
                .collect(),
            Acknowledgement::Coordinator { .. } => Vec::new(),
        }
    }
}

/// A checkpoint in flight.
#[derive(Debug, Clone)]
pub struct PendingCheckpoint {
    /// The barrier that was injected.
    pub barrier: CheckpointBarrier,
    /// Where its files go.
    pub location: String,
    /// When it was triggered.
    pub triggered_at: Instant,
    awaiting: BTreeSet<Participant>,
    acks: BTreeMap<Participant, Acknowledgement>,
}

impl PendingCheckpoint {
    /// Checkpoint id.
    pub fn id(&self) -> u64 {
        self.barrier.checkpoint_id
    }

    /// Participants that have not acknowledged yet.
    pub fn awaiting(&self) -> &BTreeSet<Participant> {
        &self.awaiting
    }

    /// The shared state files the acknowledgements received so far uploaded for this
    /// checkpoint: to delete if it does not complete.
    pub fn shared_uploads(&self) -> Vec<String> {
        self.acks
            .values()
            .flat_map(|ack| ack.shared_uploads(self.id()))
            .collect()
    }

    /// Assembles the metadata. `operator(node)` gives an operator's uid, name,
    /// parallelism and max parallelism.
    pub fn to_metadata(
        &self,
        job_name: &str,
        epoch: u64,
        operator: impl Fn(NodeId) -> (String, String, u32, u32),
    ) -> CheckpointMetadata {
        fn entry<'a>(
            by_node: &'a mut BTreeMap<NodeId, OperatorState>,
            node: NodeId,
            operator: &impl Fn(NodeId) -> (String, String, u32, u32),
        ) -> &'a mut OperatorState {
            by_node.entry(node).or_insert_with(|| {
                let (uid, name, parallelism, max_parallelism) = operator(node);
                OperatorState {
                    uid,
                    name,
                    parallelism,
                    max_parallelism,
                    subtasks: Vec::new(),
                    coordinator: None,
                }
            })
        }
        let mut by_node: BTreeMap<NodeId, OperatorState> = BTreeMap::new();
        for (who, ack) in &self.acks {
            match (who, ack) {
                (Participant::Task(_), Acknowledgement::Task { states, .. }) => {
                    for (node, state) in states {
                        entry(&mut by_node, *node, &operator)
                            .subtasks
                            .push(state.clone());
                    }
                }
                (Participant::Coordinator(node), Acknowledgement::Coordinator { state }) => {
                    entry(&mut by_node, *node, &operator).coordinator = Some(state.clone());
                }
                _ => {}
            }
        }
        let mut operators: Vec<OperatorState> = by_node.into_values().collect();
        for op in &mut operators {
            op.subtasks.sort_by_key(|s| s.subtask);
        }
        CheckpointMetadata {
            checkpoint_id: self.id(),
            kind: self.barrier.snapshot_type,
            job_name: job_name.to_string(),
            epoch,
            timestamp_millis: self.barrier.timestamp_millis,
            operators,
        }
    }

    fn stats(
        &self,
        status: CheckpointStatus,
        now: Instant,
        failure: Option<String>,
    ) -> CheckpointStats {
        let mut subtasks = Vec::new();
        let (mut state_size, mut checkpointed_size) = (0, 0);
        for ack in self.acks.values() {
            match ack {
                Acknowledgement::Task { states, stats } => {
                    state_size += states.iter().map(|(_, s)| s.size()).sum::<u64>();
                    checkpointed_size += states
                        .iter()
                        .map(|(_, s)| s.uploaded_size(self.id()))
                        .sum::<u64>();
                    subtasks.push(stats.clone());
                }
                Acknowledgement::Coordinator { state } => {
                    state_size += state.len() as u64;
                    checkpointed_size += state.len() as u64;
                }
            }
        }
        CheckpointStats {
            id: self.id(),
            kind: self.barrier.snapshot_type,
            status,
            trigger_timestamp_millis: self.barrier.timestamp_millis,
            duration: Some(now.saturating_duration_since(self.triggered_at)),
            state_size,
            checkpointed_size,
            subtasks,
            failure,
            location: Some(self.location.clone()),
        }
    }
}

/// Result of an acknowledgement.
#[derive(Debug)]
pub enum AckOutcome {
    /// The checkpoint is unknown (already aborted or completed): discard the ack.
    Unknown,
    /// More acknowledgements are awaited.
    Pending,
    /// Every participant has acknowledged; the checkpoint is handed over for finalization.
    AllAcknowledged(Box<PendingCheckpoint>),
    /// Every participant has acknowledged, but a newer restore point (`by`) was handed over
    /// for finalization first (its acknowledgements came in sooner): this one is subsumed
    /// and must not complete, or the restore point recorded last would be older than output
    /// the newer one already committed.
    Subsumed {
        /// The checkpoint that ends here.
        pending: Box<PendingCheckpoint>,
        /// The newer restore point.
        by: u64,
    },
}

/// Checkpoint decisions of one job.
#[derive(Debug)]
pub struct CheckpointCoordinator {
    config: CheckpointConfig,
    next_id: u64,
    pending: BTreeMap<u64, PendingCheckpoint>,
    started_at: Instant,
    last_trigger: Option<Instant>,
    last_completion: Option<Instant>,
    consecutive_failures: u32,
    history: CheckpointHistory,
    /// The newest restore point handed over for finalization (0: none).
    newest_restore_point: u64,
}

impl CheckpointCoordinator {
    /// A coordinator whose first checkpoint gets id `first_id`.
    pub fn new(config: CheckpointConfig, first_id: u64, now: Instant) -> Self {
        Self {
            config,
            next_id: first_id.max(1),
            pending: BTreeMap::new(),
            started_at: now,
            last_trigger: None,
            last_completion: None,
            consecutive_failures: 0,
            history: CheckpointHistory::new(10),
            newest_restore_point: 0,
        }
    }

    /// Restore point `id` (a checkpoint, or a stop-with-savepoint's savepoint) was handed
    /// over for finalization: a checkpoint older than it that is fully acknowledged later is
    /// subsumed instead of completing after it.
    pub fn finalizing_restore_point(&mut self, id: u64) {
        self.newest_restore_point = self.newest_restore_point.max(id);
    }

    /// The id the next checkpoint will get.
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// Checkpoints in flight.
    pub fn pending_ids(&self) -> Vec<u64> {
        self.pending.keys().copied().collect()
    }

    /// The statistics history.
    pub fn history(&self) -> &CheckpointHistory {
        &self.history
    }

    /// Replaces the history (it outlives restarts of the job).
    pub fn set_history(&mut self, history: CheckpointHistory) {
        self.history = history;
    }

    /// Restarts timing after a job restart: the next periodic checkpoint is an interval away.
    pub fn reset_timer(&mut self, now: Instant) {
        self.started_at = now;
        self.last_trigger = None;
    }

    /// When the next periodic checkpoint is due (`None`: periodic checkpoints are off).
    pub fn next_due(&self) -> Option<Instant> {
        let interval = self.config.interval?;
        let from_trigger = self.last_trigger.unwrap_or(self.started_at) + interval;
        let from_completion = self
            .last_completion
            .map_or(from_trigger, |c| c + self.config.min_pause);
        Some(from_trigger.max(from_completion))
    }

    /// Whether another checkpoint may start now that fewer than `max_concurrent` are pending.
    pub fn has_capacity(&self) -> bool {
        self.pending.len() < self.config.max_concurrent as usize
    }

    /// Whether a periodic checkpoint should be triggered at `now`.
    pub fn should_trigger(&self, now: Instant) -> bool {
        self.has_capacity() && self.next_due().is_some_and(|due| now >= due)
    }

    /// Starts checkpoint (or savepoint) with the next id, awaiting `participants`.
    pub fn start(
        &mut self,
        now: Instant,
        timestamp_millis: u64,
        kind: SnapshotType,
        participants: BTreeSet<Participant>,
        location: String,
    ) -> CheckpointBarrier {
        let barrier = CheckpointBarrier {
            checkpoint_id: self.next_id,
            timestamp_millis,
            snapshot_type: kind,
            is_final: false,
            stop: None,
            unaligned: kind == SnapshotType::Checkpoint && self.config.unaligned,
        };
        self.next_id += 1;
        if kind == SnapshotType::Checkpoint {
            self.last_trigger = Some(now);
        }
        self.pending.insert(
            barrier.checkpoint_id,
            PendingCheckpoint {
                barrier,
                location,
                triggered_at: now,
                awaiting: participants,
                acks: BTreeMap::new(),
            },
        );
        barrier
    }

    /// Marks pending checkpoint `id` as the job's final one.
    pub fn mark_final(&mut self, id: u64) -> Option<CheckpointBarrier> {
        let pending = self.pending.get_mut(&id)?;
        pending.barrier.is_final = true;
        // Nothing is in flight after every input ended; aligned keeps the ending simple.
        pending.barrier.unaligned = false;
        Some(pending.barrier)
    }

    /// Marks pending savepoint `id` as a stop-with-savepoint's: its barrier stops the job.
    pub fn mark_stop(&mut self, id: u64, mode: StopMode) -> Option<CheckpointBarrier> {
        let pending = self.pending.get_mut(&id)?;
        pending.barrier.stop = Some(mode);
        Some(pending.barrier)
    }

    /// Takes an acknowledgement.
    pub fn acknowledge(&mut self, id: u64, who: Participant, ack: Acknowledgement) -> AckOutcome {
        let Some(pending) = self.pending.get_mut(&id) else {
            return AckOutcome::Unknown;
        };
        if !pending.awaiting.remove(&who) {
            return AckOutcome::Pending;
        }
        pending.acks.insert(who, ack);
        if !pending.awaiting.is_empty() {
            return AckOutcome::Pending;
        }
        match self.pending.remove(&id) {
            Some(p)
                if p.barrier.snapshot_type == SnapshotType::Checkpoint
                    && self.newest_restore_point > id =>
            {
                let by = self.newest_restore_point;
                self.history.record(p.stats(
                    CheckpointStatus::Failed,
                    p.triggered_at,
                    Some(format!(
                        "subsumed by checkpoint {by}, acknowledged before it"
                    )),
                ));
                AckOutcome::Subsumed {
                    pending: Box::new(p),
                    by,
                }
            }
            Some(p) => AckOutcome::AllAcknowledged(Box::new(p)),
            None => AckOutcome::Unknown,
        }
    }

    /// Checkpoints whose timeout has passed at `now`.
    pub fn expired(&self, now: Instant) -> Vec<u64> {
        self.pending
            .values()
            .filter(|p| now.saturating_duration_since(p.triggered_at) >= self.config.timeout)
            .map(PendingCheckpoint::id)
            .collect()
    }

    /// The earliest time a pending checkpoint expires.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.pending
            .values()
            .map(|p| p.triggered_at + self.config.timeout)
            .min()
    }

    /// Aborts checkpoint `id` (expired, declined, or failed to finalize). Returns it if it
    /// was pending. A failed checkpoint (not a savepoint) counts towards the tolerable
    /// failures when `count_as_failure` (not when a newer checkpoint overtook it).
    pub fn abort(
        &mut self,
        id: u64,
        reason: &str,
        count_as_failure: bool,
        now: Instant,
    ) -> Option<PendingCheckpoint> {
        let pending = self.pending.remove(&id)?;
        if count_as_failure && pending.barrier.snapshot_type == SnapshotType::Checkpoint {
            self.consecutive_failures += 1;
        }
        self.history
            .record(pending.stats(CheckpointStatus::Failed, now, Some(reason.to_string())));
        Some(pending)
    }

    /// Aborts every pending checkpoint (the job is failing or restarting); not counted as
    /// checkpoint failures. Returns their ids.
    pub fn abort_all(&mut self, reason: &str, now: Instant) -> Vec<PendingCheckpoint> {
        let all: Vec<PendingCheckpoint> = std::mem::take(&mut self.pending).into_values().collect();
        for p in &all {
            self.history
                .record(p.stats(CheckpointStatus::Failed, now, Some(reason.to_string())));
        }
        all
    }

    /// Aborts, without counting them as failures, the pending checkpoints that still await
    /// `who` (it finished and will never acknowledge).
    pub fn abort_awaiting(
        &mut self,
        who: Participant,
        reason: &str,
        now: Instant,
    ) -> Vec<PendingCheckpoint> {
        let ids: Vec<u64> = self
            .pending
            .values()
            .filter(|p| p.awaiting.contains(&who))
            .map(PendingCheckpoint::id)
            .collect();
        ids.into_iter()
            .filter_map(|id| {
                let p = self.pending.remove(&id)?;
                self.history.record(p.stats(
                    CheckpointStatus::Failed,
                    now,
                    Some(reason.to_string()),
                ));
                Some(p)
            })
            .collect()
    }

    /// Checkpoint `completed`'s metadata is written: records it and subsumes every older
    /// pending checkpoint, which are returned to be aborted.
    pub fn completed(
        &mut self,
        completed: &PendingCheckpoint,
        now: Instant,
    ) -> Vec<PendingCheckpoint> {
        let id = completed.id();
        self.consecutive_failures = 0;
        self.last_completion = Some(now);
        self.history
            .record(completed.stats(CheckpointStatus::Completed, now, None));
        let older: Vec<u64> = self.pending.range(..id).map(|(k, _)| *k).collect();
        older
            .into_iter()
            .filter_map(|old| {
                let p = self.pending.remove(&old)?;
                self.history.record(p.stats(
                    CheckpointStatus::Failed,
                    now,
                    Some(format!("subsumed by checkpoint {id}")),
                ));
                Some(p)
            })
            .collect()
    }

    /// Checkpoint `next_id()` could not even start (its location could not be created): the
    /// id is skipped, the failure counts towards the tolerable ones, and the next periodic
    /// attempt waits a whole interval — a storage that keeps refusing must not make the job
    /// manager spin.
    ///
    /// It counts as a failed checkpoint in the statistics, as in Flink, with `reason`.
    pub fn trigger_failed(
        &mut self,
        kind: SnapshotType,
        reason: &str,
        now: Instant,
        timestamp_millis: u64,
    ) {
        let id = self.next_id;
        self.next_id += 1;
        if kind == SnapshotType::Checkpoint {
            self.last_trigger = Some(now);
            self.consecutive_failures += 1;
        }
        self.history.record(CheckpointStats {
            id,
            kind,
            status: CheckpointStatus::Failed,
            trigger_timestamp_millis: timestamp_millis,
            duration: Some(Duration::ZERO),
            state_size: 0,
            checkpointed_size: 0,
            subtasks: Vec::new(),
            failure: Some(reason.to_string()),
            location: None,
        });
    }

    /// Checkpoint `next_id()` will not start after all (the job changed while its location
    /// was being created): the id is skipped, and nothing counts as failed.
    pub fn skip(&mut self, id: u64) {
        if id == self.next_id {
            self.next_id += 1;
        }
    }

    /// A fully acknowledged checkpoint could not be finalized (its metadata write failed).
    pub fn finalize_failed(&mut self, checkpoint: &PendingCheckpoint, reason: &str, now: Instant) {
        if checkpoint.barrier.snapshot_type == SnapshotType::Checkpoint {
            self.consecutive_failures += 1;
        }
        self.history.record(checkpoint.stats(
            CheckpointStatus::Failed,
            now,
            Some(reason.to_string()),
        ));
    }

    /// Whether more consecutive checkpoints failed than tolerated.
    pub fn failures_exceed_tolerance(&self) -> bool {
        self.consecutive_failures > self.config.tolerable_failures
    }

    /// Consecutive failed checkpoints.
    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::ids::JobVertexId;
    use std::time::Duration;

    const MS: Duration = Duration::from_millis(1);

    fn task(v: u32, s: u32) -> Participant {
        Participant::Task(SubtaskRef {
            vertex: JobVertexId(v),
            subtask: s,
        })
    }

    fn ack() -> Acknowledgement {
        Acknowledgement::Task {
            states: vec![(NodeId(0), OperatorSubtaskState::default())],
            stats: SubtaskCheckpointStats::default(),
        }
    }

    fn config() -> CheckpointConfig {
        CheckpointConfig::default()
            .with_interval(100 * MS)
            .with_timeout(1000 * MS)
    }

    fn start(c: &mut CheckpointCoordinator, now: Instant, participants: &[Participant]) -> u64 {
        c.start(
            now,
            0,
            SnapshotType::Checkpoint,
            participants.iter().copied().collect(),
            "loc".into(),
        )
        .checkpoint_id
    }

    #[test]
    fn a_trigger_that_cannot_start_skips_its_id_and_waits_an_interval() {
        let t0 = Instant::now();
        let mut c = CheckpointCoordinator::new(config().with_tolerable_failures(1), 7, t0);
        assert!(c.should_trigger(t0 + 100 * MS));
        c.trigger_failed(SnapshotType::Checkpoint, "no room", t0 + 100 * MS, 0);
        assert_eq!(
            c.next_id(),
            8,
            "the id may be taken by someone else: never retried"
        );
        assert!(
            !c.should_trigger(t0 + 150 * MS),
            "no retry before an interval"
        );
        assert!(c.should_trigger(t0 + 200 * MS));
        assert!(!c.failures_exceed_tolerance());
        c.trigger_failed(SnapshotType::Checkpoint, "no room", t0 + 200 * MS, 0);
        assert_eq!(
            c.history().failed,
            2,
            "a trigger failure counts as a failed checkpoint"
        );
        assert!(c.failures_exceed_tolerance());
    }

    #[test]
    fn triggers_on_interval_and_respects_max_concurrent() {
        let t0 = Instant::now();
        let mut c = CheckpointCoordinator::new(config(), 5, t0);
        assert!(!c.should_trigger(t0 + 50 * MS));
        assert!(c.should_trigger(t0 + 100 * MS));
        assert_eq!(start(&mut c, t0 + 100 * MS, &[task(0, 0)]), 5);
        assert!(!c.should_trigger(t0 + 250 * MS), "one already pending");
        assert!(matches!(
            c.acknowledge(5, task(0, 0), ack()),
            AckOutcome::AllAcknowledged(_)
        ));
        assert!(c.should_trigger(t0 + 250 * MS));
        assert_eq!(c.next_id(), 6, "ids only grow");
    }

    #[test]
    fn min_pause_counts_from_completion() {
        let t0 = Instant::now();
        let mut c = CheckpointCoordinator::new(config().with_min_pause(300 * MS), 1, t0);
        start(&mut c, t0 + 100 * MS, &[task(0, 0)]);
        let AckOutcome::AllAcknowledged(p) = c.acknowledge(1, task(0, 0), ack()) else {
            panic!()
        };
        c.completed(&p, t0 + 150 * MS);
        assert!(!c.should_trigger(t0 + 400 * MS));
        assert!(c.should_trigger(t0 + 450 * MS));
    }

    #[test]
    fn completes_only_when_every_participant_acknowledged() {
        let t0 = Instant::now();
        let mut c = CheckpointCoordinator::new(config(), 1, t0);
        let coordinator = Participant::Coordinator(NodeId(0));
        start(&mut c, t0, &[task(0, 0), task(0, 1), coordinator]);
        assert!(matches!(
            c.acknowledge(1, task(0, 0), ack()),
            AckOutcome::Pending
        ));
        assert!(
            matches!(c.acknowledge(1, task(0, 0), ack()), AckOutcome::Pending),
            "duplicate"
        );
        assert!(matches!(
            c.acknowledge(1, task(0, 1), ack()),
            AckOutcome::Pending
        ));
        let done = c.acknowledge(
            1,
            coordinator,
            Acknowledgement::Coordinator { state: vec![1, 2] },
        );
        let AckOutcome::AllAcknowledged(p) = done else {
            panic!()
        };
        let meta = p.to_metadata("job", 1, |n| (format!("uid-{}", n.0), "op".into(), 2, 128));
        assert_eq!(meta.operators.len(), 1);
        assert_eq!(meta.operators[0].subtasks.len(), 2);
        assert_eq!(meta.operators[0].coordinator, Some(vec![1, 2]));
        assert!(matches!(
            c.acknowledge(1, task(0, 0), ack()),
            AckOutcome::Unknown
        ));
    }

    #[test]
    fn expiry_abort_and_tolerable_failures() {
        let t0 = Instant::now();
        let mut c = CheckpointCoordinator::new(config().with_tolerable_failures(1), 1, t0);
        start(&mut c, t0, &[task(0, 0)]);
        assert!(c.expired(t0 + 999 * MS).is_empty());
        assert_eq!(c.expired(t0 + 1000 * MS), vec![1]);
        c.abort(1, "expired", true, t0 + 1000 * MS).unwrap();
        assert!(!c.failures_exceed_tolerance());
        start(&mut c, t0 + 1100 * MS, &[task(0, 0)]);
        c.abort(2, "declined", true, t0 + 1200 * MS).unwrap();
        assert!(c.failures_exceed_tolerance());
        assert_eq!(c.history().failed, 2);
        assert!(matches!(
            c.acknowledge(2, task(0, 0), ack()),
            AckOutcome::Unknown
        ));
    }

    #[test]
    fn completion_subsumes_older_pending_checkpoints() {
        let t0 = Instant::now();
        let mut c = CheckpointCoordinator::new(config().with_max_concurrent(3), 1, t0);
        start(&mut c, t0, &[task(0, 0), task(0, 1)]);
        start(&mut c, t0 + 10 * MS, &[task(0, 0)]);
        let AckOutcome::AllAcknowledged(p) = c.acknowledge(2, task(0, 0), ack()) else {
            panic!()
        };
        let subsumed = c.completed(&p, t0 + 20 * MS);
        assert_eq!(
            subsumed
                .iter()
                .map(PendingCheckpoint::id)
                .collect::<Vec<_>>(),
            vec![1]
        );
        assert!(c.pending_ids().is_empty());
        assert_eq!(c.history().completed, 1);
        assert_eq!(c.consecutive_failures(), 0);
    }

    #[test]
    fn a_checkpoint_acknowledged_after_a_newer_restore_point_is_subsumed_not_completed() {
        let t0 = Instant::now();
        let mut c = CheckpointCoordinator::new(config().with_max_concurrent(3), 1, t0);
        start(&mut c, t0, &[task(0, 0)]);
        start(&mut c, t0 + 10 * MS, &[task(0, 0)]);
        // Checkpoint 2's asynchronous parts finished first.
        let AckOutcome::AllAcknowledged(p) = c.acknowledge(2, task(0, 0), ack()) else {
            panic!()
        };
        c.finalizing_restore_point(p.id());
        let AckOutcome::Subsumed { pending, by } = c.acknowledge(1, task(0, 0), ack()) else {
            panic!("checkpoint 1 must not complete after checkpoint 2")
        };
        assert_eq!((pending.id(), by), (1, 2));
        assert_eq!(c.consecutive_failures(), 0, "being overtaken is no failure");
        assert!(c.pending_ids().is_empty());
        // A savepoint is no restore point: it still completes.
        let t1 = t0 + 20 * MS;
        c.start(
            t1,
            0,
            SnapshotType::Savepoint,
            [task(0, 0)].into(),
            "sp".into(),
        );
        c.start(
            t1,
            0,
            SnapshotType::Checkpoint,
            [task(0, 0)].into(),
            "c".into(),
        );
        let AckOutcome::AllAcknowledged(four) = c.acknowledge(4, task(0, 0), ack()) else {
            panic!()
        };
        c.finalizing_restore_point(four.id());
        assert!(matches!(
            c.acknowledge(3, task(0, 0), ack()),
            AckOutcome::AllAcknowledged(_)
        ));
    }

    #[test]
    fn savepoints_do_not_count_as_checkpoint_failures_or_move_the_timer() {
        let t0 = Instant::now();
        let mut c = CheckpointCoordinator::new(config(), 1, t0);
        let b = c.start(
            t0 + 10 * MS,
            0,
            SnapshotType::Savepoint,
            [task(0, 0)].into(),
            "sp".into(),
        );
        assert_eq!(b.snapshot_type, SnapshotType::Savepoint);
        c.abort(1, "declined", true, t0 + 20 * MS);
        assert_eq!(c.consecutive_failures(), 0);
        assert_eq!(c.next_due(), Some(t0 + 100 * MS));
    }
}
