//! The operator that hands records to a [`SinkWriter`].

use std::marker::PhantomData;

use crate::connectors::sink::SinkWriter;
use crate::error::TaskError;
use crate::record::Record;
use crate::runtime::operators::{
    call_hook, notify_hook, snapshot_operator, state_hook, OperatorCore,
};
use crate::runtime::output::{call_user, user_error, OperatorMetrics, Output};
use crate::runtime::snapshot::{CheckpointNotification, OperatorSnapshot};
use crate::runtime::stream_element::StreamEvent;
use crate::runtime::task::OperatorSetup;
use crate::state::operator_state::OperatorStateBackend;

/// Writes records to a sink writer; flushes it at each barrier (before the snapshot) and at
/// the end of input, and passes it the checkpoint hooks.
pub struct SinkWriterOperator<T, W> {
    core: OperatorCore,
    writer: W,
    operator_state: OperatorStateBackend,
    _input: PhantomData<fn(T)>,
}

impl<T, W> SinkWriterOperator<T, W> {
    /// An operator writing to `writer`.
    pub fn new(setup: &OperatorSetup, writer: W) -> Self {
        Self {
            core: OperatorCore::new(setup),
            operator_state: OperatorCore::operator_state(setup),
            writer,
            _input: PhantomData,
        }
    }
}

impl<T: Record, W: SinkWriter<T>> SinkWriterOperator<T, W> {
    fn flush_writer(&mut self, end_of_input: bool) -> Result<(), TaskError> {
        let writer = &mut self.writer;
        call_hook(&self.core.name, || writer.flush(end_of_input))
    }
}

impl<T: Record, W: SinkWriter<T>> Output<T> for SinkWriterOperator<T, W> {
    fn open(&mut self) -> Result<(), TaskError> {
        let writer = &mut self.writer;
        state_hook(&self.core, &mut self.operator_state, None, |ctx| {
            writer.initialize_state(ctx)
        })
    }

    #[inline]
    fn collect(&mut self, record: T) -> Result<(), TaskError> {
        self.core.records_in += 1;
        let writer = &mut self.writer;
        call_user(&self.core.name, || writer.write(record))?
            .map_err(|e| user_error(&self.core.name, e))
    }

    fn emit_event(&mut self, event: &StreamEvent) -> Result<(), TaskError> {
        match event {
            // The input ended; with checkpoints, the final checkpoint's barrier follows.
            StreamEvent::EndOfData => self.flush_writer(true),
            StreamEvent::Barrier(_) => self.flush_writer(false),
            StreamEvent::EndOfStream => {
                let writer = &mut self.writer;
                call_hook(&self.core.name, || writer.close())
            }
        }
    }

    fn flush(&mut self) -> Result<(), TaskError> {
        Ok(())
    }

    fn snapshot_state(
        &mut self,
        checkpoint_id: u64,
        into: &mut Vec<OperatorSnapshot>,
    ) -> Result<(), TaskError> {
        let writer = &mut self.writer;
        snapshot_operator(
            &self.core,
            &mut self.operator_state,
            checkpoint_id,
            None,
            into,
            |ctx| writer.snapshot_state(ctx),
        )?;
        Ok(())
    }

    fn notify_checkpoint(&mut self, notification: CheckpointNotification) -> Result<(), TaskError> {
        notify_hook(
            &self.core.name,
            notification,
            &mut self.writer,
            |f, id| f.notify_checkpoint_complete(id),
            |f, id| f.notify_checkpoint_aborted(id),
        )
    }

    fn report_metrics(&self, into: &mut Vec<OperatorMetrics>) {
        into.push(self.core.metrics());
    }
}
