//! The sink interface that connectors implement (in the spirit of Flink's Sink V2): a sink
//! creates one [`SinkWriter`] per subtask.

use crate::api::functions::{FunctionStateContext, RuntimeContext};
use crate::checkpoint::recovery::{CorruptCheckpointPolicy, FALLBACK_OPTION};
use crate::error::BoxError;

/// Whether a sink subtask starts from empty state although its job was asked to resume:
/// no restore point was found (its checkpoints or job record are gone). A sink that can tell
/// its own committed output then checks that there is none, because starting over it would
/// write it again. Not when the configuration accepts duplicates.
pub fn resumes_from_empty_state(context: &RuntimeContext) -> bool {
    let config = context.execution_config();
    config.resume_from_latest_checkpoint
        && config.restore.is_none()
        && context.restored_checkpoint_id().is_none()
        && config.checkpoint.corrupt_checkpoint_policy == CorruptCheckpointPolicy::Refuse
}

/// The error of a sink that found its own committed output (`found`: a file, a row) while
/// its job resumes from empty state.
pub fn committed_output_error(context: &RuntimeContext, found: &str) -> BoxError {
    format!(
        "sink `{}`: the job was asked to resume, but it has no checkpoint to resume from, and \
         committed output of this sink exists already ({found}); starting from empty state would \
         commit it a second time. Restore the job's checkpoint directory, or remove that output \
         to start over, or set `{FALLBACK_OPTION}: allow-duplicates` to start anyway",
        context.operator_name()
    )
    .into()
}

/// A sink: a factory of per-subtask writers.
pub trait Sink<T>: Send + 'static {
    /// The writer type.
    type Writer: SinkWriter<T>;
    /// Creates the writer of one subtask.
    fn create_writer(&self, context: &RuntimeContext) -> Result<Self::Writer, BoxError>;
    /// Whether this sink makes output visible when a checkpoint completes (two-phase commit,
    /// write-ahead log). Restoring a checkpoint older than one such a sink was notified of
    /// commits that output a second time, so recovery refuses to (see
    /// [`crate::CorruptCheckpointPolicy`]). Sinks whose replays are harmless — idempotent
    /// upserts, or output that is at-least-once anyway — return `false`. A sink is assumed
    /// to commit unless it says otherwise.
    fn commits_on_checkpoint_completion(&self) -> bool {
        true
    }
}

/// Writes the records of one sink subtask.
pub trait SinkWriter<T>: Send + 'static {
    /// Accepts one record (it may buffer it).
    fn write(&mut self, record: T) -> Result<(), BoxError>;
    /// Makes buffered records durable or visible: called at every checkpoint barrier and,
    /// with `end_of_input` true, once the input has ended.
    fn flush(&mut self, end_of_input: bool) -> Result<(), BoxError>;
    /// Releases resources after the final flush.
    fn close(&mut self) -> Result<(), BoxError> {
        Ok(())
    }
    /// Called once at task start, before `open`: restore operator state here.
    fn initialize_state(&mut self, _ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
        Ok(())
    }
    /// Called at each checkpoint, between two records: put operator state here.
    fn snapshot_state(&mut self, _ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
        Ok(())
    }
    /// Checkpoint `checkpoint_id` is complete (the notice can be lost; a later one implies it).
    fn notify_checkpoint_complete(&mut self, _checkpoint_id: u64) -> Result<(), BoxError> {
        Ok(())
    }
    /// Checkpoint `checkpoint_id` was aborted.
    fn notify_checkpoint_aborted(&mut self, _checkpoint_id: u64) -> Result<(), BoxError> {
        Ok(())
    }
}
