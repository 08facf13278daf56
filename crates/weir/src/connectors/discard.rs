//! A sink that drops every record (Flink's `DiscardingSink`), for benchmarks.

use std::marker::PhantomData;

use crate::api::functions::RuntimeContext;
use crate::connectors::sink::{Sink, SinkWriter};
use crate::error::BoxError;

/// Drops every record.
///
/// ```
/// use weir::prelude::*;
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// env.generate(1000, |i| i).sink_to(DiscardingSink, "discard");
/// let result = env.execute("discard")?;
/// assert_eq!(result.operator("Sink: discard").map(|o| o.records_in), Some(1000));
/// # Ok::<(), WeirError>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct DiscardingSink;

/// The writer of a [`DiscardingSink`].
#[derive(Debug)]
pub struct DiscardingWriter<T>(PhantomData<fn(T)>);

impl<T: Send + 'static> Sink<T> for DiscardingSink {
    type Writer = DiscardingWriter<T>;
    /// Nothing external is committed: a replay is harmless.
    fn commits_on_checkpoint_completion(&self) -> bool {
        false
    }
    fn create_writer(&self, _context: &RuntimeContext) -> Result<DiscardingWriter<T>, BoxError> {
        Ok(DiscardingWriter(PhantomData))
    }
}

impl<T: Send + 'static> SinkWriter<T> for DiscardingWriter<T> {
    #[inline]
    fn write(&mut self, record: T) -> Result<(), BoxError> {
        drop(record);
        Ok(())
    }
    fn flush(&mut self, _end_of_input: bool) -> Result<(), BoxError> {
        Ok(())
    }
}
