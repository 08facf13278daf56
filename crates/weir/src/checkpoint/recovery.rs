//! Where a job starts from, and what recovery may do when that checkpoint is unusable: pure
//! decisions over the job record, free of I/O, the same for a restart inside a run, for
//! `resume` after the process died, and for a restore from a path.
//!
//! The rule they keep: **never restore a checkpoint older than one whose completion may have
//! been notified to a sink that commits output on checkpoint completion** (two-phase commit,
//! write-ahead log), because replaying from there commits that output a second time. Every
//! checkpoint in the job record may have been notified (it enters the record before the
//! notice goes out), so falling back past the newest recorded checkpoint — or starting from
//! empty state when the record says output was committed — is refused unless the
//! configuration allows the duplicates. With only idempotent or at-least-once sinks, falling
//! back is allowed and logged with the range it replays.

use serde::{Deserialize, Serialize};

use crate::checkpoint::job_record::{JobRecord, RecordedCheckpoint, RecordedStatus};

/// The option that lets recovery fall back past committed output, as messages name it.
pub const FALLBACK_OPTION: &str = "recovery.fallback-on-corrupt-checkpoint";

/// What recovery may do when the checkpoint it must restore is corrupt or missing
/// (`recovery.fallback-on-corrupt-checkpoint`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CorruptCheckpointPolicy {
    /// Refuse with an error naming the file, unless every sink is idempotent or
    /// at-least-once (default).
    #[default]
    Refuse,
    /// Fall back to an older checkpoint (or empty state) anyway; sinks that commit on
    /// checkpoint completion then commit the replayed range a second time.
    AllowDuplicates,
}

/// How a job was asked to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartMode {
    /// From empty state.
    Fresh,
    /// From the job's latest restore point, if it has one (after its process died).
    Resume,
    /// From the savepoint or checkpoint at a path, whose id is given.
    RestoreFrom {
        /// The location.
        path: String,
        /// Its checkpoint id.
        id: u64,
    },
}

/// What the job's previous record says, as read from storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreviousRecord {
    /// No record: the job never ran here (or its record was deleted).
    None,
    /// The record.
    Found(JobRecord),
    /// A record exists but no copy of it is readable.
    Unreadable(String),
}

/// Where to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartPlan {
    /// The job ran to its end already; there is nothing to do.
    AlreadyFinished,
    /// From empty state; `note` is worth a warning.
    Fresh {
        /// Why that deserves attention, if it does.
        note: Option<String>,
    },
    /// From the first usable of these restore points, newest first; `note` is worth a
    /// warning.
    Restore {
        /// Candidates, newest first.
        candidates: Vec<RecordedCheckpoint>,
        /// Why that deserves attention, if it does.
        note: Option<String>,
    },
}

/// Why recovery refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecoveryError {
    /// The checkpoint recovery must restore is corrupt or missing.
    #[error(
        "cannot restore checkpoint {checkpoint_id} of job `{job}`: {problem}. {}",
        consequence(*checkpoint_id, *fallback, sinks)
    )]
    Unusable {
        /// The job.
        job: String,
        /// The checkpoint.
        checkpoint_id: u64,
        /// What is wrong, naming the file and the copies checked.
        problem: String,
        /// The older restore point a fallback would use (`None`: empty state).
        fallback: Option<u64>,
        /// Sinks that commit on checkpoint completion.
        sinks: Vec<String>,
    },
    /// The job record exists but cannot be read.
    #[error(
        "cannot resume or restore job `{job}`: its job record is unreadable ({problem}), so \
         which checkpoint its sinks committed last is unknown. {}",
        override_hint(sinks, "a checkpoint")
    )]
    RecordUnreadable {
        /// The job.
        job: String,
        /// What is wrong.
        problem: String,
        /// Sinks that commit on checkpoint completion.
        sinks: Vec<String>,
    },
    /// Checkpoints exist but the job record that says which ones were committed does not.
    #[error(
        "cannot resume job `{job}`: `{storage}` holds checkpoints {checkpoints:?} but no job \
         record (`{storage}/_job_record`), so which of them its sinks committed is unknown (the \
         record was deleted, or an older Weir wrote these checkpoints). {}",
        override_hint(sinks, "the newest of them")
    )]
    NoRecord {
        /// The job.
        job: String,
        /// The checkpoint storage.
        storage: String,
        /// Checkpoint ids found with metadata.
        checkpoints: Vec<u64>,
        /// Sinks that commit on checkpoint completion.
        sinks: Vec<String>,
    },
    /// The job record says output was committed, but names nothing to restore.
    #[error(
        "cannot resume job `{job}`: sinks were notified of checkpoints up to \
         {notified_through}, but {why}; starting from empty state would commit that output a \
         second time. {}",
        override_hint(sinks, "empty state")
    )]
    NothingToRestore {
        /// The job.
        job: String,
        /// The newest checkpoint notified.
        notified_through: u64,
        /// Why there is nothing.
        why: String,
        /// Sinks that commit on checkpoint completion.
        sinks: Vec<String>,
    },
    /// A start from empty state over an earlier run of the job.
    #[error(
        "job `{job}` ran here before: `{storage}` holds {found}. Starting it from empty state \
         would {consequence}. Resume it instead (`weir run --resume`, `execution.start-mode: resume`, \
         or ExecutionConfig::with_resume_from_latest_checkpoint), restore a checkpoint or savepoint \
         (`execution.savepoint.path`), or start over with `weir reset {storage}` (it deletes the \
         job's checkpoints; move its sinks' output aside too)"
    )]
    EarlierRun {
        /// The job.
        job: String,
        /// The checkpoint storage (the job's directory).
        storage: String,
        /// What the earlier run left, in words.
        found: String,
        /// What starting over would do.
        consequence: String,
    },
    /// A restore from a path older than output already committed.
    #[error(
        "cannot restore job `{job}` from `{path}`: it is checkpoint {checkpoint_id}, but sinks \
         were notified of checkpoints up to {notified_through} already, so restoring it \
         commits the output of checkpoints {}..={notified_through} a second time. {}",
        checkpoint_id + 1,
        override_hint(sinks, "it")
    )]
    OlderThanCommitted {
        /// The job.
        job: String,
        /// The restore path.
        path: String,
        /// Its checkpoint id.
        checkpoint_id: u64,
        /// The newest checkpoint notified.
        notified_through: u64,
        /// Sinks that commit on checkpoint completion.
        sinks: Vec<String>,
    },
}

fn sink_list(sinks: &[String]) -> String {
    sinks
        .iter()
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn override_hint(sinks: &[String], target: &str) -> String {
    format!(
        "Sinks {} commit output when a checkpoint completes. Refusing; set `{FALLBACK_OPTION}: \
         allow-duplicates` (CheckpointConfig::with_corrupt_checkpoint_policy) to start from \
         {target} anyway, accepting duplicates in those sinks",
        sink_list(sinks)
    )
}

fn range_after(fallback: Option<u64>, up_to: u64) -> String {
    let from = fallback.map_or(1, |f| f + 1);
    if from >= up_to {
        format!("checkpoint {up_to}")
    } else {
        format!("checkpoints {from}..={up_to}")
    }
}

fn fallback_target(fallback: Option<u64>) -> String {
    fallback.map_or("empty state".into(), |f| format!("checkpoint {f}"))
}

fn consequence(checkpoint_id: u64, fallback: Option<u64>, sinks: &[String]) -> String {
    format!(
        "Sinks {} commit output when a checkpoint completes and may have been notified of \
         checkpoint {checkpoint_id}: restoring {} instead would commit the output of {} a \
         second time. Refusing; repair or restore the file, or set `{FALLBACK_OPTION}: \
         allow-duplicates` (CheckpointConfig::with_corrupt_checkpoint_policy) to fall back \
         anyway",
        sink_list(sinks),
        fallback_target(fallback),
        range_after(fallback, checkpoint_id)
    )
}

/// What every recovery decision needs to know about the job.
#[derive(Debug, Clone, Copy)]
pub struct RecoveryContext<'a> {
    /// The job's name.
    pub job: &'a str,
    /// Its checkpoint storage, described (the directory).
    pub storage: &'a str,
    /// The sinks that commit output on checkpoint completion.
    pub sinks: &'a [String],
    /// What may be done when the restore point is unusable.
    pub policy: CorruptCheckpointPolicy,
}

/// Decides where a job starts, from how it was asked to start and its previous record.
/// `checkpoints_on_disk` are the checkpoints found with metadata (used only when the record
/// is missing or unreadable).
pub fn plan_start(
    context: RecoveryContext<'_>,
    mode: &StartMode,
    previous: &PreviousRecord,
    checkpoints_on_disk: &[RecordedCheckpoint],
) -> Result<StartPlan, RecoveryError> {
    let RecoveryContext {
        job,
        storage,
        sinks,
        policy,
    } = context;
    let lenient = sinks.is_empty() || policy == CorruptCheckpointPolicy::AllowDuplicates;
    let newest_on_disk = || {
        let mut candidates = checkpoints_on_disk.to_vec();
        candidates.sort_by_key(|c| std::cmp::Reverse(c.id));
        candidates
    };
    match mode {
        StartMode::Fresh => {
            // Resuming is never silent and never the default (as in Flink, where a job is
            // resumed only when asked to): over an earlier run, the user chooses.
            let found = match previous {
                PreviousRecord::Found(record) if record.has_earlier_run() => {
                    Some(record.describe())
                }
                PreviousRecord::Unreadable(problem) => {
                    Some(format!("a job record that cannot be read ({problem})"))
                }
                PreviousRecord::None if !checkpoints_on_disk.is_empty() => {
                    let mut ids: Vec<u64> = checkpoints_on_disk.iter().map(|c| c.id).collect();
                    ids.sort_unstable();
                    Some(format!("checkpoints {ids:?} but no job record"))
                }
                _ => None,
            };
            let Some(found) = found else {
                return Ok(StartPlan::Fresh { note: None });
            };
            if !lenient {
                return Err(RecoveryError::EarlierRun {
                    job: job.into(),
                    storage: storage.into(),
                    found,
                    consequence: format!(
                        "commit that run's output a second time through sinks {}",
                        sink_list(sinks)
                    ),
                });
            }
            Ok(StartPlan::Fresh {
                note: Some(format!(
                    "job `{job}` ran here before (`{storage}` holds {found}); it starts from \
                     empty state, as it was not asked to resume{}",
                    if sinks.is_empty() {
                        " (its sinks are idempotent or at-least-once)".to_string()
                    } else {
                        format!(
                            " and `{FALLBACK_OPTION}: allow-duplicates` allows: sinks {} commit \
                             its output a second time",
                            sink_list(sinks)
                        )
                    }
                )),
            })
        }
        StartMode::RestoreFrom { path, id } => {
            let notified_through = match previous {
                PreviousRecord::Found(record) => record.notified_through,
                // What was committed is unknown: restoring anything could repeat it.
                PreviousRecord::Unreadable(problem) if !lenient => {
                    return Err(RecoveryError::RecordUnreadable {
                        job: job.into(),
                        problem: problem.clone(),
                        sinks: sinks.to_vec(),
                    })
                }
                _ => 0,
            };
            let candidate = RecordedCheckpoint::new(
                *id,
                crate::runtime::stream_element::SnapshotType::Savepoint,
                path.clone(),
            );
            if *id >= notified_through {
                return Ok(StartPlan::Restore {
                    candidates: vec![candidate],
                    note: None,
                });
            }
            if !lenient {
                return Err(RecoveryError::OlderThanCommitted {
                    job: job.into(),
                    path: path.clone(),
                    checkpoint_id: *id,
                    notified_through,
                    sinks: sinks.to_vec(),
                });
            }
            Ok(StartPlan::Restore {
                candidates: vec![candidate],
                note: Some(replay_note(job, Some(*id), notified_through, sinks)),
            })
        }
        StartMode::Resume => match previous {
            PreviousRecord::Unreadable(problem) => {
                if !lenient {
                    return Err(RecoveryError::RecordUnreadable {
                        job: job.into(),
                        problem: problem.clone(),
                        sinks: sinks.to_vec(),
                    });
                }
                Ok(StartPlan::Restore {
                    candidates: newest_on_disk(),
                    note: Some(format!(
                        "job `{job}`: the job record is unreadable ({problem}); resuming from \
                         the newest checkpoint on disk, as allowed"
                    )),
                })
            }
            PreviousRecord::None if checkpoints_on_disk.is_empty() => {
                Ok(StartPlan::Fresh { note: None })
            }
            PreviousRecord::None => {
                if !lenient {
                    let mut checkpoints: Vec<u64> =
                        checkpoints_on_disk.iter().map(|c| c.id).collect();
                    checkpoints.sort_unstable();
                    return Err(RecoveryError::NoRecord {
                        job: job.into(),
                        storage: storage.into(),
                        checkpoints,
                        sinks: sinks.to_vec(),
                    });
                }
                Ok(StartPlan::Restore {
                    candidates: newest_on_disk(),
                    note: Some(format!(
                        "job `{job}` has checkpoints but no job record; resuming from the newest \
                         checkpoint on disk, as allowed"
                    )),
                })
            }
            PreviousRecord::Found(record) => {
                if let RecordedStatus::Finished { .. } = record.status {
                    return Ok(StartPlan::AlreadyFinished);
                }
                if !record.completed.is_empty() {
                    let mut candidates = record.completed.clone();
                    candidates.reverse();
                    return Ok(StartPlan::Restore {
                        candidates,
                        note: None,
                    });
                }
                if record.notified_through == 0 {
                    return Ok(StartPlan::Fresh { note: None });
                }
                let why = match record.status {
                    RecordedStatus::Cancelled {
                        checkpoints_retained: false,
                    } => "the job was cancelled and its checkpoints deleted".to_string(),
                    _ => "its job record names no checkpoint to restore".to_string(),
                };
                if !lenient {
                    return Err(RecoveryError::NothingToRestore {
                        job: job.into(),
                        notified_through: record.notified_through,
                        why,
                        sinks: sinks.to_vec(),
                    });
                }
                Ok(StartPlan::Fresh {
                    note: Some(replay_note(job, None, record.notified_through, sinks)),
                })
            }
        },
    }
}

/// Why metadata read from the location of restore point `expected` is not that restore point,
/// if it is not: its checkpoint id differs from the one the record names or the one its
/// directory is named after (an older checkpoint copied over a newer one), or its epoch from
/// the one the record names (a copy left by another incarnation of the job). A restore
/// point that is not provably the one recorded is unusable, like a damaged one.
pub fn metadata_mismatch(
    expected: &RecordedCheckpoint,
    metadata_id: u64,
    metadata_epoch: u64,
) -> Option<String> {
    let directory = expected
        .location
        .rsplit(['/', '\\'])
        .next()
        .and_then(crate::checkpoint::storage::parse_any_location);
    if metadata_id != expected.id {
        return Some(format!(
            "its metadata is checkpoint {metadata_id}'s, not checkpoint {}'s (a checkpoint \
             copied over another?)",
            expected.id
        ));
    }
    if let Some(named) = directory.filter(|named| *named != metadata_id) {
        return Some(format!(
            "its metadata is checkpoint {metadata_id}'s, but its directory is named after \
             checkpoint {named}"
        ));
    }
    if expected.epoch != 0 && metadata_epoch != expected.epoch {
        return Some(format!(
            "its metadata was written by epoch {metadata_epoch}, but the job record says epoch \
             {} completed it (a stale copy?)",
            expected.epoch
        ));
    }
    None
}

fn replay_note(job: &str, from: Option<u64>, notified_through: u64, sinks: &[String]) -> String {
    if sinks.is_empty() {
        format!(
            "job `{job}` starts from {}, replaying {} (its sinks are idempotent or at-least-once, \
             so this is safe)",
            fallback_target(from),
            range_after(from, notified_through)
        )
    } else {
        format!(
            "job `{job}` starts from {} as `{FALLBACK_OPTION}: allow-duplicates` allows: the \
             output of {} is committed a second time into sinks {}",
            fallback_target(from),
            range_after(from, notified_through),
            sink_list(sinks)
        )
    }
}

/// The restore point `unusable` (newest first among the candidates) cannot be read: decides
/// whether recovery may fall back to `fallback` (the next older candidate; `None`: empty
/// state). `Ok` carries the warning to log.
pub fn on_unusable(
    context: RecoveryContext<'_>,
    unusable: &RecordedCheckpoint,
    problem: &str,
    fallback: Option<&RecordedCheckpoint>,
) -> Result<String, RecoveryError> {
    let RecoveryContext {
        job, sinks, policy, ..
    } = context;
    let fallback_id = fallback.map(|f| f.id);
    if sinks.is_empty() || policy == CorruptCheckpointPolicy::AllowDuplicates {
        return Ok(format!(
            "checkpoint {} of job `{job}` is unusable ({problem}); {}",
            unusable.id,
            replay_note(job, fallback_id, unusable.id, sinks)
        ));
    }
    Err(RecoveryError::Unusable {
        job: job.into(),
        checkpoint_id: unusable.id,
        problem: problem.into(),
        fallback: fallback_id,
        sinks: sinks.to_vec(),
    })
}

#[cfg(test)]
mod tests;
