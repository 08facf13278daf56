//! The sink interface that connectors implement (in the spirit of Flink's Sink V2): a sink
//! creates one [`SinkWriter`] per subtask.

use crate::api::functions::RuntimeContext;
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
}
