//! The chain node of a one-input operator: the plumbing every operator shares (batches in,
//! an output over the successors, record counts), around an operator's hooks.

use std::any::{Any, TypeId};
use std::marker::PhantomData;
use std::sync::Arc;

use super::{ChainOutput, ChainTail, ChainedNode, SideOutputs};
use crate::error::TaskError;
use crate::graph::ids::NodeId;
use crate::record::Record;
use crate::runtime::batch::RecordBatch;
use crate::runtime::operators::OneInputStreamOperator;
use crate::runtime::output::OperatorMetrics;
use crate::runtime::snapshot::{CheckpointNotification, OperatorSnapshot};
use crate::runtime::stream_element::{InputEnd, StreamEvent};
use crate::runtime::task::OperatorSetup;
use crate::time::{Watermark, WatermarkStatus};

/// A one-input operator in a chain.
pub struct OneInputNode<I, O, Op> {
    operator: Op,
    node: NodeId,
    name: Arc<str>,
    subtask: u32,
    buffer: RecordBatch<O>,
    successors: Vec<usize>,
    side: SideOutputs,
    records_in: u64,
    records_out: u64,
    /// The last watermark the operator received.
    watermark: Watermark,
    batch_size: usize,
    _input: PhantomData<fn(I)>,
}

impl<I, O, Op> OneInputNode<I, O, Op> {
    /// The node of `operator`, set up by `setup`.
    pub fn new(setup: &OperatorSetup, operator: Op) -> Self {
        Self {
            operator,
            node: setup.node,
            name: setup.name.clone(),
            subtask: setup.subtask,
            buffer: RecordBatch::default(),
            successors: Vec::new(),
            side: SideOutputs::default(),
            records_in: 0,
            records_out: 0,
            watermark: Watermark::MIN,
            batch_size: setup.config.buffer_size.max(1),
            _input: PhantomData,
        }
    }
}

/// Splits the node into its operator and an output over its successors in `rest`.
macro_rules! operator_and_output {
    ($self:ident, $rest:ident) => {
        (
            &mut $self.operator,
            ChainOutput::new(
                &mut $self.buffer,
                &$self.successors,
                $rest,
                &mut $self.records_out,
                $self.batch_size,
            )
            .with_side_outputs(&mut $self.side),
        )
    };
}

impl<I, O, Op> ChainedNode for OneInputNode<I, O, Op>
where
    I: Record,
    O: Record,
    Op: OneInputStreamOperator<I, O> + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn input_type(&self) -> TypeId {
        TypeId::of::<I>()
    }

    fn output_type(&self) -> Option<TypeId> {
        Some(TypeId::of::<O>())
    }

    fn set_successors(&mut self, successors: Vec<usize>) {
        self.successors = successors;
    }

    fn set_side_outputs(&mut self, side_outputs: SideOutputs) -> Result<(), TaskError> {
        self.side = side_outputs;
        Ok(())
    }

    fn open(&mut self) -> Result<(), TaskError> {
        self.operator.open()
    }

    fn process_records(
        &mut self,
        batch: &mut dyn Any,
        rest: &mut ChainTail,
    ) -> Result<(), TaskError> {
        let batch = batch.downcast_mut::<RecordBatch<I>>().ok_or_else(|| {
            TaskError::Internal(format!("`{}` received records of another type", self.name))
        })?;
        self.records_in += batch.len() as u64;
        let (operator, mut out) = operator_and_output!(self, rest);
        if batch.has_timestamps() {
            for (record, timestamp) in batch.drain() {
                out.set_timestamp(timestamp);
                operator.process_element(record, &mut out)?;
            }
        } else {
            for record in batch.drain_records() {
                operator.process_element(record, &mut out)?;
            }
        }
        out.flush()
    }

    fn process_watermark(
        &mut self,
        watermark: Watermark,
        rest: &mut ChainTail,
    ) -> Result<(), TaskError> {
        self.watermark = watermark;
        let (operator, mut out) = operator_and_output!(self, rest);
        operator.process_watermark(watermark, &mut out)?;
        out.flush()
    }

    fn process_watermark_status(
        &mut self,
        status: WatermarkStatus,
        rest: &mut ChainTail,
    ) -> Result<(), TaskError> {
        let (_, mut out) = operator_and_output!(self, rest);
        out.emit_watermark_status(status)
    }

    fn next_processing_time(&self) -> Option<i64> {
        self.operator.next_processing_time()
    }

    fn on_processing_time(&mut self, time: i64, rest: &mut ChainTail) -> Result<(), TaskError> {
        let (operator, mut out) = operator_and_output!(self, rest);
        operator.on_processing_time(time, &mut out)?;
        out.flush()
    }

    fn end_input(&mut self, cause: InputEnd, rest: &mut ChainTail) -> Result<(), TaskError> {
        let (operator, mut out) = operator_and_output!(self, rest);
        operator.end_input(cause, &mut out)?;
        out.flush()
    }

    fn prepare_snapshot_pre_barrier(
        &mut self,
        checkpoint_id: u64,
        rest: &mut ChainTail,
    ) -> Result<(), TaskError> {
        let (operator, mut out) = operator_and_output!(self, rest);
        operator.prepare_snapshot_pre_barrier(checkpoint_id, &mut out)?;
        out.flush()
    }

    fn snapshot_state(
        &mut self,
        checkpoint_id: u64,
        into: &mut Vec<OperatorSnapshot>,
    ) -> Result<(), TaskError> {
        self.operator.snapshot_state(checkpoint_id, into)
    }

    fn notify_checkpoint(&mut self, notification: CheckpointNotification) -> Result<(), TaskError> {
        self.operator.notify_checkpoint(notification)
    }

    fn broadcast_event(&mut self, _event: &StreamEvent) -> Result<(), TaskError> {
        Ok(())
    }

    fn flush(&mut self) -> Result<(), TaskError> {
        Ok(())
    }

    fn close(&mut self) -> Result<(), TaskError> {
        self.operator.close()
    }

    fn report_metrics(&self, into: &mut Vec<OperatorMetrics>) {
        into.push(OperatorMetrics {
            node: self.node,
            subtask: self.subtask,
            records_in: self.records_in,
            records_out: self.records_out,
            records_skipped: 0,
            records_dead_lettered: 0,
            watermark: (self.watermark != Watermark::MIN).then_some(self.watermark),
            backward_watermarks: 0,
            late_records_dropped: 0,
        });
        if let Some(metrics) = into.last_mut() {
            self.operator.add_metrics(metrics);
        }
    }
}
