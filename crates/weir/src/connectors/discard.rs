//! A sink that drops every record (Flink's `DiscardingSink`), for benchmarks.

use std::marker::PhantomData;

use crate::api::functions::RuntimeContext;
use crate::connectors::sink::{Sink, SinkWriter};
use crate::error::BoxError;

/// Drops every record.
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
