//! Checkpoint statistics: counts, the latest of each kind, the history, and each
//! checkpoint's per-subtask detail.

use serde::Serialize;
use utoipa::ToSchema;
use weir::checkpoint::stats::{CheckpointHistory, CheckpointStats, CheckpointStatus};
use weir::runtime::stream_element::SnapshotType;

/// `GET /jobs/{id}/checkpoints`.
#[derive(Debug, Serialize, ToSchema)]
pub struct CheckpointingStatistics {
    /// How many of each outcome.
    pub counts: CheckpointCounts,
    /// Durations and sizes over the completed checkpoints kept.
    pub summary: CheckpointSummary,
    /// The newest checkpoints of each kind.
    pub latest: LatestCheckpoints,
    /// Recent checkpoints, newest first.
    pub history: Vec<CheckpointInfo>,
}

/// Checkpoints by outcome.
#[derive(Debug, Serialize, ToSchema)]
pub struct CheckpointCounts {
    /// Completed since the job started.
    pub completed: u64,
    /// Failed since the job started.
    pub failed: u64,
    /// In progress now.
    pub in_progress: u64,
    /// All of them.
    pub total: u64,
}

/// Minimum, average and maximum of one statistic.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct MinMaxAvg {
    /// Lowest.
    pub min: u64,
    /// Highest.
    pub max: u64,
    /// Mean.
    pub avg: u64,
}

impl MinMaxAvg {
    fn of(values: impl Iterator<Item = u64>) -> Self {
        let values: Vec<u64> = values.collect();
        if values.is_empty() {
            return Self::default();
        }
        Self {
            min: values.iter().copied().min().unwrap_or(0),
            max: values.iter().copied().max().unwrap_or(0),
            avg: values.iter().sum::<u64>() / values.len() as u64,
        }
    }
}

/// Statistics over the completed checkpoints kept.
#[derive(Debug, Serialize, ToSchema)]
pub struct CheckpointSummary {
    /// End-to-end duration, in milliseconds.
    pub end_to_end_duration: MinMaxAvg,
    /// State size, in bytes.
    pub state_size: MinMaxAvg,
    /// Longest barrier alignment per checkpoint, in milliseconds.
    pub alignment_duration: MinMaxAvg,
}

/// The newest checkpoint of each kind.
#[derive(Debug, Serialize, ToSchema)]
pub struct LatestCheckpoints {
    /// The newest completed checkpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed: Option<CheckpointInfo>,
    /// The newest completed savepoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub savepoint: Option<CheckpointInfo>,
    /// The newest failed one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<CheckpointInfo>,
}

/// One checkpoint or savepoint.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CheckpointInfo {
    /// Its id.
    pub id: u64,
    /// `IN_PROGRESS`, `COMPLETED` or `FAILED`.
    pub status: String,
    /// Whether it is a savepoint.
    pub is_savepoint: bool,
    /// `CHECKPOINT` or `SAVEPOINT`.
    pub checkpoint_type: String,
    /// When it was triggered, in milliseconds since the Unix epoch.
    pub trigger_timestamp: u64,
    /// From trigger to completion or failure, in milliseconds.
    pub end_to_end_duration: Option<u64>,
    /// Bytes of state.
    pub state_size: u64,
    /// Bytes this checkpoint wrote (less than `state_size` when incremental).
    pub checkpointed_size: u64,
    /// Longest barrier alignment, in milliseconds.
    pub alignment_duration: u64,
    /// Subtasks that acknowledged it.
    pub num_acknowledged_subtasks: usize,
    /// Whether some subtask took it unaligned (Flink's `is_unaligned`).
    pub is_unaligned: bool,
    /// Bytes of in-flight records stored as channel state (Flink's `persisted_data`).
    pub persisted_data: u64,
    /// Where it was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_path: Option<String>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
}

fn status_name(status: CheckpointStatus) -> &'static str {
    match status {
        CheckpointStatus::InProgress => "IN_PROGRESS",
        CheckpointStatus::Completed => "COMPLETED",
        CheckpointStatus::Failed => "FAILED",
    }
}

impl CheckpointInfo {
    /// The checkpoint `c`.
    pub fn of(c: &CheckpointStats) -> Self {
        Self {
            id: c.id,
            status: status_name(c.status).into(),
            is_savepoint: c.kind == SnapshotType::Savepoint,
            checkpoint_type: match c.kind {
                SnapshotType::Checkpoint => "CHECKPOINT".into(),
                SnapshotType::Savepoint => "SAVEPOINT".into(),
            },
            trigger_timestamp: c.trigger_timestamp_millis,
            end_to_end_duration: c.duration.map(|d| d.as_millis() as u64),
            state_size: c.state_size,
            checkpointed_size: c.checkpointed_size,
            alignment_duration: c.max_alignment_duration().as_millis() as u64,
            num_acknowledged_subtasks: c.subtasks.len(),
            is_unaligned: c.is_unaligned(),
            persisted_data: c.persisted_data(),
            external_path: c.location.clone(),
            failure_message: c.failure.clone(),
        }
    }
}

impl CheckpointingStatistics {
    /// The statistics of `history`, with `in_progress` checkpoints pending.
    pub fn of(history: &CheckpointHistory, in_progress: u64) -> Self {
        let completed: Vec<&CheckpointStats> = history
            .recent
            .iter()
            .filter(|c| c.status == CheckpointStatus::Completed)
            .collect();
        let newest = |f: &dyn Fn(&CheckpointStats) -> bool| {
            history
                .recent
                .iter()
                .rev()
                .find(|c| f(c))
                .map(CheckpointInfo::of)
        };
        Self {
            counts: CheckpointCounts {
                completed: history.completed,
                failed: history.failed,
                in_progress,
                total: history.completed + history.failed + in_progress,
            },
            summary: CheckpointSummary {
                end_to_end_duration: MinMaxAvg::of(
                    completed
                        .iter()
                        .filter_map(|c| c.duration.map(|d| d.as_millis() as u64)),
                ),
                state_size: MinMaxAvg::of(completed.iter().map(|c| c.state_size)),
                alignment_duration: MinMaxAvg::of(
                    completed
                        .iter()
                        .map(|c| c.max_alignment_duration().as_millis() as u64),
                ),
            },
            latest: LatestCheckpoints {
                completed: newest(&|c| {
                    c.status == CheckpointStatus::Completed && c.kind == SnapshotType::Checkpoint
                }),
                savepoint: newest(&|c| {
                    c.status == CheckpointStatus::Completed && c.kind == SnapshotType::Savepoint
                }),
                failed: newest(&|c| c.status == CheckpointStatus::Failed),
            },
            history: history
                .recent
                .iter()
                .rev()
                .map(CheckpointInfo::of)
                .collect(),
        }
    }
}

/// `GET /jobs/{id}/checkpoints/details/{checkpointid}`: one checkpoint with each
/// subtask's part.
#[derive(Debug, Serialize, ToSchema)]
pub struct CheckpointDetails {
    /// The checkpoint.
    #[serde(flatten)]
    pub checkpoint: CheckpointInfo,
    /// Each acknowledging subtask's part.
    pub subtasks: Vec<SubtaskCheckpointInfo>,
}

/// One subtask's part of a checkpoint.
#[derive(Debug, Serialize, ToSchema)]
pub struct SubtaskCheckpointInfo {
    /// The task, `chain (i/p)`.
    pub task: String,
    /// Milliseconds the task thread was blocked taking the snapshot.
    pub sync_duration: u64,
    /// Milliseconds spent writing it while records kept flowing.
    pub async_duration: u64,
    /// Milliseconds from the first to the last barrier at the task.
    pub alignment_duration: u64,
    /// Milliseconds from the trigger until the barrier reached the task.
    pub start_delay: u64,
    /// Bytes of state.
    pub state_size: u64,
    /// Bytes the subtask wrote (less than `state_size` when incremental).
    pub checkpointed_size: u64,
    /// Whether the subtask snapshotted unaligned (Flink's `unaligned_checkpoint`).
    pub unaligned_checkpoint: bool,
    /// Bytes of in-flight records it stored (Flink's `persisted_data`).
    pub persisted_data: u64,
}

impl CheckpointDetails {
    /// The checkpoint `c` with its subtasks.
    pub fn of(c: &CheckpointStats) -> Self {
        Self {
            checkpoint: CheckpointInfo::of(c),
            subtasks: c
                .subtasks
                .iter()
                .map(|s| SubtaskCheckpointInfo {
                    task: s.task.clone(),
                    sync_duration: s.sync_duration.as_millis() as u64,
                    async_duration: s.async_duration.as_millis() as u64,
                    alignment_duration: s.alignment_duration.as_millis() as u64,
                    start_delay: s.start_delay.as_millis() as u64,
                    state_size: s.state_size,
                    checkpointed_size: s.checkpointed_size,
                    unaligned_checkpoint: s.unaligned,
                    persisted_data: s.persisted_data,
                })
                .collect(),
        }
    }
}
