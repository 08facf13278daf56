//! Checkpoints and savepoints from the job manager's side: triggering them at the sources,
//! collecting acknowledgements, and completing them in the order recovery relies on —
//! metadata, then the job record (both on the storage worker), then the completion notices
//! — or aborting them.

use std::time::Instant;

use crossbeam_channel::Sender;

use super::store_io::{FinalizeOutcome, InitFailure, StoreReply};
use super::{Finalizing, JobMaster, JobPhase};
use crate::checkpoint::config::CheckpointStorageConfig;
use crate::checkpoint::coordinator::{AckOutcome, Acknowledgement, Participant, PendingCheckpoint};
use crate::checkpoint::savepoint::Savepoint;
use crate::error::WeirError;
use crate::runtime::snapshot::CheckpointNotification;
use crate::runtime::source_task::CoordinatorControl;
use crate::runtime::stream_element::{SnapshotType, StopMode};

/// Who asked for a checkpoint, and so what it is for.
pub(super) enum Requester {
    /// The interval elapsed.
    Periodic,
    /// Every source has read all its input: the final checkpoint.
    Final,
    /// The client, for a savepoint; answered with it.
    Savepoint(Sender<Result<Savepoint, WeirError>>),
    /// The client, for a stop-with-savepoint's savepoint; answered with it.
    Stop(StopMode, Sender<Result<Savepoint, WeirError>>),
}

impl Requester {
    fn kind(&self) -> SnapshotType {
        match self {
            Requester::Periodic | Requester::Final => SnapshotType::Checkpoint,
            Requester::Savepoint(_) | Requester::Stop(..) => SnapshotType::Savepoint,
        }
    }
}

/// A checkpoint whose location the storage worker is creating.
pub(super) struct Preparing {
    /// Its id (the coordinator's next).
    pub(super) id: u64,
    pub(super) requester: Requester,
    /// The run it is for.
    pub(super) run: u64,
}

impl JobMaster {
    /// Whether a periodic checkpoint may start now.
    pub(super) fn may_trigger_periodic(&self) -> bool {
        self.phase.may_trigger_periodic()
            && self.finalizing.is_empty()
            && self.preparing.is_none()
            && self
                .attempt
                .as_ref()
                .is_some_and(|a| !a.checkpoints_disabled)
    }

    /// Whether the job takes a final checkpoint when its input ends.
    fn takes_final_checkpoint(&self) -> bool {
        self.storage.is_some() && self.job.config.checkpoint.interval.is_some()
    }

    /// Aborts every pending checkpoint (the run is failing or ending).
    pub(super) fn fail_pending(&mut self, reason: &str) {
        let now = self.clock.now();
        for pending in self.coordinator.abort_all(reason, now) {
            self.discard_pending(&pending);
            if let Some(waiter) = self.savepoint_waiters.remove(&pending.id()) {
                let _ = waiter.send(Err(WeirError::InvalidRequest(format!(
                    "savepoint {} failed: {reason}",
                    pending.id()
                ))));
            }
        }
    }

    /// Deletes a location (on the worker; best effort, a leftover goes at the next start).
    pub(super) fn discard(&mut self, id: u64, location: &str) {
        self.discard_with_uploads(id, location, Vec::new());
    }

    /// Deletes what a checkpoint that will not complete wrote: its location, and the shared
    /// files its acknowledgements uploaded.
    pub(super) fn discard_pending(&mut self, pending: &PendingCheckpoint) {
        self.discard_with_uploads(
            pending.barrier.checkpoint_id,
            &pending.location,
            pending.shared_uploads(),
        );
    }

    fn discard_with_uploads(&mut self, id: u64, location: &str, shared_uploads: Vec<String>) {
        let location = location.to_string();
        self.io.submit(move |context| {
            if let Some(store) = context.store.as_mut() {
                store.discard_unfinished(id, &location);
                store.discard_shared_uploads(&shared_uploads);
            }
            None
        });
    }

    /// Starts a checkpoint or savepoint for `requester`, if the phase allows it: the
    /// storage worker creates its location, and [`on_location_ready`](Self::on_location_ready)
    /// injects its barrier. Refused at once (and the requester told) when it cannot be taken.
    pub(super) fn request_checkpoint(&mut self, requester: Requester) {
        if let Err(error) = self.check_checkpoint(&requester) {
            self.refuse(requester, error);
            return;
        }
        let kind = requester.kind();
        let Some(storage) = self.storage.clone() else {
            return;
        };
        // The id is the coordinator's next; nothing else starts until this one has
        // (`preparing` holds back every other trigger), so it stays the next.
        let id = self.coordinator.next_id();
        self.preparing = Some(Preparing {
            id,
            requester,
            run: self.attempt.as_ref().map_or(0, |a| a.number),
        });
        self.io.submit(move |context| {
            let result = storage.init_location(id, kind).map_err(|error| {
                // The id taken by someone else means another process writes here: if it
                // holds the job now, this one stops.
                let fenced = context
                    .store
                    .as_ref()
                    .and_then(|s| s.fencing().check().err());
                InitFailure {
                    error: error.into(),
                    fenced,
                }
            });
            Some(StoreReply::LocationReady { id, result })
        });
    }

    /// Why `requester`'s checkpoint cannot be taken now, if not.
    fn check_checkpoint(&self, requester: &Requester) -> Result<(), WeirError> {
        let kind = requester.kind();
        let stop = matches!(requester, Requester::Stop(..));
        if kind == SnapshotType::Savepoint {
            if let Some(reason) = self.phase.refuses_savepoint(stop) {
                return Err(WeirError::InvalidRequest(reason));
            }
        }
        // A job without a storage is one without periodic checkpoints whose storage is in
        // memory: only a savepoint can be asked of it, and it has nowhere to go.
        let has_storage = self.storage.is_some()
            && (kind == SnapshotType::Checkpoint
                || self.job.config.checkpoint.storage != CheckpointStorageConfig::Memory);
        if !has_storage {
            return Err(WeirError::InvalidRequest(
                "savepoints need a directory: the checkpoint storage is in memory, so a savepoint \
                 would be lost with this process; set `CheckpointStorageConfig::directory(dir)`"
                    .into(),
            ));
        }
        match requester {
            Requester::Periodic if !self.phase.may_trigger_periodic() => {
                return Err(WeirError::InvalidRequest(format!(
                    "the job is {}; periodic checkpoints have stopped",
                    self.phase.name()
                )))
            }
            Requester::Final
                if !matches!(
                    self.phase,
                    JobPhase::Finishing {
                        final_checkpoint: None
                    }
                ) =>
            {
                return Err(WeirError::InvalidRequest(format!(
                    "the job is {}, not finishing",
                    self.phase.name()
                )))
            }
            _ => {}
        }
        if self.phase.is_stopping() || self.attempt.as_ref().is_none_or(|a| a.checkpoints_disabled)
        {
            return Err(WeirError::InvalidRequest(
                "an operator has finished or the job is stopping; no more checkpoints can be taken"
                    .into(),
            ));
        }
        Ok(())
    }

    /// A checkpoint that could not start: its requester hears why.
    fn refuse(&mut self, requester: Requester, error: WeirError) {
        match requester {
            Requester::Savepoint(reply) | Requester::Stop(_, reply) => {
                let _ = reply.send(Err(error));
            }
            // A run that fails already cannot take its final checkpoint: the failure's cause,
            // not the checkpoint it prevents, is what the restart strategy and the user see.
            Requester::Final
                if matches!(self.phase, JobPhase::Failing { .. } | JobPhase::Cancelling) => {}
            Requester::Final => self.fail_run(WeirError::InvalidRequest(format!(
                "cannot take the final checkpoint: {error}"
            ))),
            Requester::Periodic => {
                let reason = format!("cannot trigger checkpoint: {error}");
                tracing::warn!("{reason}");
                self.check_tolerance(&reason);
            }
        }
    }

    /// The worker created (or failed to create) checkpoint `id`'s location: the barrier
    /// goes to the sources, if the checkpoint may still be taken.
    pub(super) fn on_location_ready(&mut self, id: u64, result: Result<String, InitFailure>) {
        let Some(Preparing { requester, run, .. }) = self.preparing.take().filter(|p| p.id == id)
        else {
            return;
        };
        let kind = requester.kind();
        let location = match result {
            Ok(location) => location,
            Err(InitFailure { error, fenced }) => {
                self.coordinator.trigger_failed(
                    kind,
                    &format!("cannot create the location: {error}"),
                    self.clock.now(),
                    self.clock.unix_millis(),
                );
                match fenced {
                    Some(fenced) => {
                        if let Requester::Savepoint(reply) | Requester::Stop(_, reply) = requester {
                            let _ = reply.send(Err(WeirError::Fenced(fenced.clone())));
                        }
                        self.fail_run(fenced.into());
                    }
                    None => self.refuse(requester, error),
                }
                self.run_queued_commands();
                return;
            }
        };
        // The run may have failed or ended, or the phase changed, meanwhile.
        let same_run = self.attempt.as_ref().is_some_and(|a| a.number == run);
        let still_possible = if same_run {
            self.check_checkpoint(&requester)
        } else {
            Err(WeirError::InvalidRequest(
                "the run it was for has ended".into(),
            ))
        };
        if let Err(error) = still_possible {
            self.coordinator.skip(id);
            self.discard(id, &location);
            match requester {
                // Overtaken by the job's course (its input ended, it fails): no news.
                Requester::Periodic => {
                    tracing::debug!(checkpoint = id, %error, "periodic checkpoint not started")
                }
                requester => self.refuse(requester, error),
            }
            self.run_queued_commands();
            return;
        }
        let participants = self
            .attempt
            .as_ref()
            .map(|a| a.participants())
            .unwrap_or_default();
        let now = self.clock.now();
        let mut barrier =
            self.coordinator
                .start(now, self.clock.unix_millis(), kind, participants, location);
        match &requester {
            Requester::Final => barrier = self.coordinator.mark_final(id).unwrap_or(barrier),
            Requester::Stop(mode, _) => {
                barrier = self.coordinator.mark_stop(id, *mode).unwrap_or(barrier)
            }
            Requester::Periodic | Requester::Savepoint(_) => {}
        }
        tracing::debug!(checkpoint = id, ?kind, "triggering");
        if let Some(attempt) = &self.attempt {
            for (_, control) in &attempt.coordinator_controls {
                let _ = control.send(CoordinatorControl::Trigger(barrier));
            }
        }
        match requester {
            Requester::Periodic => {}
            Requester::Final => {
                tracing::info!(job = %self.job_name(), checkpoint = id, "all input read; taking the final checkpoint");
                self.phase = JobPhase::Finishing {
                    final_checkpoint: Some(id),
                };
            }
            Requester::Savepoint(reply) => {
                self.savepoint_waiters.insert(id, reply);
            }
            Requester::Stop(mode, reply) => {
                tracing::info!(job = %self.job_name(), savepoint = id, ?mode, "stopping with a savepoint");
                self.phase = JobPhase::StoppingWithSavepoint {
                    savepoint: id,
                    mode,
                };
                self.savepoint_waiters.insert(id, reply);
            }
        }
        self.run_queued_commands();
    }

    pub(super) fn on_ack(&mut self, id: u64, who: Participant, ack: Acknowledgement) {
        let uploads = ack.shared_uploads(id);
        match self.coordinator.acknowledge(id, who, ack) {
            AckOutcome::AllAcknowledged(pending) => self.finalize(*pending),
            AckOutcome::Subsumed { pending, by } => {
                tracing::info!(
                    checkpoint = id,
                    by,
                    "checkpoint subsumed by a newer one that was acknowledged first"
                );
                self.notify(CheckpointNotification::Aborted(id));
                self.discard_pending(&pending);
            }
            // A late acknowledgement of a checkpoint that ended: what it uploaded is unused.
            AckOutcome::Unknown if !uploads.is_empty() => {
                self.io.submit(move |context| {
                    if let Some(store) = &context.store {
                        store.discard_shared_uploads(&uploads);
                    }
                    None
                });
            }
            AckOutcome::Unknown | AckOutcome::Pending => {}
        }
    }

    pub(super) fn abort_checkpoint(&mut self, id: u64, reason: &str, count_as_failure: bool) {
        let now = self.clock.now();
        let Some(pending) = self.coordinator.abort(id, reason, count_as_failure, now) else {
            return;
        };
        tracing::warn!(checkpoint = id, %reason, "checkpoint aborted");
        self.notify(CheckpointNotification::Aborted(id));
        self.discard_pending(&pending);
        self.answer_savepoint(id, Err(reason.to_string()));
        self.check_tolerance(reason);
        self.check_final(id, reason);
    }

    /// The final checkpoint failed: the sinks' last transactions cannot be committed, so the
    /// job fails and recovers from its latest completed checkpoint.
    fn check_final(&mut self, id: u64, reason: &str) {
        if matches!(self.phase, JobPhase::Finishing { final_checkpoint: Some(f) } if f == id) {
            let error = WeirError::InvalidRequest(format!(
                "the final checkpoint {id} of job `{}` failed: {reason}",
                self.job_name()
            ));
            self.fail_run(error);
        }
    }

    /// Every source has read all its input: take the final checkpoint (after which the
    /// sources end and every task finishes once it completes), as soon as no other
    /// checkpoint is in flight — so that its barrier never overtakes the previous
    /// checkpoint's completion notice (a sink's pre-commit may need the previous
    /// transaction committed).
    pub(super) fn input_ended(&mut self) {
        self.phase = JobPhase::Finishing {
            final_checkpoint: None,
        };
        self.trigger_final_when_idle();
    }

    fn trigger_final_when_idle(&mut self) {
        let idle = self.coordinator.pending_ids().is_empty()
            && self.finalizing.is_empty()
            && self.preparing.is_none();
        if matches!(
            self.phase,
            JobPhase::Finishing {
                final_checkpoint: None
            }
        ) && self.takes_final_checkpoint()
            && idle
        {
            self.request_checkpoint(Requester::Final);
        }
    }

    fn check_tolerance(&mut self, reason: &str) {
        if self.coordinator.failures_exceed_tolerance() {
            let error = WeirError::InvalidRequest(format!(
                "job `{}` exceeded the tolerable checkpoint failures ({} in a row); last: {reason}",
                self.job_name(),
                self.coordinator.consecutive_failures()
            ));
            self.fail_run(error);
        }
    }

    /// Answers whoever waits for savepoint `id`; for a stop-with-savepoint, completes the
    /// stop or (without drain) returns to running.
    pub(super) fn answer_savepoint(&mut self, id: u64, result: Result<String, String>) {
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
        let JobPhase::StoppingWithSavepoint { savepoint, mode } = self.phase else {
            return;
        };
        if savepoint != id {
            return;
        }
        match result {
            Ok(location) => {
                tracing::info!(job = %self.job_name(), savepoint = %location, "stopping job after savepoint");
                self.phase = JobPhase::Stopping {
                    savepoint,
                    location,
                };
                // Tasks wait at the savepoint's barrier for its completion notice, commit
                // what it covers (Flink's synchronous savepoint) and end; the stop after it
                // only reaches a task that did not end by itself.
                self.notify(CheckpointNotification::Complete(savepoint));
                if let Some(attempt) = self.attempt.as_mut() {
                    attempt.stop_tasks();
                }
            }
            // With drain every operator has ended its input already and cannot take records
            // again: the job fails over to its latest restore point.
            Err(reason) if mode == StopMode::Drain => {
                let error = WeirError::InvalidRequest(format!(
                    "stop-with-savepoint --drain of job `{}` failed: savepoint {savepoint}: {reason}",
                    self.job_name()
                ));
                self.fail_run(error);
            }
            // Without drain the sources resume reading at the abort notice and the job runs
            // on — into its final checkpoint, if its input ended meanwhile.
            Err(_) => {
                self.phase = JobPhase::Running;
                if self
                    .attempt
                    .as_ref()
                    .is_some_and(|a| a.sources_all_at_end())
                {
                    self.input_ended();
                }
            }
        }
    }

    /// Every participant acknowledged: the storage worker writes the metadata, then the job
    /// record; the completion notices wait for its reply.
    fn finalize(&mut self, pending: PendingCheckpoint) {
        let id = pending.id();
        let kind = pending.barrier.snapshot_type;
        let graph = &self.job.plan.stream_graph;
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
        let recorded = kind == SnapshotType::Checkpoint
            || matches!(self.phase, JobPhase::StoppingWithSavepoint { savepoint, .. } if savepoint == id);
        if recorded {
            self.coordinator.finalizing_restore_point(id);
        }
        let location = pending.location.clone();
        let run = self.attempt.as_ref().map_or(0, |a| a.number);
        self.finalizing.insert(
            id,
            Finalizing {
                pending,
                run,
                recorded,
            },
        );
        self.io.submit(move |context| {
            let Some(store) = context.store.as_mut() else {
                return Some(StoreReply::Finalized {
                    id,
                    outcome: FinalizeOutcome::Failed {
                        error: WeirError::InvalidRequest("no checkpoint storage".into()),
                        metadata_written: false,
                    },
                });
            };
            if let Err(fenced) = store.fencing().check() {
                return Some(StoreReply::Finalized {
                    id,
                    outcome: FinalizeOutcome::Fenced(fenced),
                });
            }
            // A checkpoint referring to shared files already released must not complete.
            if let Err(error) = store.check_shared_references(&metadata) {
                return Some(StoreReply::Finalized {
                    id,
                    outcome: FinalizeOutcome::Failed {
                        error,
                        metadata_written: false,
                    },
                });
            }
            // Which step failed matters: once the metadata is durable, a failed record write
            // may still have named the checkpoint on disk, so its files must stay.
            if let Err(e) = store.storage().write_metadata(&location, &metadata) {
                return Some(StoreReply::Finalized {
                    id,
                    outcome: FinalizeOutcome::Failed {
                        error: e.into(),
                        metadata_written: false,
                    },
                });
            }
            let outcome = match recorded {
                true => match store.add_completed(&metadata, &location, retained) {
                    Ok(()) => FinalizeOutcome::Written,
                    Err(error) => FinalizeOutcome::Failed {
                        error,
                        metadata_written: true,
                    },
                },
                false => FinalizeOutcome::Written,
            };
            Some(StoreReply::Finalized { id, outcome })
        });
    }

    /// The worker completed (or failed to complete) checkpoint `id`'s storage part.
    pub(super) fn on_finalized(&mut self, id: u64, outcome: FinalizeOutcome) {
        let Some(Finalizing {
            pending,
            run,
            recorded,
        }) = self.finalizing.remove(&id)
        else {
            return;
        };
        let now: Instant = self.clock.now();
        // Notices go to the run the checkpoint belongs to; a later run restores from the
        // record instead.
        let current = self.attempt.as_ref().is_some_and(|a| a.number == run);
        let kind = pending.barrier.snapshot_type;
        match outcome {
            FinalizeOutcome::Fenced(fenced) => {
                self.coordinator
                    .finalize_failed(&pending, &fenced.to_string(), now);
                if current {
                    self.notify(CheckpointNotification::Aborted(id));
                }
                self.answer_savepoint(id, Err(fenced.to_string()));
                self.fail_run(fenced.into());
            }
            FinalizeOutcome::Failed {
                error,
                metadata_written,
            } => {
                let reason = error.to_string();
                self.coordinator.finalize_failed(&pending, &reason, now);
                tracing::warn!(checkpoint = id, %reason, "checkpoint could not be completed");
                if current {
                    self.notify(CheckpointNotification::Aborted(id));
                }
                if !(metadata_written && recorded) {
                    self.discard_pending(&pending);
                }
                self.answer_savepoint(id, Err(reason.clone()));
                if let WeirError::Fenced(fenced) = error {
                    self.fail_run(WeirError::Fenced(fenced));
                    return;
                }
                self.check_tolerance(&reason);
                self.check_final(id, &reason);
            }
            FinalizeOutcome::Written => {
                for subsumed in self.coordinator.completed(&pending, now) {
                    if current {
                        self.notify(CheckpointNotification::Aborted(subsumed.id()));
                    }
                    self.discard_pending(&subsumed);
                    self.answer_savepoint(
                        subsumed.id(),
                        Err(format!("subsumed by checkpoint {id}")),
                    );
                }
                if let Some(stats) = self.coordinator.history().recent.back() {
                    tracing::info!(job = %self.job_name(), "{stats}");
                }
                match kind {
                    SnapshotType::Checkpoint if current => {
                        self.notify(CheckpointNotification::Complete(id))
                    }
                    SnapshotType::Checkpoint => {}
                    // A savepoint has no side effects (as in Flink since 1.15): its
                    // transactions stay pending and are committed with the next checkpoint,
                    // unless this is a stop-with-savepoint, which notifies before stopping.
                    SnapshotType::Savepoint => {
                        self.answer_savepoint(id, Ok(pending.location.clone()))
                    }
                }
            }
        }
        self.trigger_final_when_idle();
    }

    /// Checkpoint timers: the final checkpoint once nothing is in flight, timeouts, and the
    /// periodic trigger.
    pub(super) fn checkpoint_timers(&mut self, now: Instant) {
        if self.phase.is_stopping() {
            return;
        }
        self.trigger_final_when_idle();
        for id in self.coordinator.expired(now) {
            let timeout = self.job.config.checkpoint.timeout;
            self.abort_checkpoint(id, &format!("expired after {timeout:?}"), true);
        }
        if self.may_trigger_periodic() && self.coordinator.should_trigger(now) {
            self.request_checkpoint(Requester::Periodic);
        }
    }
}
