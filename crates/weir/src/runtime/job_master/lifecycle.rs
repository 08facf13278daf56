//! The job's life between runs: deploying a run once the executors offer its slots, what a
//! run's end leads to (the job's end, or a restart after the back-off from a restore point
//! the storage worker resolves), the client's commands, and recording how the job ended.

use super::attempt::AttemptEnd;
use super::checkpointing::Requester;
use super::restore_points;
use super::store_io::StoreReply;
use super::{JobCommand, JobMaster, JobPhase};
use crate::checkpoint::config::RetentionOnCancel;
use crate::checkpoint::job_record::RecordedStatus;
use crate::checkpoint::savepoint::Savepoint;
use crate::checkpoint::storage::StorageError;
use crate::config::RecordOriginTracing;
use crate::error::WeirError;
use crate::runtime::deployment::DeployError;
use crate::runtime::deployment::RestorePoint;
use crate::runtime::job_result::JobStart;
use crate::runtime::job_result::JobStatus;

/// How many times the job's end is written before it is given up.
const END_RECORD_ATTEMPTS: u32 = 4;
/// The wait before the n-th retry is n times this.
const END_RECORD_RETRY_DELAY: std::time::Duration = std::time::Duration::from_millis(50);

impl JobMaster {
    /// Slots the job needs: with slot sharing, its largest parallelism.
    fn slots_needed(&self) -> u32 {
        self.job
            .plan
            .execution_graph
            .vertices
            .iter()
            .map(|v| v.parallelism)
            .max()
            .unwrap_or(0)
    }

    /// In WaitingForResources: deploys the next run if the executors offer enough slots;
    /// fails the wait once the executors' slot timeout has passed.
    pub(super) fn try_deploy(&mut self) {
        let JobPhase::WaitingForResources { since } = self.phase else {
            return;
        };
        let needed = self.slots_needed();
        if let Some(offered) = self.executors.offered_slots() {
            if offered < needed {
                let waited = self.clock.now().saturating_duration_since(since);
                if let Some(timeout) = self.executors.slot_timeout().filter(|t| waited >= *t) {
                    let error = WeirError::InvalidRequest(format!(
                        "not enough slots: job `{}` needs {needed} (its largest parallelism), the executors offer {offered} after {timeout:?}; start more TaskManagers or give them more slots",
                        self.job_name()
                    ));
                    self.after_attempt(AttemptEnd::Failed(error));
                }
                return;
            }
        }
        let restore = self.next_restore.take().flatten();
        match self.spawn(restore.as_ref()) {
            Ok(attempt) => {
                if let Some(point) = &restore {
                    self.restored_from.push(point.checkpoint_id);
                }
                if !self.deployed_once {
                    self.deployed_once = true;
                    self.origin = self.first_origin(restore.as_ref());
                }
                tracing::info!(job = %self.job_name(), tasks = attempt.running.len(),
                    restored_from = restore.as_ref().map(|r| r.checkpoint_id), "job running");
                let deployed = attempt.run.as_ref().is_none_or(|r| r.is_deployed());
                self.attempt = Some(attempt);
                if deployed {
                    self.run_deployed();
                } else {
                    self.phase = JobPhase::Deploying {
                        since: self.clock.now(),
                    };
                }
            }
            Err(DeployError::CorruptState(problem)) => match restore {
                Some(point) => self.fall_back_from(point.checkpoint_id, point.location, problem),
                None => self.finish_failed(WeirError::Internal(format!(
                    "corrupt state without a restore point: {problem}"
                ))),
            },
            // The executors could not take the run (a TaskManager went away while it was
            // deployed): a failure like any other, for the restart strategy.
            Err(DeployError::Unavailable(error)) => self.after_attempt(AttemptEnd::Failed(error)),
            Err(DeployError::Other(error)) => self.finish_failed(error),
        }
    }

    /// Where the first deployed run started from.
    fn first_origin(&self, restore: Option<&RestorePoint>) -> JobStart {
        let Some(point) = restore else {
            return JobStart::Fresh;
        };
        let checkpoint_id = point.checkpoint_id;
        let location = crate::checkpoint::savepoint::absolute_location(point.location.clone());
        if self.resolve.explicit_restore == Some(checkpoint_id) {
            JobStart::Restored {
                checkpoint_id,
                location,
            }
        } else {
            JobStart::Resumed {
                checkpoint_id,
                location,
            }
        }
    }

    /// Every task of the run is deployed: checkpoints may start.
    pub(super) fn run_deployed(&mut self) {
        self.phase = JobPhase::Running;
        self.coordinator.reset_timer(self.clock.now());
        // A small input may have ended before the last TaskManager said it was deployed.
        if self
            .attempt
            .as_ref()
            .is_some_and(|a| a.sources_all_at_end())
        {
            self.input_ended();
        }
    }

    /// Deploying from restore point `id` at `location` found a damaged state file
    /// (`problem`): the same rules as for unreadable metadata decide whether an older
    /// restore point may be used; the worker reads them, and the next run starts from it
    /// without a back-off.
    pub(super) fn fall_back_from(&mut self, id: u64, location: String, problem: String) {
        let context = self.resolve.clone();
        let mut bad = self.bad.clone();
        let mut notes = Vec::new();
        self.resolving = true;
        self.phase = JobPhase::Restarting {
            due: self.clock.now(),
            restore_ready: false,
        };
        self.io.submit(move |store_context| {
            let result = match &store_context.store {
                Some(store) => restore_points::fall_back(
                    store, &context, id, &location, &problem, &mut bad, &mut notes,
                ),
                None => Ok(None),
            };
            Some(StoreReply::Resolved { result, bad, notes })
        });
    }

    /// A run ended (or could not start): the job ends, or restarts after the back-off.
    pub(super) fn after_attempt(&mut self, end: AttemptEnd) {
        match end {
            AttemptEnd::Finished(final_checkpoint) => self.record_end(
                RecordedStatus::Finished { final_checkpoint },
                JobStatus::Finished,
                None,
            ),
            AttemptEnd::Stopped(id, location) => self.record_end(
                RecordedStatus::Stopped {
                    savepoint: id,
                    location: location.clone(),
                },
                JobStatus::Stopped,
                Some(Savepoint::new(id, location)),
            ),
            AttemptEnd::Cancelled => self.record_cancelled(),
            AttemptEnd::CorruptState {
                id,
                location,
                problem,
            } => {
                self.fail_pending("a state file is damaged");
                self.record_exception(
                    &WeirError::Restore {
                        checkpoint_id: id,
                        reason: problem.clone(),
                    },
                    true,
                );
                self.fall_back_from(id, location, problem);
            }
            AttemptEnd::Fatal(error) => {
                self.record_exception(&error, false);
                self.finish_failed(error)
            }
            AttemptEnd::Failed(error) => {
                self.fail_pending("job failed");
                if let WeirError::Fenced(fenced) = &error {
                    // A process that lost its job must not restart it: the new holder runs it.
                    if fenced.is_final() {
                        tracing::error!(job = %self.job_name(), %error, "stopping: {fenced}");
                        self.outcome = Some(Err(error));
                        return;
                    }
                }
                let restart = self.restart.on_failure(self.clock.now());
                self.record_exception(&error, restart.is_some());
                // The next attempt says where each record was read when user code may have
                // failed: a record that fails it again is then named.
                self.trace_record_origins = match self.job.config.record_origins {
                    RecordOriginTracing::Always => true,
                    RecordOriginTracing::Never => false,
                    RecordOriginTracing::AfterUserFailure => matches!(&error,
                        WeirError::JobFailed { failure, .. } if failure.cause.may_come_from_user_code()),
                };
                // Only until the next run has read past where this one failed (`Always`:
                // to the end).
                self.tracing_window = (self.job.config.record_origins
                    == RecordOriginTracing::AfterUserFailure)
                    .then(|| super::attempt::tracing_window(self.last_run_lived));
                match restart {
                    Some(delay) => {
                        tracing::warn!(job = %self.job_name(), %error, ?delay,
                            restarts = self.restart.restarts(), "job failed; restarting");
                        self.phase = JobPhase::Restarting {
                            due: self.clock.now() + delay,
                            restore_ready: false,
                        };
                    }
                    None => {
                        tracing::error!(job = %self.job_name(), %error, "job failed; restart strategy gives up");
                        self.finish_failed(error);
                    }
                }
            }
        }
    }

    /// The back-off has passed: the worker checks that this process still holds the job and
    /// resolves the newest usable restore point (after every completion submitted before).
    pub(super) fn resolve_restart(&mut self) {
        self.resolving = true;
        let context = self.resolve.clone();
        let mut bad = self.bad.clone();
        let mut notes = Vec::new();
        self.io.submit(move |store_context| {
            let result = match &store_context.store {
                Some(store) => match store.fencing().check() {
                    // A process that lost its job while it waited to restart must not
                    // deploy: its sinks' recovery would settle the new holder's transactions.
                    Err(fenced) => Err(fenced.into()),
                    Ok(()) => restore_points::latest(store, &context, &mut bad, &mut notes),
                },
                None => Ok(None),
            };
            Some(StoreReply::Resolved { result, bad, notes })
        });
    }

    /// Runs the commands that waited for a checkpoint to start, until one starts another.
    pub(super) fn run_queued_commands(&mut self) {
        while self.preparing.is_none() {
            let Some(command) = self.queued.pop_front() else {
                return;
            };
            self.on_command(command);
        }
    }

    pub(super) fn on_store_reply(&mut self, reply: StoreReply) {
        match reply {
            StoreReply::LocationReady { id, result } => self.on_location_ready(id, result),
            StoreReply::Finalized { id, outcome } => self.on_finalized(id, outcome),
            StoreReply::Resolved { result, bad, notes } => {
                self.resolving = false;
                self.bad = bad;
                self.recovery_notes.extend(notes);
                if !matches!(self.phase, JobPhase::Restarting { .. }) {
                    // The job was cancelled or stopped while the worker resolved: its end is
                    // being recorded, and a failed resolution must not restart or fail it.
                    if let Err(error) = result {
                        tracing::debug!(%error, "restore point resolved after the job ended");
                    }
                    return;
                }
                match result {
                    Ok(restore) => {
                        self.next_restore = Some(restore);
                        if let JobPhase::Restarting { restore_ready, .. } = &mut self.phase {
                            *restore_ready = true;
                        }
                    }
                    Err(WeirError::Fenced(fenced)) if !fenced.is_final() => {
                        // The check itself failed: a failure like the run's, retried.
                        self.after_attempt(AttemptEnd::Failed(WeirError::Fenced(fenced)));
                    }
                    // The storage did not answer: retried like a failed run.
                    Err(error @ WeirError::Storage(StorageError::Io { .. })) => {
                        self.after_attempt(AttemptEnd::Failed(error));
                    }
                    Err(error) => self.outcome = Some(Err(error)),
                }
            }
            StoreReply::EndRecorded(result) => {
                if let Some(error) = self.failed.take() {
                    if let Err(e) = result {
                        tracing::warn!(error = %e, "cannot record that the job failed");
                    }
                    self.outcome = Some(Err(error));
                    return;
                }
                let Some((status, savepoint)) = self.ending.take() else {
                    return;
                };
                self.outcome = Some(match result {
                    Ok(()) => Ok(self.summarize(status, savepoint)),
                    // Finished with a final checkpoint is safe to leave unrecorded: the record
                    // still names that checkpoint, so a resumed run restores it, finds every
                    // input read and ends; only the clean-up waits. (Not without one, nor a
                    // stop's savepoint: a resume could take an older restore point.)
                    Err(e)
                        if status == JobStatus::Finished
                            && self.end_unrecorded_is_safe
                            && !matches!(e, WeirError::Fenced(_)) =>
                    {
                        tracing::warn!(error = %e, "the job finished, but its end could not be recorded: its checkpoints stay until it is resumed or they are deleted");
                        Ok(self.summarize(status, savepoint))
                    }
                    Err(e) => Err(e),
                });
            }
        }
    }

    /// Records how the job ended (before deleting what that makes unnecessary); the job's
    /// result follows the worker's reply.
    fn record_end(
        &mut self,
        recorded: RecordedStatus,
        status: JobStatus,
        savepoint: Option<Savepoint>,
    ) {
        self.phase = JobPhase::Ended;
        self.fail_pending("the job has ended");
        self.ending = Some((status, savepoint));
        self.end_unrecorded_is_safe = matches!(
            recorded,
            RecordedStatus::Finished {
                final_checkpoint: Some(_)
            }
        );
        self.submit_end(recorded);
    }

    fn record_cancelled(&mut self) {
        let retained = self.job.config.checkpoint.retention_on_cancel == RetentionOnCancel::Retain;
        self.record_end(
            RecordedStatus::Cancelled {
                checkpoints_retained: retained,
            },
            JobStatus::Cancelled,
            None,
        );
    }

    /// The job fails for good with `error` (recorded first, best effort).
    fn finish_failed(&mut self, error: WeirError) {
        self.phase = JobPhase::Ended;
        self.fail_pending("the job has ended");
        self.failed = Some(error);
        self.submit_end(RecordedStatus::Failed);
    }

    fn submit_end(&mut self, status: RecordedStatus) {
        self.io.submit(move |context| {
            let Some(store) = context.store.as_mut() else {
                return Some(StoreReply::EndRecorded(Ok(())));
            };
            // A storage that fails once (a full disk being cleaned, a flaky mount) gets a
            // few more tries before the end goes unrecorded.
            let mut result = store.record_end(status.clone());
            for attempt in 1..END_RECORD_ATTEMPTS {
                let Err(error) = &result else {
                    break;
                };
                if matches!(error, WeirError::Fenced(_)) {
                    break;
                }
                tracing::warn!(%error, attempt, "cannot record how the job ended; retrying");
                std::thread::sleep(END_RECORD_RETRY_DELAY * attempt);
                result = store.record_end(status.clone());
            }
            Some(StoreReply::EndRecorded(result))
        });
    }

    pub(super) fn on_command(&mut self, command: JobCommand) {
        match command {
            // One checkpoint starts at a time: a request while one is being started waits
            // for it (the loop runs it once its location is ready).
            JobCommand::TriggerSavepoint(reply) if self.preparing.is_some() => {
                self.queued.push_back(JobCommand::TriggerSavepoint(reply))
            }
            JobCommand::StopWithSavepoint(mode, reply) if self.preparing.is_some() => self
                .queued
                .push_back(JobCommand::StopWithSavepoint(mode, reply)),
            JobCommand::TriggerSavepoint(reply) => {
                self.request_checkpoint(Requester::Savepoint(reply))
            }
            JobCommand::StopWithSavepoint(mode, reply) => {
                self.request_checkpoint(Requester::Stop(mode, reply))
            }
            JobCommand::Cancel => {
                if matches!(self.phase, JobPhase::Ended | JobPhase::Cancelling) {
                    return;
                }
                tracing::info!(job = %self.job_name(), "cancelling job");
                self.fail_pending("job cancelled");
                if self.phase.has_tasks() {
                    self.phase = JobPhase::Cancelling;
                    if let Some(attempt) = self.attempt.as_mut() {
                        attempt.cancel_tasks();
                    }
                } else {
                    // No run: nothing to tear down (a restart waiting out its back-off).
                    self.record_cancelled();
                }
            }
            JobCommand::History(reply) => {
                let _ = reply.send(self.coordinator.history().clone());
            }
        }
    }
}
