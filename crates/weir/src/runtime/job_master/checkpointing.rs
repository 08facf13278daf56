//! Checkpoints and savepoints from the job manager's side: triggering them at the sources,
//! collecting acknowledgements, and completing them in the order recovery relies on —
//! metadata, then the job record, then the completion notices — or aborting them.

use std::time::Instant;

use super::attempt::Attempt;
use super::JobMaster;
use crate::checkpoint::config::CheckpointStorageConfig;
use crate::checkpoint::coordinator::{AckOutcome, Acknowledgement, Participant, PendingCheckpoint};
use crate::checkpoint::savepoint::Savepoint;
use crate::error::WeirError;
use crate::runtime::snapshot::{now_millis, CheckpointNotification};
use crate::runtime::source_task::CoordinatorControl;
use crate::runtime::stream_element::{SnapshotType, StopMode};

/// What ends with a checkpoint: the job's input (the final checkpoint), or the job by a
/// stop-with-savepoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Finality {
    /// The final checkpoint after every source has read all its input.
    Final,
    /// A stop-with-savepoint's savepoint.
    Stop(StopMode),
}

impl JobMaster {
    pub(super) fn fail_pending(&mut self, reason: &str) {
        let now = Instant::now();
        for pending in self.coordinator.abort_all(reason, now) {
            self.discard(&pending.location);
            if let Some(waiter) = self.savepoint_waiters.remove(&pending.id()) {
                let _ = waiter.send(Err(WeirError::InvalidRequest(format!(
                    "savepoint {} failed: {reason}",
                    pending.id()
                ))));
            }
        }
    }

    pub(super) fn trigger(
        &mut self,
        kind: SnapshotType,
        attempt: &Attempt,
    ) -> Result<u64, WeirError> {
        if attempt.final_checkpoint.is_some() {
            return Err(WeirError::InvalidRequest(
                "the job has read all its input and is finishing; no more checkpoints can be taken"
                    .into(),
            ));
        }
        // The sources stop at a stop-with-savepoint's barrier and take no checkpoint after
        // it until it fails: a later one could never complete, and nothing may complete after
        // the stop's savepoint anyway.
        if let Some((id, _)) = attempt.stop_savepoint {
            return Err(WeirError::InvalidRequest(format!(
                "the job is stopping with savepoint {id}; no more checkpoints can be taken"
            )));
        }
        self.start_checkpoint(kind, attempt, None)
    }

    /// Triggers the savepoint of a stop-with-savepoint: its barrier tells every source to
    /// stop (and, with drain, to end its input) right after it.
    pub(super) fn trigger_stop(
        &mut self,
        mode: StopMode,
        attempt: &Attempt,
    ) -> Result<u64, WeirError> {
        if attempt.final_checkpoint.is_some() {
            return Err(WeirError::InvalidRequest(
                "the job has read all its input and is finishing; it cannot be stopped with a savepoint"
                    .into(),
            ));
        }
        if let Some((id, _)) = attempt.stop_savepoint {
            return Err(WeirError::InvalidRequest(format!(
                "the job is already stopping with savepoint {id}"
            )));
        }
        self.start_checkpoint(SnapshotType::Savepoint, attempt, Some(Finality::Stop(mode)))
    }

    /// Starts a checkpoint or savepoint: the coordinator's bookkeeping, then the trigger to
    /// every source coordinator.
    pub(super) fn start_checkpoint(
        &mut self,
        kind: SnapshotType,
        attempt: &Attempt,
        last: Option<Finality>,
    ) -> Result<u64, WeirError> {
        // A job without a storage is one without periodic checkpoints whose storage is in
        // memory: only a savepoint can be asked of it, and it has nowhere to go.
        let storage = self.storage().cloned().filter(|_| {
            kind == SnapshotType::Checkpoint
                || self.job.config.checkpoint.storage != CheckpointStorageConfig::Memory
        });
        let Some(storage) = storage else {
            return Err(WeirError::InvalidRequest(
                "savepoints need a directory: the checkpoint storage is in memory, so a savepoint \
                 would be lost with this process; set `CheckpointStorageConfig::directory(dir)`"
                    .into(),
            ));
        };
        if attempt.checkpoints_disabled || attempt.is_stopping() {
            return Err(WeirError::InvalidRequest(
                "an operator has finished or the job is stopping; no more checkpoints can be taken"
                    .into(),
            ));
        }
        let id = self.coordinator.next_id();
        let location = match storage.init_location(id, kind) {
            Ok(location) => location,
            Err(e) => {
                self.coordinator.trigger_failed(kind, Instant::now());
                // The id taken by someone else means another process writes here: if it
                // holds the job now, this one stops.
                if let Err(fenced) = self.fencing.check() {
                    return Err(fenced.into());
                }
                return Err(e.into());
            }
        };
        let mut barrier = self.coordinator.start(
            Instant::now(),
            now_millis(),
            kind,
            attempt.participants(),
            location,
        );
        match last {
            Some(Finality::Final) => barrier = self.coordinator.mark_final(id).unwrap_or(barrier),
            Some(Finality::Stop(mode)) => {
                barrier = self.coordinator.mark_stop(id, mode).unwrap_or(barrier)
            }
            None => {}
        }
        tracing::debug!(checkpoint = id, ?kind, ?last, "triggering");
        for (_, control) in &attempt.coordinator_controls {
            let _ = control.send(CoordinatorControl::Trigger(barrier));
        }
        Ok(id)
    }

    pub(super) fn on_ack(
        &mut self,
        id: u64,
        who: Participant,
        ack: Acknowledgement,
        attempt: &mut Attempt,
    ) {
        if let AckOutcome::AllAcknowledged(pending) = self.coordinator.acknowledge(id, who, ack) {
            self.finalize(*pending, attempt);
        }
    }

    pub(super) fn abort_checkpoint(
        &mut self,
        id: u64,
        reason: &str,
        count_as_failure: bool,
        attempt: &mut Attempt,
    ) {
        let Some(pending) = self
            .coordinator
            .abort(id, reason, count_as_failure, Instant::now())
        else {
            return;
        };
        tracing::warn!(checkpoint = id, %reason, "checkpoint aborted");
        attempt.notify(CheckpointNotification::Aborted(id));
        self.discard(&pending.location);
        self.answer_savepoint(id, Err(reason.to_string()), attempt);
        self.check_tolerance(reason, attempt);
        self.check_final(id, reason, attempt);
    }

    /// The final checkpoint failed: the sinks' last transactions cannot be committed, so the
    /// job fails and recovers from its latest completed checkpoint.
    pub(super) fn check_final(&mut self, id: u64, reason: &str, attempt: &mut Attempt) {
        if attempt.final_checkpoint == Some(id) && attempt.job_error.is_none() {
            attempt.job_error = Some(WeirError::InvalidRequest(format!(
                "the final checkpoint {id} of job `{}` failed: {reason}",
                self.job_name()
            )));
            attempt.cancel_tasks();
        }
    }

    /// Every source has read all its input: take the final checkpoint, after which the
    /// sources end and every task finishes once it completes.
    pub(super) fn trigger_final(&mut self, attempt: &mut Attempt) {
        if self.store.is_none() || self.job.config.checkpoint.interval.is_none() {
            return;
        }
        match self.start_checkpoint(SnapshotType::Checkpoint, attempt, Some(Finality::Final)) {
            Ok(id) => {
                tracing::info!(job = %self.job_name(), checkpoint = id, "all input read; taking the final checkpoint");
                attempt.final_checkpoint = Some(id);
            }
            Err(e) => {
                attempt.job_error = Some(WeirError::InvalidRequest(format!(
                    "cannot take the final checkpoint: {e}"
                )));
                attempt.cancel_tasks();
            }
        }
    }

    pub(super) fn check_tolerance(&mut self, reason: &str, attempt: &mut Attempt) {
        if self.coordinator.failures_exceed_tolerance() && attempt.job_error.is_none() {
            attempt.job_error = Some(WeirError::InvalidRequest(format!(
                "job `{}` exceeded the tolerable checkpoint failures ({} in a row); last: {reason}",
                self.job_name(),
                self.coordinator.consecutive_failures()
            )));
            attempt.cancel_tasks();
        }
    }

    pub(super) fn answer_savepoint(
        &mut self,
        id: u64,
        result: Result<String, String>,
        attempt: &mut Attempt,
    ) {
        if let Some(waiter) = self.savepoint_waiters.remove(&id) {
            let _ = waiter.send(
                result
                    .clone()
                    .map(|location| Savepoint::new(id, location))
                    .map_err(|reason| {
                        WeirError::InvalidRequest(format!("savepoint {id} failed: {reason}"))
                    }),
            );
        }
        if let Some((stop, mode)) = attempt.stop_savepoint.filter(|(stop, _)| *stop == id) {
            attempt.stop_savepoint = None;
            match result {
                Ok(location) => {
                    tracing::info!(job = %self.job_name(), savepoint = %location, "stopping job after savepoint");
                    attempt.stopped_with = Some((stop, location));
                    // Tasks wait at the savepoint's barrier for its completion notice, commit
                    // what it covers (Flink's synchronous savepoint) and end; the stop after it
                    // only reaches a task that did not end by itself.
                    attempt.notify(CheckpointNotification::Complete(stop));
                    attempt.stop_tasks();
                }
                // Without drain the sources resume reading at the abort notice and the job
                // runs on. With drain every operator has ended its input already and cannot
                // take records again: the job fails over to its latest restore point.
                Err(reason) if mode == StopMode::Drain && attempt.job_error.is_none() => {
                    attempt.job_error = Some(WeirError::InvalidRequest(format!(
                        "stop-with-savepoint --drain of job `{}` failed: savepoint {stop}: {reason}",
                        self.job_name()
                    )));
                    attempt.cancel_tasks();
                }
                Err(_) => {}
            }
        }
    }

    /// This process lost its job (or cannot tell): nothing more may be committed, so the
    /// attempt fails with the reason, and the restart loop stops if the loss is final.
    pub(super) fn fenced(
        &mut self,
        error: crate::checkpoint::fencing::FencedError,
        attempt: &mut Attempt,
    ) {
        if attempt.job_error.is_none() {
            attempt.job_error = Some(error.into());
        }
        attempt.cancel_tasks();
    }

    /// Every participant acknowledged: completes the checkpoint — metadata, then the job
    /// record (before any sink hears of it, so that recovery knows what sinks may have
    /// committed), then the completion notices — or aborts it if any step fails.
    fn finalize(&mut self, pending: PendingCheckpoint, attempt: &mut Attempt) {
        let now = Instant::now();
        let id = pending.id();
        let kind = pending.barrier.snapshot_type;
        if let Err(fenced) = self.fencing.check() {
            let reason = fenced.to_string();
            self.coordinator.finalize_failed(&pending, &reason, now);
            attempt.notify(CheckpointNotification::Aborted(id));
            self.answer_savepoint(id, Err(reason), attempt);
            self.fenced(fenced, attempt);
            return;
        }
        let graph = self.job.plan.stream_graph.clone();
        let metadata = pending.to_metadata(&graph.job_name, self.fencing.epoch(), |node| {
            let n = graph.node(node);
            (
                n.effective_uid(),
                n.name.clone(),
                n.parallelism,
                n.max_parallelism,
            )
        });
        let retained = self.job.config.checkpoint.retained;
        // A stop-with-savepoint's savepoint commits output (its notice goes out before the
        // job stops), so it becomes a restore point like a checkpoint.
        let recorded = kind == SnapshotType::Checkpoint || attempt.is_stop_savepoint(id);
        // Which step failed matters: once the metadata is durable, a failed record write may
        // still have named the checkpoint on disk, so its files must stay.
        let mut metadata_written = false;
        let written = match &mut self.store {
            Some(store) => store
                .storage()
                .write_metadata(&pending.location, &metadata)
                .map_err(WeirError::from)
                .and_then(|()| {
                    metadata_written = true;
                    if recorded {
                        store.add_completed(id, kind, &pending.location, retained)
                    } else {
                        Ok(())
                    }
                }),
            None => Err(WeirError::InvalidRequest("no checkpoint storage".into())),
        };
        if let Err(error) = written {
            let reason = error.to_string();
            self.coordinator.finalize_failed(&pending, &reason, now);
            tracing::warn!(checkpoint = id, %reason, "checkpoint could not be completed");
            attempt.notify(CheckpointNotification::Aborted(id));
            if !(metadata_written && recorded) {
                self.discard(&pending.location);
            }
            self.answer_savepoint(id, Err(reason.clone()), attempt);
            if let WeirError::Fenced(fenced) = error {
                self.fenced(fenced, attempt);
                return;
            }
            self.check_tolerance(&reason, attempt);
            self.check_final(id, &reason, attempt);
            return;
        }
        for subsumed in self.coordinator.completed(&pending, now) {
            attempt.notify(CheckpointNotification::Aborted(subsumed.id()));
            self.discard(&subsumed.location);
            self.answer_savepoint(
                subsumed.id(),
                Err(format!("subsumed by checkpoint {id}")),
                attempt,
            );
        }
        if let Some(stats) = self.coordinator.history().recent.back() {
            tracing::info!(job = %graph.job_name, "{stats}");
        }
        match kind {
            SnapshotType::Checkpoint => attempt.notify(CheckpointNotification::Complete(id)),
            // A savepoint has no side effects (as in Flink since 1.15): its transactions stay
            // pending and are committed with the next checkpoint, unless this is a
            // stop-with-savepoint, which notifies before stopping.
            SnapshotType::Savepoint => {
                self.answer_savepoint(id, Ok(pending.location.clone()), attempt)
            }
        }
    }
}
