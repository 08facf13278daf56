//! Checkpoint statistics: per checkpoint and per subtask, and a bounded history.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::runtime::stream_element::SnapshotType;

/// How far a checkpoint got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointStatus {
    /// Triggered, not all acknowledgements in.
    InProgress,
    /// Metadata written: restorable.
    Completed,
    /// Expired, declined, subsumed or failed to finalize.
    Failed,
}

/// What one subtask reported of its part of a checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct SubtaskCheckpointStats {
    /// Task name, `chain (i/p)`.
    pub task: String,
    /// Time the task thread was blocked taking the snapshot.
    pub sync_duration: Duration,
    /// Time spent writing the snapshot while records kept flowing.
    pub async_duration: Duration,
    /// Time from the first to the last barrier of the checkpoint at this task.
    pub alignment_duration: Duration,
    /// Time from the trigger until the barrier reached this task.
    pub start_delay: Duration,
    /// Bytes of state (all of it, also when only part of it was written).
    pub state_size: u64,
    /// Bytes this checkpoint wrote: less than `state_size` when incremental (Flink's
    /// `checkpointed_size`).
    #[serde(default)]
    pub checkpointed_size: u64,
    /// Whether this subtask snapshotted unaligned (FLIP-76).
    #[serde(default)]
    pub unaligned: bool,
    /// Bytes of in-flight records stored as channel state (Flink's `persisted_data`).
    #[serde(default)]
    pub persisted_data: u64,
}

/// One checkpoint's statistics.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckpointStats {
    /// Checkpoint id.
    pub id: u64,
    /// Checkpoint or savepoint.
    pub kind: SnapshotType,
    /// Status.
    pub status: CheckpointStatus,
    /// Trigger time, milliseconds since the Unix epoch.
    pub trigger_timestamp_millis: u64,
    /// From trigger to completion or failure.
    pub duration: Option<Duration>,
    /// Bytes of state.
    pub state_size: u64,
    /// Bytes written by this checkpoint (less than `state_size` when incremental).
    pub checkpointed_size: u64,
    /// Per acknowledging subtask.
    pub subtasks: Vec<SubtaskCheckpointStats>,
    /// Why it failed.
    pub failure: Option<String>,
    /// Where it was written.
    pub location: Option<String>,
}

impl CheckpointStats {
    /// The longest synchronous (task-blocking) part of any subtask.
    pub fn max_sync_duration(&self) -> Duration {
        self.subtasks
            .iter()
            .map(|s| s.sync_duration)
            .max()
            .unwrap_or_default()
    }
    /// The longest asynchronous part of any subtask.
    pub fn max_async_duration(&self) -> Duration {
        self.subtasks
            .iter()
            .map(|s| s.async_duration)
            .max()
            .unwrap_or_default()
    }
    /// Whether any subtask snapshotted unaligned.
    pub fn is_unaligned(&self) -> bool {
        self.subtasks.iter().any(|s| s.unaligned)
    }
    /// Bytes of in-flight records stored as channel state, over all subtasks.
    pub fn persisted_data(&self) -> u64 {
        self.subtasks.iter().map(|s| s.persisted_data).sum()
    }
    /// The longest alignment of any subtask.
    pub fn max_alignment_duration(&self) -> Duration {
        self.subtasks
            .iter()
            .map(|s| s.alignment_duration)
            .max()
            .unwrap_or_default()
    }
}

impl fmt::Display for CheckpointStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        write!(
            f,
            "{:?} {} {:?}: {} bytes ({} written), {:.1} ms end-to-end, sync max {:.2} ms, async max {:.1} ms, alignment max {:.1} ms",
            self.kind,
            self.id,
            self.status,
            self.state_size,
            self.checkpointed_size,
            self.duration.map_or(0.0, ms),
            ms(self.max_sync_duration()),
            ms(self.max_async_duration()),
            ms(self.max_alignment_duration()),
        )?;
        if let Some(reason) = &self.failure {
            write!(f, " ({reason})")?;
        }
        Ok(())
    }
}

/// The last checkpoints, newest last, plus totals.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CheckpointHistory {
    /// Most recent checkpoints, oldest first.
    pub recent: VecDeque<CheckpointStats>,
    /// Checkpoints completed since the job started.
    pub completed: u64,
    /// Checkpoints failed since the job started.
    pub failed: u64,
    /// Summed end-to-end duration of every completed checkpoint since the job started, so
    /// the mean covers all of them, not only the `recent` ones.
    pub completed_duration_total: Duration,
    /// How many entries `recent` keeps.
    pub capacity: usize,
}

impl CheckpointHistory {
    /// An empty history keeping `capacity` entries.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            ..Self::default()
        }
    }

    /// Records a finished (completed or failed) checkpoint.
    pub fn record(&mut self, stats: CheckpointStats) {
        match stats.status {
            CheckpointStatus::Completed => {
                self.completed += 1;
                self.completed_duration_total += stats.duration.unwrap_or_default();
            }
            CheckpointStatus::Failed => self.failed += 1,
            CheckpointStatus::InProgress => {}
        }
        self.recent.push_back(stats);
        while self.recent.len() > self.capacity {
            self.recent.pop_front();
        }
    }

    /// The mean end-to-end duration of the completed checkpoints, if any completed.
    pub fn mean_completed_duration(&self) -> Option<Duration> {
        let completed = u32::try_from(self.completed).ok().filter(|n| *n > 0)?;
        Some(self.completed_duration_total / completed)
    }

    /// The most recent completed checkpoint.
    pub fn latest_completed(&self) -> Option<&CheckpointStats> {
        self.recent
            .iter()
            .rev()
            .find(|s| s.status == CheckpointStatus::Completed)
    }
}

impl fmt::Display for CheckpointHistory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Checkpoints: {} completed, {} failed",
            self.completed, self.failed
        )?;
        for s in &self.recent {
            writeln!(f, "  {s}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished(id: u64, status: CheckpointStatus, millis: u64) -> CheckpointStats {
        CheckpointStats {
            id,
            kind: SnapshotType::Checkpoint,
            status,
            trigger_timestamp_millis: 0,
            duration: Some(Duration::from_millis(millis)),
            state_size: 0,
            checkpointed_size: 0,
            subtasks: Vec::new(),
            failure: None,
            location: None,
        }
    }

    #[test]
    fn mean_covers_checkpoints_that_left_the_recent_window() {
        let mut history = CheckpointHistory::new(2);
        assert_eq!(history.mean_completed_duration(), None);
        history.record(finished(1, CheckpointStatus::Completed, 10));
        history.record(finished(2, CheckpointStatus::Failed, 1000));
        history.record(finished(3, CheckpointStatus::Completed, 20));
        history.record(finished(4, CheckpointStatus::Completed, 60));
        assert_eq!(history.recent.len(), 2);
        assert_eq!(history.completed, 3);
        assert_eq!(
            history.mean_completed_duration(),
            Some(Duration::from_millis(30))
        );
    }
}
