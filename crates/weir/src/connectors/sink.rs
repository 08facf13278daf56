//! The sink interface that connectors implement (in the spirit of Flink's Sink V2): a sink
//! creates one [`SinkWriter`] per subtask.

use crate::api::functions::{FunctionStateContext, RuntimeContext};
use crate::checkpoint::recovery::{CorruptCheckpointPolicy, FALLBACK_OPTION};
use crate::error::BoxError;

/// Whether a sink subtask starts from empty state: it restores no checkpoint or savepoint (a
/// fresh start, a resume that found no restore point because the job's checkpoints or record
/// are gone, or a restart of a job without checkpoints). A sink that can tell its own
/// committed output then checks that there is none, because starting over it would write it
/// again. Not when the configuration accepts duplicates, and not on the first attempt of a
/// job without checkpoints: nothing makes its subtasks wait for one another there, so output
/// a sibling committed at the end of its input may be this very run's (a restart of it still
/// checks; a job without checkpoints promises nothing across separate runs).
pub fn starts_from_empty_state(context: &RuntimeContext) -> bool {
    let config = context.execution_config();
    config.restore.is_none()
        && context.restored_checkpoint_id().is_none()
        && config.checkpoint.corrupt_checkpoint_policy == CorruptCheckpointPolicy::Refuse
        && (context.is_checkpointing() || context.attempt_number() > 0)
}

/// The error of a sink that found its own committed output (`found`: a file, a row) while
/// its job starts from empty state.
pub fn committed_output_error(context: &RuntimeContext, found: &str) -> BoxError {
    format!(
        "sink `{}`: the job starts from empty state (it has no checkpoint to restore), but \
         committed output of this sink exists already ({found}); starting from empty state \
         would commit it a second time. Resume the job from its checkpoints, restore the \
         job's checkpoint directory, or move that output aside to start over (`weir reset` \
         with `--output`), or set `{FALLBACK_OPTION}: allow-duplicates` to start anyway. (A \
         job without checkpoints meets this when it restarts after some of its output was \
         committed: with checkpoints, restarts are exact.)",
        context.operator_name()
    )
    .into()
}

/// A sink: a factory of per-subtask writers (Flink's `Sink`).
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use weir::prelude::*;
///
/// /// Appends records to a shared vector (at least once: no transactions).
/// struct VecSink(Arc<Mutex<Vec<u64>>>);
/// struct VecWriter(Arc<Mutex<Vec<u64>>>);
///
/// impl Sink<u64> for VecSink {
///     type Writer = VecWriter;
///     fn create_writer(&self, _context: &RuntimeContext) -> Result<VecWriter, BoxError> {
///         Ok(VecWriter(self.0.clone()))
///     }
///     fn commits_on_checkpoint_completion(&self) -> bool {
///         false
///     }
/// }
///
/// impl SinkWriter<u64> for VecWriter {
///     fn write(&mut self, record: u64) -> Result<(), BoxError> {
///         self.0.lock().map_err(|_| "poisoned")?.push(record);
///         Ok(())
///     }
///     fn flush(&mut self, _end_of_input: bool) -> Result<(), BoxError> {
///         Ok(())
///     }
/// }
///
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// env.generate(3, |i| i * 10).sink_to(VecSink(seen.clone()), "vec");
/// env.execute("to a vector")?;
/// assert_eq!(*seen.lock().unwrap(), vec![0, 10, 20]);
/// # Ok::<(), WeirError>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a sink of `{T}`",
    label = "not a `Sink<{T}>`",
    note = "`sink_to` takes a `Sink<{T}>`: a connector's sink (`FileSink`, `DiscardingSink`, `PrintSink`, a Kafka or PostgreSQL sink), or a type of yours that implements `Sink<{T}>` and makes a `SinkWriter<{T}>` per subtask; a connector builder that checks its settings is finished with `.build()?`"
)]
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

/// Writes the records of one sink subtask (see [`Sink`] for an example).
///
/// ```
/// use weir::prelude::*;
///
/// /// Counts what one subtask wrote, and says so when the input ends.
/// struct CountingWriter(u64);
///
/// impl SinkWriter<u64> for CountingWriter {
///     fn write(&mut self, _record: u64) -> Result<(), BoxError> {
///         self.0 += 1;
///         Ok(())
///     }
///     fn flush(&mut self, end_of_input: bool) -> Result<(), BoxError> {
///         if end_of_input {
///             println!("wrote {}", self.0);
///         }
///         Ok(())
///     }
/// }
///
/// struct CountingSink;
///
/// impl Sink<u64> for CountingSink {
///     type Writer = CountingWriter;
///     fn create_writer(&self, _context: &RuntimeContext) -> Result<CountingWriter, BoxError> {
///         Ok(CountingWriter(0))
///     }
///     fn commits_on_checkpoint_completion(&self) -> bool {
///         false
///     }
/// }
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// env.generate(5, |i| i).sink_to(CountingSink, "count");
/// env.execute("count")?;
/// # Ok::<(), WeirError>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a writer of `{T}`",
    note = "implement `SinkWriter<{T}>` for it: `write` and `flush` at least"
)]
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::fencing::FencingToken;

    #[test]
    fn every_attempt_from_empty_state_checks_for_committed_output() {
        let mut context = RuntimeContext::for_test(0, FencingToken::unfenced("j"));
        context.checkpointing = true;
        assert!(starts_from_empty_state(&context));
        // A restart whose first attempt was refused must not go ahead either.
        context.attempt = 1;
        assert_eq!(context.attempt_number(), 1);
        assert!(starts_from_empty_state(&context));
        context.restored_from = Some(4);
        assert!(!starts_from_empty_state(&context));
    }

    #[test]
    fn the_first_attempt_of_a_job_without_checkpoints_cannot_tell_its_own_output() {
        let mut context = RuntimeContext::for_test(0, FencingToken::unfenced("j"));
        context.checkpointing = false;
        assert!(!starts_from_empty_state(&context));
        context.attempt = 1;
        assert!(starts_from_empty_state(&context));
    }
}
