//! Side outputs of a chained operator (Flink's `OutputTag` outputs): per tag, a batch of
//! records of the tag's type and the nodes that consume it. Records sent to a tag nobody
//! consumes are dropped, as in Flink.

use std::any::{Any, TypeId};
use std::sync::Arc;

use super::{forward_batch, ChainTail};
use crate::connectors::origin::TracedOrigin;
use crate::error::TaskError;
use crate::record::Record;
use crate::runtime::batch::RecordBatch;
use crate::time::{Watermark, WatermarkStatus};

type FlushFn = fn(&mut (dyn Any + Send), &[usize], &mut ChainTail) -> Result<(), TaskError>;

/// One side output: its tag, its records so far, and its consumers in the chain.
pub struct SideOutputSlot {
    tag: Arc<str>,
    record_type: TypeId,
    buffer: Box<dyn Any + Send>,
    successors: Vec<usize>,
    flush: FlushFn,
}

fn flush_typed<T: Record>(
    buffer: &mut (dyn Any + Send),
    successors: &[usize],
    rest: &mut ChainTail,
) -> Result<(), TaskError> {
    let batch = buffer
        .downcast_mut::<RecordBatch<T>>()
        .ok_or_else(|| TaskError::Internal("side output batch of another type".into()))?;
    if batch.is_empty() {
        return Ok(());
    }
    forward_batch(successors, rest, batch)
}

impl SideOutputSlot {
    /// The side output `tag` of records `T`, consumed by the nodes at `successors` (offsets
    /// into the list after the emitting node).
    pub fn new<T: Record>(tag: Arc<str>, successors: Vec<usize>) -> Self {
        Self {
            tag,
            record_type: TypeId::of::<T>(),
            buffer: Box::new(RecordBatch::<T>::default()),
            successors,
            flush: flush_typed::<T>,
        }
    }

    /// The type of its records.
    pub fn record_type(&self) -> TypeId {
        self.record_type
    }

    /// Its consumers.
    pub fn successors(&self) -> &[usize] {
        &self.successors
    }
}

/// The side outputs of one operator.
#[derive(Default)]
pub struct SideOutputs {
    slots: Vec<SideOutputSlot>,
    /// Where the record being processed was read, in an attempt that traces origins: side
    /// records emitted for it carry it, so that a consumer failing on one names that record,
    /// not whichever record was being processed when the side batch was handed over.
    origin: Option<TracedOrigin>,
}

impl SideOutputs {
    /// Side outputs with these slots.
    pub fn new(slots: Vec<SideOutputSlot>) -> Self {
        Self {
            slots,
            origin: None,
        }
    }

    /// The records emitted from now on were computed from the record read at `origin`.
    #[inline]
    pub(crate) fn set_origin(&mut self, origin: Option<TracedOrigin>) {
        self.origin = origin;
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Emits `value` to side output `tag`; dropped if nothing consumes the tag.
    pub fn emit<T: Record>(
        &mut self,
        tag: &str,
        value: T,
        timestamp: Option<i64>,
    ) -> Result<(), TaskError> {
        let Some(slot) = self.slots.iter_mut().find(|s| &*s.tag == tag) else {
            return Ok(());
        };
        let batch = slot
            .buffer
            .downcast_mut::<RecordBatch<T>>()
            .ok_or_else(|| {
                TaskError::Internal(format!(
                    "side output `{tag}` carries records of another type than {}",
                    std::any::type_name::<T>()
                ))
            })?;
        match self.origin {
            None => batch.push(value, timestamp),
            origin => batch.push_traced(value, timestamp, None, origin),
        }
        Ok(())
    }

    /// Hands every gathered side record to its consumers.
    pub fn flush(&mut self, rest: &mut ChainTail) -> Result<(), TaskError> {
        for slot in &mut self.slots {
            (slot.flush)(&mut *slot.buffer, &slot.successors, rest)?;
        }
        Ok(())
    }

    /// Passes a watermark to every side output's consumers (after their records).
    pub fn emit_watermark(
        &mut self,
        watermark: Watermark,
        rest: &mut ChainTail,
    ) -> Result<(), TaskError> {
        self.flush(rest)?;
        for slot in &self.slots {
            for &offset in &slot.successors {
                let (node, after) = super::chain_output::successor(rest, offset)?;
                node.process_watermark(watermark, after)?;
            }
        }
        Ok(())
    }

    /// Passes a watermark status to every side output's consumers.
    pub fn emit_watermark_status(
        &mut self,
        status: WatermarkStatus,
        rest: &mut ChainTail,
    ) -> Result<(), TaskError> {
        self.flush(rest)?;
        for slot in &self.slots {
            for &offset in &slot.successors {
                let (node, after) = super::chain_output::successor(rest, offset)?;
                node.process_watermark_status(status, after)?;
            }
        }
        Ok(())
    }
}
