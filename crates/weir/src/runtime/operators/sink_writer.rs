//! The operator that hands records to a [`SinkWriter`].

use std::marker::PhantomData;

use crate::connectors::sink::SinkWriter;
use crate::error::TaskError;
use crate::record::Record;
use crate::runtime::chain::ChainOutput;
use crate::runtime::operators::{
    call_hook, notify_hook, snapshot_operator, state_hook, OneInputStreamOperator, OperatorCore,
    StreamOperator,
};
use crate::runtime::output::{call_user, user_error};
use crate::runtime::snapshot::{CheckpointNotification, OperatorSnapshot};
use crate::runtime::stream_element::{CheckpointBarrier, InputEnd};
use crate::runtime::task::OperatorSetup;
use crate::state::operator_state::OperatorStateBackend;

/// Writes records to a sink writer; flushes it before each barrier and at the end of data,
/// and passes it the checkpoint hooks.
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

impl<T: Record, W: SinkWriter<T>> StreamOperator for SinkWriterOperator<T, W> {
    fn open(&mut self) -> Result<(), TaskError> {
        let writer = &mut self.writer;
        state_hook(&self.core, &mut self.operator_state, None, |ctx| {
            writer.initialize_state(ctx)
        })
    }

    fn snapshot_state(
        &mut self,
        barrier: CheckpointBarrier,
        into: &mut Vec<OperatorSnapshot>,
    ) -> Result<(), TaskError> {
        let writer = &mut self.writer;
        snapshot_operator(
            &self.core,
            &mut self.operator_state,
            barrier.checkpoint_id,
            None,
            into,
            |ctx| writer.snapshot_state(ctx),
        )
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

    fn close(&mut self) -> Result<(), TaskError> {
        let writer = &mut self.writer;
        call_hook(&self.core.name, || writer.close())
    }
}

impl<T: Record, W: SinkWriter<T>> OneInputStreamOperator<T, ()> for SinkWriterOperator<T, W> {
    #[inline]
    fn process_element(
        &mut self,
        record: T,
        _out: &mut ChainOutput<'_, ()>,
    ) -> Result<(), TaskError> {
        let writer = &mut self.writer;
        call_user(&self.core.name, || writer.write(record))?
            .map_err(|e| user_error(&self.core.name, e))
    }

    fn end_input(
        &mut self,
        cause: InputEnd,
        _out: &mut ChainOutput<'_, ()>,
    ) -> Result<(), TaskError> {
        match cause {
            // With checkpoints, the final checkpoint's barrier follows.
            InputEnd::EndOfData => self.flush_writer(true),
            // What the writer holds is committed with the savepoint, flushed at its barrier.
            InputEnd::Drain => Ok(()),
        }
    }

    fn prepare_snapshot_pre_barrier(
        &mut self,
        _checkpoint_id: u64,
        _out: &mut ChainOutput<'_, ()>,
    ) -> Result<(), TaskError> {
        self.flush_writer(false)
    }
}
