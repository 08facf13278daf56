//! Which restore point a run starts from: the newest usable one of the candidates, read and
//! assigned to the job's operators, skipping unusable ones only where the recovery rules
//! allow it. Reads storage, so it runs on the storage worker (or before the loop starts).

use std::collections::BTreeSet;

use crate::checkpoint::completed_store::CompletedCheckpointStore;
use crate::checkpoint::job_record::RecordedCheckpoint;
use crate::checkpoint::recovery::CorruptCheckpointPolicy;
use crate::checkpoint::recovery::{metadata_mismatch, on_unusable, RecoveryContext};
use crate::checkpoint::restore::assign_state;
use crate::checkpoint::storage::StorageError;
use crate::error::WeirError;
use crate::graph::stream_graph::StreamGraph;
use crate::runtime::deployment::RestorePoint;
use crate::runtime::stream_element::SnapshotType;

/// What resolving needs to know of the job; plain data, so that it travels to the worker.
#[derive(Debug, Clone)]
pub struct ResolveContext {
    /// The job's name.
    pub job: String,
    /// Its checkpoint storage, described.
    pub storage: String,
    /// The sinks that commit output on checkpoint completion.
    pub sinks: Vec<String>,
    /// What may be done when a restore point is unusable.
    pub policy: CorruptCheckpointPolicy,
    /// The job's graph, to assign state to its operators.
    pub stream_graph: StreamGraph,
    /// The id of a restore point given by path: it has no fallback.
    pub explicit_restore: Option<u64>,
}

impl ResolveContext {
    /// The recovery rules' view of the job.
    pub fn recovery(&self) -> RecoveryContext<'_> {
        RecoveryContext {
            job: &self.job,
            storage: &self.storage,
            sinks: &self.sinks,
            policy: self.policy,
        }
    }
}

/// The first usable of `candidates` (newest first), excluding and extending `bad`. `None`:
/// start from empty state (no candidates, or falling back that far is allowed). What was
/// skipped, and what that means for the output, is added to `notes` for the job's result.
pub fn resolve(
    store: &CompletedCheckpointStore,
    context: &ResolveContext,
    candidates: &[RecordedCheckpoint],
    bad: &mut BTreeSet<u64>,
    notes: &mut Vec<String>,
) -> Result<Option<RestorePoint>, WeirError> {
    let candidates: Vec<&RecordedCheckpoint> =
        candidates.iter().filter(|c| !bad.contains(&c.id)).collect();
    for (i, candidate) in candidates.iter().enumerate() {
        let read = store
            .read_metadata(&candidate.location)
            .and_then(|metadata| {
                match metadata_mismatch(candidate, metadata.checkpoint_id, metadata.epoch) {
                    Some(reason) => Err(StorageError::Corrupt {
                        path: candidate.location.clone(),
                        reason,
                    }),
                    None => Ok(metadata),
                }
            });
        match read {
            Ok(metadata) => {
                let assignment = assign_state(
                    &metadata,
                    &context.stream_graph,
                    candidate.allow_non_restored_state,
                )
                .map_err(|e| WeirError::Restore {
                    checkpoint_id: candidate.id,
                    reason: e.to_string(),
                })?;
                tracing::info!(checkpoint = candidate.id, location = %candidate.location, "restoring");
                return Ok(Some(RestorePoint {
                    checkpoint_id: candidate.id,
                    location: candidate.location.clone(),
                    assignment,
                }));
            }
            // The storage did not answer: the checkpoint may be fine, and is not given up for
            // it. The start fails (a restart retries it under the restart strategy).
            Err(e @ StorageError::Io { .. }) => return Err(WeirError::Storage(e)),
            Err(e) => {
                notes.push(unusable(
                    context,
                    candidate,
                    &e.to_string(),
                    candidates.get(i + 1).copied(),
                )?);
                bad.insert(candidate.id);
            }
        }
    }
    Ok(None)
}

/// Restore point `unusable` cannot be read (`problem` names the file and the copies
/// checked): fails unless the recovery rules allow falling back to `fallback`; returns the
/// warning that says what falling back means.
pub fn unusable(
    context: &ResolveContext,
    unusable: &RecordedCheckpoint,
    problem: &str,
    fallback: Option<&RecordedCheckpoint>,
) -> Result<String, WeirError> {
    if Some(unusable.id) == context.explicit_restore && fallback.is_none() {
        return Err(WeirError::Restore {
            checkpoint_id: unusable.id,
            reason: format!("`{}` is unusable: {problem}", unusable.location),
        });
    }
    let warning = on_unusable(context.recovery(), unusable, problem, fallback)?;
    tracing::warn!("{warning}");
    Ok(warning)
}

/// The restore point of a restart: the newest recorded one that is usable.
pub fn latest(
    store: &CompletedCheckpointStore,
    context: &ResolveContext,
    bad: &mut BTreeSet<u64>,
    notes: &mut Vec<String>,
) -> Result<Option<RestorePoint>, WeirError> {
    resolve(store, context, &store.candidates(), bad, notes)
}

/// Deploying from restore point `id` at `location` found a damaged state file: the same
/// rules as for unreadable metadata decide whether an older restore point may be used.
pub fn fall_back(
    store: &CompletedCheckpointStore,
    context: &ResolveContext,
    id: u64,
    location: &str,
    problem: &str,
    bad: &mut BTreeSet<u64>,
    notes: &mut Vec<String>,
) -> Result<Option<RestorePoint>, WeirError> {
    let candidates: Vec<RecordedCheckpoint> = store
        .candidates()
        .into_iter()
        .filter(|c| !bad.contains(&c.id))
        .collect();
    let position = candidates.iter().position(|c| c.id == id);
    let damaged = RecordedCheckpoint::new(id, SnapshotType::Checkpoint, location.to_string());
    let rest = position.map_or(&[][..], |p| &candidates[p + 1..]);
    notes.push(unusable(context, &damaged, problem, rest.first())?);
    bad.insert(id);
    resolve(store, context, rest, bad, notes)
}
