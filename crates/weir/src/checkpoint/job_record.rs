//! The job record: the one durable file that says where a job stands — which process holds it
//! (its epoch), which completed checkpoints its sinks may have committed, and how its last run
//! ended. It plays the parts of Flink's `CompletedCheckpointStore` (the retained completed
//! checkpoints a recovery chooses from) and `JobResultStore` (a job that reached a terminal
//! state is not run again), in one file rewritten atomically, so that the two can never
//! disagree after a crash.
//!
//! Invariants the job manager keeps with it:
//! - a checkpoint enters the record before any sink is notified of its completion, so every
//!   output a sink committed belongs to a checkpoint the record names (or names no longer
//!   because a newer one superseded it);
//! - the record is rewritten before any checkpoint it stops naming is deleted, so it never
//!   names a checkpoint whose files were removed on purpose;
//! - a terminal status (finished, stopped with a savepoint) is durable before the checkpoints
//!   it makes unnecessary are deleted;
//! - the epoch only grows: every process that takes the job writes a higher one first, and a
//!   process that finds a higher epoch than its own has lost the job and commits nothing.

use serde::{Deserialize, Serialize};

use crate::checkpoint::checksummed;
use crate::runtime::stream_element::SnapshotType;

// Version 2: written as a chain of versions (`job_record_versions`), with the epoch of each
// restore point, the local-recovery copy it was written with, and the `Reset` status.
const MAGIC: &[u8; 8] = b"WEIRJOB2";

/// A completed checkpoint or savepoint a recovery may restore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedCheckpoint {
    /// Its id.
    pub id: u64,
    /// Checkpoint, or the savepoint of a stop-with-savepoint (or one the job was started from).
    pub kind: SnapshotType,
    /// Its location in checkpoint storage.
    pub location: String,
    /// Whether state of operators the job no longer has may be dropped when restoring it
    /// (set for a savepoint the job was started from with that setting).
    pub allow_non_restored_state: bool,
    /// The epoch of the process that completed it, as its metadata says (0: not known, for a
    /// savepoint or checkpoint the job was started from by path): restored metadata must say
    /// the same, or it is not this restore point.
    pub epoch: u64,
}

impl RecordedCheckpoint {
    /// An entry for `location`, of `kind`, with id `id`.
    pub fn new(id: u64, kind: SnapshotType, location: impl Into<String>) -> Self {
        Self {
            id,
            kind,
            location: location.into(),
            allow_non_restored_state: false,
            epoch: 0,
        }
    }

    /// The same entry, completed by the process of epoch `epoch`.
    pub fn with_epoch(mut self, epoch: u64) -> Self {
        self.epoch = epoch;
        self
    }
}

/// How the job's latest run ended, as far as the record knows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RecordedStatus {
    /// Running, or the process died while it ran.
    Running,
    /// Ran to the end of its input; its final checkpoint is committed.
    Finished {
        /// The final checkpoint.
        final_checkpoint: Option<u64>,
    },
    /// Stopped with a savepoint, whose transactions the sinks committed.
    Stopped {
        /// The savepoint's id.
        savepoint: u64,
        /// Its location.
        location: String,
    },
    /// Cancelled.
    Cancelled {
        /// Whether its checkpoints were kept (`RetentionOnCancel::Retain`).
        checkpoints_retained: bool,
    },
    /// Failed for good (the restart strategy gave up).
    Failed,
    /// Started over on purpose (`weir reset`): the earlier runs' checkpoints were deleted and
    /// their file output removed, so a start from empty state duplicates nothing. The record
    /// itself stays, so that epochs, record versions and checkpoint ids never restart.
    Reset,
}

/// The job record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    /// Grows with every write; of two readable copies the one with the higher sequence wins.
    pub sequence: u64,
    /// The epoch of the process holding the job: its fencing token.
    pub epoch: u64,
    /// What identifies the holder, for error messages: `pid 123 on host h since …`.
    pub holder: String,
    /// The job's name.
    pub job_name: String,
    /// Restore points, oldest first: the retained completed checkpoints, and the savepoint
    /// the job was stopped with or started from. The newest is where a recovery starts.
    pub completed: Vec<RecordedCheckpoint>,
    /// The highest checkpoint id whose completion may have been notified to sinks, in this
    /// run or an earlier one it continues. Restoring anything older replays output that may
    /// be committed already.
    pub notified_through: u64,
    /// The highest checkpoint or savepoint id ever used, so that ids never repeat.
    pub max_id: u64,
    /// How the latest run ended.
    pub status: RecordedStatus,
    /// The local-recovery copy this version was written with, if any: a later run without
    /// it, or with another, removes that copy's record, which no longer follows the job.
    pub local_copy: Option<String>,
}

impl JobRecord {
    /// A record for a job nothing is known about yet.
    pub fn new(job_name: &str) -> Self {
        Self {
            sequence: 0,
            epoch: 0,
            holder: String::new(),
            job_name: job_name.to_string(),
            completed: Vec::new(),
            notified_through: 0,
            max_id: 0,
            status: RecordedStatus::Running,
            local_copy: None,
        }
    }

    /// The newest restore point.
    pub fn latest(&self) -> Option<&RecordedCheckpoint> {
        self.completed.last()
    }

    /// Adds a completed checkpoint (or stop savepoint) as the newest restore point and keeps
    /// the newest `retained` entries; returns the checkpoints it no longer names, whose files
    /// may be deleted once this record is durable. A savepoint counts towards `retained` but
    /// is never returned for deletion: savepoints belong to the user.
    pub fn add_completed(
        &mut self,
        entry: RecordedCheckpoint,
        retained: usize,
    ) -> Vec<RecordedCheckpoint> {
        self.notified_through = self.notified_through.max(entry.id);
        self.max_id = self.max_id.max(entry.id);
        self.completed.push(entry);
        let mut dropped = Vec::new();
        while self.completed.len() > retained.max(1) {
            let old = self.completed.remove(0);
            if old.kind == SnapshotType::Checkpoint {
                dropped.push(old);
            }
        }
        dropped
    }

    /// Whether a run of the job left output or restore points that a start from empty state
    /// would ignore: it finished, was stopped with a savepoint, names a restore point, or
    /// notified sinks of a completed checkpoint. A reset record, or one of a run that died
    /// before its first checkpoint completed, leaves nothing.
    pub fn has_earlier_run(&self) -> bool {
        match self.status {
            RecordedStatus::Reset => false,
            RecordedStatus::Finished { .. } | RecordedStatus::Stopped { .. } => true,
            _ => !self.completed.is_empty() || self.notified_through > 0,
        }
    }

    /// How the record stands, in words, for messages: `a run that finished (epoch 3), sinks
    /// notified through checkpoint 7`.
    pub fn describe(&self) -> String {
        let status = match &self.status {
            RecordedStatus::Running => {
                "a run that did not end (it is running, or its process died)".to_string()
            }
            RecordedStatus::Finished { .. } => "a run that finished".to_string(),
            RecordedStatus::Stopped { savepoint, .. } => {
                format!("a run stopped with savepoint {savepoint}")
            }
            RecordedStatus::Cancelled { .. } => "a cancelled run".to_string(),
            RecordedStatus::Failed => "a run that failed".to_string(),
            RecordedStatus::Reset => "a reset".to_string(),
        };
        let mut text = format!("{status} (epoch {})", self.epoch);
        if let Some(latest) = self.latest() {
            let kind = match latest.kind {
                SnapshotType::Checkpoint => "checkpoint",
                SnapshotType::Savepoint => "savepoint",
            };
            text.push_str(&format!(
                ", newest restore point {kind} {} at `{}`",
                latest.id, latest.location
            ));
        }
        if self.notified_through > 0 {
            text.push_str(&format!(
                ", sinks notified through checkpoint {}",
                self.notified_through
            ));
        }
        text
    }

    /// Encodes as `MAGIC | crc32 | length | postcard payload`.
    pub fn encode(&self) -> Result<Vec<u8>, postcard::Error> {
        checksummed::encode(MAGIC, self)
    }

    /// Decodes and verifies; the error says what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<JobRecord, String> {
        checksummed::decode(MAGIC, "Weir job record", bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chk(id: u64) -> RecordedCheckpoint {
        RecordedCheckpoint::new(id, SnapshotType::Checkpoint, format!("/c/chk-{id}"))
    }

    fn savepoint(id: u64) -> RecordedCheckpoint {
        RecordedCheckpoint::new(id, SnapshotType::Savepoint, format!("/c/savepoint-{id}"))
    }

    #[test]
    fn retention_drops_the_oldest_checkpoints_and_never_returns_savepoints() {
        let mut record = JobRecord::new("j");
        assert!(record.add_completed(savepoint(3), 2).is_empty());
        assert!(record.add_completed(chk(4), 2).is_empty());
        assert_eq!(record.completed, vec![savepoint(3), chk(4)]);
        assert!(
            record.add_completed(chk(5), 2).is_empty(),
            "the savepoint leaves the record, its files stay"
        );
        assert_eq!(record.add_completed(chk(6), 2), vec![chk(4)]);
        assert_eq!(record.completed, vec![chk(5), chk(6)]);
        assert_eq!(record.notified_through, 6);
        assert_eq!(record.max_id, 6);
        assert_eq!(record.add_completed(savepoint(7), 2), vec![chk(5)]);
        assert_eq!(record.completed, vec![chk(6), savepoint(7)]);
        assert_eq!(record.latest(), Some(&savepoint(7)));
    }

    #[test]
    fn round_trips_and_detects_damage() {
        let mut record = JobRecord::new("job");
        record.epoch = 4;
        record.add_completed(chk(9), 1);
        record.status = RecordedStatus::Stopped {
            savepoint: 9,
            location: "/x".into(),
        };
        let bytes = record.encode().unwrap();
        assert_eq!(JobRecord::decode(&bytes).unwrap(), record);
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(JobRecord::decode(&flipped)
            .unwrap_err()
            .contains("checksum"));
        assert!(JobRecord::decode(&bytes[..bytes.len() - 2])
            .unwrap_err()
            .contains("truncated"));
        assert!(JobRecord::decode(b"WEIRCHK1xxxxxxxxxxxxxxxx")
            .unwrap_err()
            .contains("magic"));
    }
}
