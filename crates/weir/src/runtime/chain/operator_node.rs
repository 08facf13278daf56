//! The chain nodes of operators: the plumbing every operator shares (batches in, an output
//! over the successors and side outputs, record counts, the last watermark), around an
//! operator's hooks. One node type per number of inputs; the hooks they share are written
//! once, in `operator_hooks!`.

use std::any::{Any, TypeId};
use std::marker::PhantomData;
use std::sync::Arc;

use super::{ChainOutput, ChainTail, ChainedNode, SideOutputs};
use crate::error::TaskError;
use crate::graph::ids::NodeId;
use crate::metrics::OperatorMetricGroup;
use crate::record::Record;
use crate::runtime::batch::RecordBatch;
use crate::runtime::operators::{OneInputStreamOperator, TwoInputStreamOperator};
use crate::runtime::output::OperatorMetrics;
use crate::runtime::snapshot::{CheckpointNotification, OperatorSnapshot};
use crate::runtime::stream_element::{CheckpointBarrier, InputEnd, StreamEvent};
use crate::runtime::task::OperatorSetup;
use crate::time::{Watermark, WatermarkStatus};

/// What every operator node holds besides its operator.
struct NodeCore<O> {
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
    /// The live metrics, updated once per batch.
    live: OperatorMetricGroup,
}

impl<O> NodeCore<O> {
    fn new(setup: &OperatorSetup) -> Self {
        Self {
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
            live: setup.metrics.clone(),
        }
    }

    fn metrics(&self) -> OperatorMetrics {
        OperatorMetrics {
            node: self.node,
            subtask: self.subtask,
            records_in: self.records_in,
            records_out: self.records_out,
            records_skipped: 0,
            records_dead_lettered: 0,
            watermark: (self.watermark != Watermark::MIN).then_some(self.watermark),
            backward_watermarks: 0,
            late_records_dropped: 0,
        }
    }

    /// Counts a batch of input `I` and checks its type.
    fn input<'b, I: 'static>(
        &mut self,
        batch: &'b mut dyn Any,
    ) -> Result<&'b mut RecordBatch<I>, TaskError> {
        let batch = batch.downcast_mut::<RecordBatch<I>>().ok_or_else(|| {
            TaskError::Internal(format!("`{}` received records of another type", self.name))
        })?;
        self.records_in += batch.len() as u64;
        self.live.records_in.inc_by(batch.len() as u64);
        Ok(batch)
    }
}

/// Splits a node into its operator and an output over its successors in `rest`.
macro_rules! operator_and_output {
    ($self:ident, $rest:ident) => {
        (
            &mut $self.operator,
            ChainOutput::new(
                &mut $self.core.buffer,
                &$self.core.successors,
                $rest,
                &mut $self.core.records_out,
                $self.core.batch_size,
            )
            .counting(&$self.core.live.records_out)
            .with_side_outputs(&mut $self.core.side),
        )
    };
}

/// Feeds a batch to `$process`, record by record, with each record's timestamp — and, for
/// a batch that carries its records' key groups, to `$keyed` with each one's key group.
macro_rules! feed {
    ($self:ident, $rest:ident, $batch:ident, $process:ident, $keyed:ident) => {{
        let (operator, mut out) = operator_and_output!($self, $rest);
        if $batch.has_origins() {
            // An attempt that traces where records were read: what the operator emits for a
            // record was read there too, and a failure on it names it.
            for (record, timestamp, key_group, origin) in $batch.drain_traced() {
                out.set_timestamp(timestamp);
                out.set_origin(origin);
                let processed = match key_group {
                    Some(group) => operator.$keyed(record, group, &mut out),
                    None => operator.$process(record, &mut out),
                };
                if let Err(error) = processed {
                    return Err(match origin {
                        Some(origin) => error.at_record(&origin.to_origin()),
                        None => error,
                    });
                }
            }
            out.set_origin(None);
        } else if $batch.has_key_groups() {
            for (record, timestamp, key_group) in $batch.drain_keyed() {
                out.set_timestamp(timestamp);
                match key_group {
                    Some(group) => operator.$keyed(record, group, &mut out)?,
                    None => operator.$process(record, &mut out)?,
                }
            }
        } else if $batch.has_timestamps() {
            for (record, timestamp) in $batch.drain() {
                out.set_timestamp(timestamp);
                operator.$process(record, &mut out)?;
            }
        } else {
            for record in $batch.drain_records() {
                operator.$process(record, &mut out)?;
            }
        }
        out.flush()
    }};
}

/// The `ChainedNode` methods every operator node shares.
macro_rules! operator_hooks {
    () => {
        fn name(&self) -> &str {
            &self.core.name
        }

        fn output_type(&self) -> Option<TypeId> {
            Some(TypeId::of::<O>())
        }

        fn set_successors(&mut self, successors: Vec<usize>) {
            self.core.successors = successors;
        }

        fn set_side_outputs(&mut self, side_outputs: SideOutputs) -> Result<(), TaskError> {
            self.core.side = side_outputs;
            Ok(())
        }

        fn open(&mut self) -> Result<(), TaskError> {
            self.operator.open()
        }

        fn process_watermark(
            &mut self,
            watermark: Watermark,
            rest: &mut ChainTail,
        ) -> Result<(), TaskError> {
            self.core.watermark = watermark;
            self.core.live.set_watermark(watermark);
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
            barrier: CheckpointBarrier,
            into: &mut Vec<OperatorSnapshot>,
        ) -> Result<(), TaskError> {
            self.operator.snapshot_state(barrier, into)
        }

        fn notify_checkpoint(
            &mut self,
            notification: CheckpointNotification,
        ) -> Result<(), TaskError> {
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
            let mut metrics = self.core.metrics();
            self.operator.add_metrics(&mut metrics);
            into.push(metrics);
        }
    };
}

/// A one-input operator in a chain.
pub struct OneInputNode<I, O, Op> {
    operator: Op,
    core: NodeCore<O>,
    _input: PhantomData<fn(I)>,
}

impl<I, O, Op> OneInputNode<I, O, Op> {
    /// The node of `operator`, set up by `setup`.
    pub fn new(setup: &OperatorSetup, operator: Op) -> Self {
        Self {
            operator,
            core: NodeCore::new(setup),
            _input: PhantomData,
        }
    }
}

impl<I, O, Op> ChainedNode for OneInputNode<I, O, Op>
where
    I: Record,
    O: Record,
    Op: OneInputStreamOperator<I, O> + 'static,
{
    operator_hooks!();

    fn input_type(&self) -> TypeId {
        TypeId::of::<I>()
    }

    fn process_records(
        &mut self,
        batch: &mut dyn Any,
        rest: &mut ChainTail,
    ) -> Result<(), TaskError> {
        let batch = self.core.input::<I>(batch)?;
        feed!(
            self,
            rest,
            batch,
            process_element,
            process_element_in_key_group
        )
    }
}

/// A two-input operator (a connected stream's), the head of its chain.
pub struct TwoInputNode<I1, I2, O, Op> {
    operator: Op,
    core: NodeCore<O>,
    _inputs: PhantomData<fn(I1, I2)>,
}

impl<I1, I2, O, Op> TwoInputNode<I1, I2, O, Op> {
    /// The node of `operator`, set up by `setup`.
    pub fn new(setup: &OperatorSetup, operator: Op) -> Self {
        Self {
            operator,
            core: NodeCore::new(setup),
            _inputs: PhantomData,
        }
    }
}

impl<I1, I2, O, Op> ChainedNode for TwoInputNode<I1, I2, O, Op>
where
    I1: Record,
    I2: Record,
    O: Record,
    Op: TwoInputStreamOperator<I1, I2, O> + 'static,
{
    operator_hooks!();

    fn input_type(&self) -> TypeId {
        TypeId::of::<I1>()
    }

    fn process_records(
        &mut self,
        batch: &mut dyn Any,
        rest: &mut ChainTail,
    ) -> Result<(), TaskError> {
        let batch = self.core.input::<I1>(batch)?;
        feed!(
            self,
            rest,
            batch,
            process_element1,
            process_element1_in_key_group
        )
    }

    fn process_records_second(
        &mut self,
        batch: &mut dyn Any,
        rest: &mut ChainTail,
    ) -> Result<(), TaskError> {
        let batch = self.core.input::<I2>(batch)?;
        feed!(
            self,
            rest,
            batch,
            process_element2,
            process_element2_in_key_group
        )
    }
}
