//! The sink interface that connectors implement (in the spirit of Flink's Sink V2): a sink
//! creates one [`SinkWriter`] per subtask.

use crate::api::functions::{FunctionStateContext, RuntimeContext};
use crate::error::BoxError;

/// A sink: a factory of per-subtask writers.
pub trait Sink<T>: Send + 'static {
    /// The writer type.
    type Writer: SinkWriter<T>;
    /// Creates the writer of one subtask.
    fn create_writer(&self, context: &RuntimeContext) -> Result<Self::Writer, BoxError>;
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
