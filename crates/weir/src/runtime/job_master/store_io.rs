//! The JobManager's storage I/O, off its loop: completing checkpoints (metadata, then the
//! job record), deleting locations, resolving restore points and recording how the job
//! ended run as tasks on one worker that owns the job's [`CompletedCheckpointStore`], and
//! report back as [`StoreReply`] events. One worker, in submission order: a checkpoint's
//! record is written before a later checkpoint's, and a restart resolves its restore point
//! only after every completion submitted before it.
//!
//! Unit tests run the tasks inline (at submission, on the loop's thread) for determinism.

use std::collections::BTreeSet;

use crossbeam_channel::{Receiver, Sender};

use crate::checkpoint::completed_store::CompletedCheckpointStore;
use crate::checkpoint::fencing::FencedError;
use crate::error::WeirError;
use crate::runtime::deployment::RestorePoint;

/// What the worker owns.
pub struct StoreContext {
    /// The job's durable state; `None` for a job without checkpoint storage.
    pub store: Option<CompletedCheckpointStore>,
}

/// How completing a checkpoint's storage part went.
#[derive(Debug)]
pub enum FinalizeOutcome {
    /// Metadata durable, and recorded as a restore point if it is one.
    Written,
    /// It failed; `metadata_written`: the metadata is durable (so, if the checkpoint is a
    /// restore point, the record may name it and its files must stay).
    Failed {
        /// What failed.
        error: WeirError,
        /// Whether the metadata was written.
        metadata_written: bool,
    },
    /// This process lost the job: nothing was written.
    Fenced(FencedError),
}

/// Why a checkpoint's location could not be created.
#[derive(Debug)]
pub struct InitFailure {
    /// The storage's error.
    pub error: WeirError,
    /// Set when the reason is that this process lost the job.
    pub fenced: Option<FencedError>,
}

/// A worker's report to the loop.
#[derive(Debug)]
pub enum StoreReply {
    /// Checkpoint `id`'s location, created (or not).
    LocationReady {
        /// The checkpoint.
        id: u64,
        /// Its location.
        result: Result<String, InitFailure>,
    },
    /// Checkpoint `id`'s metadata and record.
    Finalized {
        /// The checkpoint.
        id: u64,
        /// How it went.
        outcome: FinalizeOutcome,
    },
    /// The restore point of the next run, and the ids found unusable on the way.
    Resolved {
        /// The restore point (`None`: empty state), or why the job cannot restart.
        result: Result<Option<RestorePoint>, WeirError>,
        /// Restore points found unusable.
        bad: BTreeSet<u64>,
        /// What skipping them means, for the job's result.
        notes: Vec<String>,
    },
    /// The job's end is recorded (or could not be).
    EndRecorded(Result<(), WeirError>),
}

/// A unit of storage work.
pub type StoreTask = Box<dyn FnOnce(&mut StoreContext) -> Option<StoreReply> + Send>;

enum Mode {
    Worker(
        Option<Sender<StoreTask>>,
        Option<std::thread::JoinHandle<()>>,
    ),
    #[cfg(test)]
    Inline(Box<StoreContext>, Sender<StoreReply>),
}

/// Runs storage tasks and delivers their replies.
pub struct StoreIo {
    mode: Mode,
    replies: Receiver<StoreReply>,
}

impl StoreIo {
    /// Tasks on a worker thread of their own (a running job).
    pub fn worker(context: StoreContext, job: &str) -> Result<Self, WeirError> {
        let (tasks_tx, tasks) = crossbeam_channel::unbounded::<StoreTask>();
        let (reply_line, replies) = crossbeam_channel::unbounded();
        let handle = std::thread::Builder::new()
            .name(format!("jobmanager-io {job}"))
            .spawn(move || {
                let mut context = context;
                for task in tasks {
                    if let Some(reply) = task(&mut context) {
                        let _ = reply_line.send(reply);
                    }
                }
            })
            .map_err(|source| WeirError::Spawn {
                what: format!("storage worker of {job}"),
                source,
            })?;
        Ok(Self {
            mode: Mode::Worker(Some(tasks_tx), Some(handle)),
            replies,
        })
    }

    /// Tasks run at once on the caller's thread (unit tests).
    #[cfg(test)]
    pub fn inline(context: StoreContext) -> Self {
        let (replies_tx, replies) = crossbeam_channel::unbounded();
        Self {
            mode: Mode::Inline(Box::new(context), replies_tx),
            replies,
        }
    }

    /// Runs `task` (later, on the worker; at once, inline); its reply arrives on
    /// [`replies`](Self::replies).
    pub fn submit(
        &mut self,
        task: impl FnOnce(&mut StoreContext) -> Option<StoreReply> + Send + 'static,
    ) {
        match &mut self.mode {
            Mode::Worker(Some(tasks), _) => {
                // The worker lives as long as this handle; a send cannot fail before drop.
                let _ = tasks.send(Box::new(task));
            }
            Mode::Worker(None, _) => {}
            #[cfg(test)]
            Mode::Inline(context, replies) => {
                if let Some(reply) = task(context) {
                    let _ = replies.send(reply);
                }
            }
        }
    }

    /// Where replies arrive.
    pub fn replies(&self) -> &Receiver<StoreReply> {
        &self.replies
    }

    /// Waits until every submitted task has run (the job ends).
    pub fn drain(&mut self) {
        match &mut self.mode {
            Mode::Worker(tasks, handle) => {
                drop(tasks.take());
                if let Some(handle) = handle.take() {
                    let _ = handle.join();
                }
            }
            #[cfg(test)]
            Mode::Inline(..) => {}
        }
    }
}

impl Drop for StoreIo {
    fn drop(&mut self) {
        self.drain();
    }
}
