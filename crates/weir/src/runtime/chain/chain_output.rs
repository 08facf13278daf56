//! The output of a node inside a chain: it gathers records into a batch and hands the batch
//! to the node's successors, by direct call, when it is full, before a watermark, and when
//! the node's call returns — so between two calls of the task no record waits in a chain.

use crate::metrics::Counter;
use std::any::Any;

use super::{ChainTail, ChainedNode, SideOutputs};
use crate::connectors::origin::TracedOrigin;
use crate::error::TaskError;
use crate::record::Record;
use crate::runtime::batch::RecordBatch;
use crate::runtime::output::Output;
use crate::time::{Watermark, WatermarkStatus};

/// Where a chained operator writes: its successors in the chain (operators or record
/// writers), or nothing when it ends the chain.
pub struct ChainOutput<'a, T> {
    buffer: &'a mut RecordBatch<T>,
    /// The operator's side outputs; lent to a function's context while it runs.
    side: Option<&'a mut SideOutputs>,
    /// The timestamp records get by default: the input record's (Flink's
    /// `TimestampedCollector`).
    timestamp: Option<i64>,
    /// Where the record being processed was read, in an attempt that traces origins: the
    /// records emitted meanwhile carry it too.
    origin: Option<TracedOrigin>,
    /// Whether a source writing here should say where each record was read.
    traces_origins: bool,
    successors: &'a [usize],
    rest: &'a mut ChainTail,
    records_out: &'a mut u64,
    /// The live counter of what the operator emits, published once per batch.
    live_out: Option<&'a Counter>,
    batch_size: usize,
}

/// The node at `offset` in `rest`, and the part of the list after it.
type NodeAndTail<'r> = (&'r mut Box<dyn ChainedNode>, &'r mut ChainTail);

pub(crate) fn successor(rest: &mut ChainTail, offset: usize) -> Result<NodeAndTail<'_>, TaskError> {
    rest.get_mut(offset..)
        .and_then(|tail| tail.split_first_mut())
        .ok_or_else(|| TaskError::Internal("chained successor out of range".into()))
}

/// Hands `batch` to the nodes at `successors` in `rest` (drained; copies for all but the
/// last).
pub(crate) fn forward_batch<T: Record>(
    successors: &[usize],
    rest: &mut ChainTail,
    batch: &mut RecordBatch<T>,
) -> Result<(), TaskError> {
    match successors.split_last() {
        None => batch.clear(),
        Some((&last, others)) => {
            for &offset in others {
                let mut copy = batch.clone();
                let (node, after) = successor(rest, offset)?;
                node.process_records(&mut copy as &mut dyn Any, after)?;
            }
            let (node, after) = successor(rest, last)?;
            node.process_records(batch as &mut dyn Any, after)?;
            // A successor that failed half-way leaves records behind; the task fails anyway.
            batch.clear();
        }
    }
    Ok(())
}

impl<'a, T: Record> ChainOutput<'a, T> {
    /// An output gathering up to `batch_size` records into `buffer` for the nodes at
    /// `successors` (offsets into `rest`), counting what it emits in `records_out`.
    pub fn new(
        buffer: &'a mut RecordBatch<T>,
        successors: &'a [usize],
        rest: &'a mut ChainTail,
        records_out: &'a mut u64,
        batch_size: usize,
    ) -> Self {
        Self {
            buffer,
            side: None,
            timestamp: None,
            origin: None,
            traces_origins: false,
            successors,
            rest,
            records_out,
            live_out: None,
            batch_size,
        }
    }

    /// The same output, also counting what it emits in the live counter `live_out`.
    pub fn counting(mut self, live_out: &'a Counter) -> Self {
        self.live_out = Some(live_out);
        self
    }

    /// The same output, asking the source that writes into it to say where each record was
    /// read (the attempt after a failure of user code).
    pub fn tracing_origins(mut self, traces: bool) -> Self {
        self.traces_origins = traces;
        self
    }

    /// The records emitted from now on were read at `origin` (or computed from a record
    /// that was).
    #[inline]
    pub fn set_origin(&mut self, origin: Option<TracedOrigin>) {
        self.origin = origin;
        if let Some(side) = &mut self.side {
            side.set_origin(origin);
        }
    }

    /// The same output, with side outputs.
    pub fn with_side_outputs(mut self, side: &'a mut SideOutputs) -> Self {
        self.side = Some(side);
        self
    }

    /// Lends the side outputs out (to a function's context) while the main output is used;
    /// give them back with [`ChainOutput::return_side_outputs`].
    pub fn take_side_outputs(&mut self) -> Option<&'a mut SideOutputs> {
        self.side.take()
    }

    /// Takes back the side outputs lent by [`ChainOutput::take_side_outputs`].
    pub fn return_side_outputs(&mut self, side: Option<&'a mut SideOutputs>) {
        self.side = side;
    }

    /// Emits `value` to side output `tag` with the current timestamp.
    pub fn emit_side<U: Record>(&mut self, tag: &str, value: U) -> Result<(), TaskError> {
        match &mut self.side {
            Some(side) => side.emit(tag, value, self.timestamp),
            None => Ok(()),
        }
    }

    /// Emits one record, with the current timestamp.
    #[inline]
    pub fn collect(&mut self, record: T) -> Result<(), TaskError> {
        match (self.timestamp, &self.origin) {
            (None, None) => self.buffer.push_without_timestamp(record),
            (Some(t), None) => self.buffer.push_with_timestamp(record, t),
            (timestamp, origin) => self.buffer.push_traced(record, timestamp, None, *origin),
        }
        if self.buffer.len() >= self.batch_size {
            return self.hand_over_full_batch();
        }
        Ok(())
    }

    /// Emits one record with event timestamp `timestamp`.
    #[inline]
    pub fn collect_with_timestamp(&mut self, record: T, timestamp: i64) -> Result<(), TaskError> {
        match &self.origin {
            None => self.buffer.push_with_timestamp(record, timestamp),
            origin => self
                .buffer
                .push_traced(record, Some(timestamp), None, *origin),
        }
        if self.buffer.len() >= self.batch_size {
            return self.hand_over_full_batch();
        }
        Ok(())
    }

    /// The once-per-batch path, kept out of line so that `collect` stays a few instructions.
    #[cold]
    #[inline(never)]
    fn hand_over_full_batch(&mut self) -> Result<(), TaskError> {
        self.flush()
    }

    /// The timestamp that `collect` gives records: the input record's while it is
    /// processed.
    pub fn timestamp(&self) -> Option<i64> {
        self.timestamp
    }

    /// Sets the timestamp that `collect` gives records from now on.
    #[inline]
    pub fn set_timestamp(&mut self, timestamp: Option<i64>) {
        self.timestamp = timestamp;
    }

    /// Hands the gathered records, side outputs' included, to the successors.
    pub fn flush(&mut self) -> Result<(), TaskError> {
        if let Some(side) = &mut self.side {
            side.flush(self.rest)?;
        }
        if self.buffer.is_empty() {
            return Ok(());
        }
        *self.records_out += self.buffer.len() as u64;
        if let Some(live) = self.live_out {
            live.inc_by(self.buffer.len() as u64);
        }
        forward_batch(self.successors, self.rest, self.buffer)
    }

    /// Passes a change of watermark status on, after the records gathered so far.
    pub fn emit_watermark_status(&mut self, status: WatermarkStatus) -> Result<(), TaskError> {
        self.flush()?;
        if let Some(side) = &mut self.side {
            side.emit_watermark_status(status, self.rest)?;
        }
        for &offset in self.successors {
            let (node, after) = successor(self.rest, offset)?;
            node.process_watermark_status(status, after)?;
        }
        Ok(())
    }

    /// Emits a watermark after the records gathered so far.
    pub fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), TaskError> {
        self.flush()?;
        if let Some(side) = &mut self.side {
            side.emit_watermark(watermark, self.rest)?;
        }
        for &offset in self.successors {
            let (node, after) = successor(self.rest, offset)?;
            node.process_watermark(watermark, after)?;
        }
        Ok(())
    }
}

impl<T: Record> Output<T> for ChainOutput<'_, T> {
    #[inline]
    fn collect(&mut self, record: T) -> Result<(), TaskError> {
        ChainOutput::collect(self, record)
    }

    fn collect_with_timestamp(&mut self, record: T, timestamp: i64) -> Result<(), TaskError> {
        ChainOutput::collect_with_timestamp(self, record, timestamp)
    }

    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), TaskError> {
        ChainOutput::emit_watermark(self, watermark)
    }

    fn traces_origins(&self) -> bool {
        self.traces_origins
    }

    fn set_origin(&mut self, origin: Option<TracedOrigin>) {
        ChainOutput::set_origin(self, origin);
    }
}
