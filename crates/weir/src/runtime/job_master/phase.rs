//! Where a job is in its life: the JobManager's state machine. Every decision that depends
//! on the phase is a pure function of it, tested without running anything.
//!
//! ```text
//!  WaitingForResources ──> Deploying ──> Running ──> Finishing ────> (finished)
//!        ^                  │  │ ^─── StoppingWithSavepoint ──> Stopping ──> (stopped)
//!        │                  │  └────> Cancelling ─────────────> (cancelled)
//!        └── Restarting <── Failing ──────────────────────────> (failed)
//! ```
//!
//! The job's end, whichever it is, passes through Ended while it is recorded.
//!
//! A run's tasks exist from Running through Failing; Restarting and WaitingForResources
//! have none.

use std::time::Instant;

use crate::error::WeirError;
use crate::runtime::stream_element::StopMode;

/// The phase of a job (Flink's `JobStatus`, with the sub-states that matter to decisions).
#[derive(Debug)]
pub enum JobPhase {
    /// No run: waiting for the executors to offer enough slots, since `since`.
    WaitingForResources {
        /// When the wait began.
        since: Instant,
    },
    /// The run's tasks are being deployed on the executors, since `since`; no checkpoint
    /// is taken until they all are.
    Deploying {
        /// When the deployment began.
        since: Instant,
    },
    /// Tasks run; periodic checkpoints are taken.
    Running,
    /// Every source has read all its input: the final checkpoint is in flight (`Some`), or
    /// waits for a pending checkpoint to finish first (`None`).
    Finishing {
        /// The final checkpoint, once triggered.
        final_checkpoint: Option<u64>,
    },
    /// A stop-with-savepoint's savepoint is in flight; the job runs on if it fails (without
    /// drain).
    StoppingWithSavepoint {
        /// The savepoint.
        savepoint: u64,
        /// With or without drain.
        mode: StopMode,
    },
    /// The savepoint of a stop completed: the tasks end after its notice.
    Stopping {
        /// The savepoint.
        savepoint: u64,
        /// Where it is.
        location: String,
    },
    /// The tasks are being cancelled on the client's request.
    Cancelling,
    /// Something failed: the tasks are being cancelled; the restart strategy decides next.
    Failing {
        /// What failed the job, when the job (not a task) knows it.
        error: Option<WeirError>,
    },
    /// Waiting out the restart back-off; the next run starts at `due`, from the restore
    /// point being resolved (`restore_ready`: resolved).
    Restarting {
        /// When the next run may start.
        due: Instant,
        /// Whether the restore point is resolved.
        restore_ready: bool,
    },
    /// The job is over (finished, stopped, cancelled or failed for good); its end is being
    /// recorded.
    Ended,
}

impl JobPhase {
    /// Whether the run's tasks exist (deployed, not yet all ended).
    pub fn has_tasks(&self) -> bool {
        !matches!(
            self,
            JobPhase::WaitingForResources { .. } | JobPhase::Restarting { .. } | JobPhase::Ended
        )
    }

    /// Whether the tasks are being torn down: no checkpoint starts, and a task's failure
    /// that only follows from it is no news.
    pub fn is_stopping(&self) -> bool {
        matches!(
            self,
            JobPhase::Stopping { .. } | JobPhase::Cancelling | JobPhase::Failing { .. }
        )
    }

    /// Whether a periodic checkpoint may start (given that no operator has finished).
    pub fn may_trigger_periodic(&self) -> bool {
        // Nothing may complete after a stop-with-savepoint's savepoint (the job ends there),
        // nor after the final checkpoint.
        matches!(self, JobPhase::Running)
    }

    /// Why a savepoint (`stop`: of a stop-with-savepoint) cannot be taken now, if not.
    pub fn refuses_savepoint(&self, stop: bool) -> Option<String> {
        match self {
            JobPhase::Running => None,
            JobPhase::Finishing { .. } if stop => Some(
                "the job has read all its input and is finishing; it cannot be stopped with a savepoint".into(),
            ),
            JobPhase::Finishing { .. } => Some(
                "the job has read all its input and is finishing; no more checkpoints can be taken".into(),
            ),
            JobPhase::StoppingWithSavepoint { savepoint, .. } if stop => {
                Some(format!("the job is already stopping with savepoint {savepoint}"))
            }
            JobPhase::StoppingWithSavepoint { savepoint, .. } => Some(format!(
                "the job is stopping with savepoint {savepoint}; no more checkpoints can be taken"
            )),
            JobPhase::WaitingForResources { .. } | JobPhase::Restarting { .. } => Some(
                "the job is restarting (no tasks run); try again once it runs".into(),
            ),
            JobPhase::Deploying { .. } => Some(
                "the job's tasks are being deployed; try again once it runs".into(),
            ),
            JobPhase::Ended => Some("the job has ended".into()),
            JobPhase::Stopping { .. } | JobPhase::Cancelling | JobPhase::Failing { .. } => Some(
                "an operator has finished or the job is stopping; no more checkpoints can be taken"
                    .into(),
            ),
        }
    }

    /// The phase's name, for logs and status.
    pub fn name(&self) -> &'static str {
        match self {
            JobPhase::WaitingForResources { .. } => "waiting for resources",
            JobPhase::Deploying { .. } => "deploying",
            JobPhase::Running => "running",
            JobPhase::Finishing { .. } => "finishing",
            JobPhase::StoppingWithSavepoint { .. } => "stopping with a savepoint",
            JobPhase::Stopping { .. } => "stopping",
            JobPhase::Cancelling => "cancelling",
            JobPhase::Failing { .. } => "failing",
            JobPhase::Restarting { .. } => "restarting",
            JobPhase::Ended => "ended",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_running_job_takes_periodic_checkpoints_and_savepoints() {
        let now = Instant::now();
        let phases = [
            JobPhase::WaitingForResources { since: now },
            JobPhase::Running,
            JobPhase::Finishing {
                final_checkpoint: Some(3),
            },
            JobPhase::StoppingWithSavepoint {
                savepoint: 4,
                mode: StopMode::NoDrain,
            },
            JobPhase::Stopping {
                savepoint: 4,
                location: "x".into(),
            },
            JobPhase::Cancelling,
            JobPhase::Failing { error: None },
            JobPhase::Restarting {
                due: now,
                restore_ready: false,
            },
            JobPhase::Ended,
            JobPhase::Deploying { since: now },
        ];
        for phase in &phases {
            let running = matches!(phase, JobPhase::Running);
            assert_eq!(phase.may_trigger_periodic(), running, "{}", phase.name());
            assert_eq!(
                phase.refuses_savepoint(false).is_none(),
                running,
                "{}",
                phase.name()
            );
            assert_eq!(
                phase.refuses_savepoint(true).is_none(),
                running,
                "{}",
                phase.name()
            );
        }
        assert!(phases[4].is_stopping() && phases[5].is_stopping() && phases[6].is_stopping());
        assert!(!phases[1].is_stopping() && !phases[3].is_stopping());
        assert!(!phases[0].has_tasks() && !phases[7].has_tasks() && phases[6].has_tasks());
        assert!(phases[9].has_tasks() && !phases[9].is_stopping());
        let refusal = phases[3].refuses_savepoint(true).unwrap();
        assert!(
            refusal.contains("already stopping with savepoint 4"),
            "{refusal}"
        );
    }
}
