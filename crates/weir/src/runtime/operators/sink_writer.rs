//! The operator that hands records to a [`SinkWriter`].

use std::marker::PhantomData;

use crate::connectors::sink::SinkWriter;
use crate::error::TaskError;
use crate::record::Record;
use crate::runtime::operators::OperatorCore;
use crate::runtime::output::{call_user, user_error, OperatorMetrics, Output};
use crate::runtime::stream_element::StreamEvent;
use crate::runtime::task::OperatorSetup;

/// Writes records to a sink writer; flushes it at barriers and at the end of input.
pub struct SinkWriterOperator<T, W> {
    core: OperatorCore,
    writer: W,
    _input: PhantomData<fn(T)>,
}

impl<T, W> SinkWriterOperator<T, W> {
    /// An operator writing to `writer`.
    pub fn new(setup: &OperatorSetup, writer: W) -> Self {
        Self {
            core: OperatorCore::new(setup),
            writer,
            _input: PhantomData,
        }
    }
}

impl<T: Record, W: SinkWriter<T>> SinkWriterOperator<T, W> {
    fn flush_writer(&mut self, end_of_input: bool) -> Result<(), TaskError> {
        let writer = &mut self.writer;
        call_user(&self.core.name, || writer.flush(end_of_input))?
            .map_err(|e| user_error(&self.core.name, e))?;
        if end_of_input {
            let writer = &mut self.writer;
            call_user(&self.core.name, || writer.close())?
                .map_err(|e| user_error(&self.core.name, e))?;
        }
        Ok(())
    }
}

impl<T: Record, W: SinkWriter<T>> Output<T> for SinkWriterOperator<T, W> {
    #[inline]
    fn collect(&mut self, record: T) -> Result<(), TaskError> {
        self.core.records_in += 1;
        let writer = &mut self.writer;
        call_user(&self.core.name, || writer.write(record))?
            .map_err(|e| user_error(&self.core.name, e))
    }

    fn emit_event(&mut self, event: &StreamEvent) -> Result<(), TaskError> {
        match event {
            StreamEvent::EndOfStream => self.flush_writer(true),
            StreamEvent::Barrier(_) => self.flush_writer(false),
        }
    }

    fn flush(&mut self) -> Result<(), TaskError> {
        Ok(())
    }

    fn report_metrics(&self, into: &mut Vec<OperatorMetrics>) {
        into.push(self.core.metrics());
    }
}
