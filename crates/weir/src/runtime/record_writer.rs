//! Sends a task's output records to the subtasks of one downstream vertex, in batches,
//! choosing channels with the edge's partitioner.

use std::any::{Any, TypeId};
use std::collections::VecDeque;
use std::sync::Arc;

use crate::error::TaskError;
use crate::metrics::TaskMetrics;
use crate::record::Record;
use crate::runtime::batch::RecordBatch;
use crate::runtime::chain::{ChainTail, ChainedNode};
use crate::runtime::channel::{CancelToken, ChannelSender, Wakeup, WakeupBy};
use crate::runtime::key_selector::KeyGroupOf;
use crate::runtime::output::OperatorMetrics;
use crate::runtime::snapshot::{CheckpointNotification, OperatorSnapshot};
use crate::runtime::stream_element::{CheckpointBarrier, InputEnd, StreamElement, StreamEvent};
use crate::state::key_group::{operator_index_for_key_group, KeyGroupAssigner};
use crate::time::{Watermark, WatermarkStatus};

/// How a writer picks the channel of each record.
pub enum ChannelSelector<T> {
    /// The single channel to the same subtask index.
    Forward,
    /// Round-robin, starting at the given channel.
    RoundRobin {
        /// Next channel to use.
        next: usize,
    },
    /// Every channel.
    Broadcast,
    /// The subtask owning the record's key group.
    Hash {
        /// Computes a record's key group.
        key_group_of: Arc<dyn KeyGroupOf<T>>,
        /// Reused serialization buffer and the number of key groups.
        assigner: KeyGroupAssigner,
        /// What errors name the key selector as (`key selector of `consumer``): it is user
        /// code that runs outside any operator of the chain.
        name: Arc<str>,
    },
}

/// Batches records per channel and sends a batch when it is full, on flush, or before an
/// event (so events stay behind the records emitted before them).
///
/// With a wakeup (unaligned checkpoints), a writer waiting for room stops waiting when the
/// wakeup rings and goes into overdraft (as Flink's overdraft buffers): the rest of the
/// task's current input batch queues up in order in the writer instead of blocking, so that
/// the task reaches the barrier that rang; the overdraft is sent before anything else —
/// before the barrier's in-order copy, which the receivers' capture of in-flight records
/// waits for.
pub struct RecordWriter<T> {
    channels: Vec<ChannelSender<T>>,
    buffers: Vec<RecordBatch<T>>,
    selector: ChannelSelector<T>,
    batch_size: usize,
    cancel: CancelToken,
    /// The task's metrics (records sent, output queue), if it has any.
    metrics: Option<Arc<TaskMetrics>>,
    /// Per channel, its queue length as last added to the task's output-queue gauge.
    queued: Vec<i64>,
    /// Whether batches carry their records' key groups (a hash partitioner's).
    keyed: bool,
    /// What ends a wait for room (unaligned checkpoints), if anything.
    wakeup: Option<Arc<dyn Wakeup>>,
    /// Per channel, batches not yet sent while in overdraft, in order.
    overflow: Vec<VecDeque<StreamElement<T>>>,
    /// Whether the writer is in overdraft: nothing waits for room until it is settled.
    overdraft: bool,
}

/// The key group of `record`: the key selector, and the key's serialization, are user code,
/// so a panic or a failure there is an error of the operator `name` (`key selector of
/// `consumer``), which runs outside any operator of the chain.
#[inline]
fn key_group_in_user_code<T>(
    key_group_of: &dyn KeyGroupOf<T>,
    record: &T,
    assigner: &mut KeyGroupAssigner,
    name: &Arc<str>,
) -> Result<u32, TaskError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        key_group_of.key_group(record, assigner)
    }))
    .map_err(|payload| TaskError::UserPanic {
        message: crate::error::panic_message(payload.as_ref()),
    })
    .and_then(|group| group.map_err(TaskError::from))
    .map_err(|error| crate::runtime::output::in_operator(name, error))
}

/// A wakeup that has always rung: a send that would wait returns at once.
struct AlreadyRung(crossbeam_channel::Receiver<()>);

impl Wakeup for AlreadyRung {
    fn watch<'a>(&'a self, select: &mut crossbeam_channel::Select<'a>) -> usize {
        select.recv(&self.0)
    }
    fn has_rung(&self) -> bool {
        true
    }
}

impl<T: Record> RecordWriter<T> {
    /// A writer over `channels` (ordered by consumer subtask for all-to-all partitioners).
    pub fn new(
        channels: Vec<ChannelSender<T>>,
        selector: ChannelSelector<T>,
        batch_size: usize,
        cancel: CancelToken,
    ) -> Self {
        let keyed = matches!(selector, ChannelSelector::Hash { .. });
        let buffers = channels
            .iter()
            .map(|_| Self::empty_batch(keyed, batch_size))
            .collect();
        Self {
            keyed,
            queued: vec![0; channels.len()],
            channels,
            buffers,
            selector,
            batch_size,
            cancel,
            metrics: None,
            wakeup: None,
            overflow: Vec::new(),
            overdraft: false,
        }
    }

    /// Stops waiting for room when `wakeup` rings, going into overdraft instead.
    pub fn with_wakeup(mut self, wakeup: Option<Arc<dyn Wakeup>>) -> Self {
        self.overflow = self.channels.iter().map(|_| VecDeque::new()).collect();
        self.wakeup = wakeup;
        self
    }

    /// Sends `element` on `channel`, or queues it in overdraft (see the type's doc).
    fn send_element(&mut self, channel: usize, element: StreamElement<T>) -> Result<(), TaskError> {
        let Some(wakeup) = &self.wakeup else {
            return self.channels[channel].send(element, &self.cancel);
        };
        let deferred = if self.overdraft {
            if self.overflow[channel].is_empty() {
                // Room now is used now; otherwise it waits its turn behind the overflow.
                let rung = AlreadyRung(crossbeam_channel::never());
                self.channels[channel].send_or_defer(element, &self.cancel, &rung)?
            } else {
                Some(element)
            }
        } else {
            self.channels[channel].send_or_defer(element, &self.cancel, wakeup.as_ref())?
        };
        if let Some(element) = deferred {
            self.overflow[channel].push_back(element);
            self.overdraft = true;
        }
        Ok(())
    }

    /// Sends the overdraft, in order. `deferrable`: stops (and stays in overdraft) when the
    /// wakeup rings again while waiting, or at `until`; returns whether everything went.
    fn drain_overflow(
        &mut self,
        deferrable: bool,
        until: Option<std::time::Instant>,
    ) -> Result<bool, TaskError> {
        if !self.overdraft {
            return Ok(true);
        }
        for channel in 0..self.overflow.len() {
            while let Some(element) = self.overflow[channel].pop_front() {
                let deferred = match (&self.wakeup, deferrable) {
                    (Some(wakeup), true) => match until {
                        Some(deadline) => {
                            let by = WakeupBy {
                                inner: wakeup.as_ref(),
                                deadline,
                            };
                            self.channels[channel].send_or_defer(element, &self.cancel, &by)?
                        }
                        None => self.channels[channel].send_or_defer(
                            element,
                            &self.cancel,
                            wakeup.as_ref(),
                        )?,
                    },
                    _ => {
                        self.channels[channel].send(element, &self.cancel)?;
                        None
                    }
                };
                if let Some(back) = deferred {
                    self.overflow[channel].push_front(back);
                    return Ok(false);
                }
            }
        }
        self.overdraft = false;
        Ok(true)
    }

    /// Ends an overdraft, waiting for room unless the wakeup rings again or `until`
    /// passes; returns whether the writer is still in overdraft.
    pub fn settle_overdraft(
        &mut self,
        until: Option<std::time::Instant>,
    ) -> Result<bool, TaskError> {
        self.drain_overflow(true, until).map(|done| !done)
    }

    /// Counts what the writer sends in `metrics`: records, and the output queue.
    pub fn with_metrics(mut self, metrics: Option<Arc<TaskMetrics>>) -> Self {
        self.metrics = metrics;
        self
    }

    fn empty_batch(keyed: bool, batch_size: usize) -> RecordBatch<T> {
        if keyed {
            RecordBatch::keyed_with_capacity(batch_size)
        } else {
            RecordBatch::with_capacity(batch_size)
        }
    }

    #[inline]
    fn push(&mut self, channel: usize, record: T, timestamp: Option<i64>) -> Result<(), TaskError> {
        let buffer = &mut self.buffers[channel];
        buffer.push(record, timestamp);
        if buffer.len() >= self.batch_size {
            self.send_batch(channel)?;
        }
        Ok(())
    }

    #[inline]
    fn push_keyed(
        &mut self,
        channel: usize,
        record: T,
        timestamp: Option<i64>,
        key_group: u32,
    ) -> Result<(), TaskError> {
        let buffer = &mut self.buffers[channel];
        buffer.push_keyed(record, timestamp, key_group);
        if buffer.len() >= self.batch_size {
            self.send_batch(channel)?;
        }
        Ok(())
    }

    // Once per batch: out of line, so that `push` stays small.
    #[cold]
    #[inline(never)]
    fn send_batch(&mut self, channel: usize) -> Result<(), TaskError> {
        let batch = std::mem::replace(
            &mut self.buffers[channel],
            Self::empty_batch(self.keyed, self.batch_size),
        );
        self.send_element(channel, StreamElement::Records(batch))?;
        if let Some(metrics) = &self.metrics {
            // One channel's queue per batch: the gauge is the sum of every channel's last
            // known length, kept up to date by deltas.
            let queued = self.channels[channel].queued() as i64;
            metrics.output_queue.add(queued - self.queued[channel]);
            self.queued[channel] = queued;
        }
        Ok(())
    }
}

impl<T: Record> RecordWriter<T> {
    /// Sends one record (with its timestamp, if any) to the channel its partitioner picks.
    #[inline]
    pub fn collect(&mut self, record: T, timestamp: Option<i64>) -> Result<(), TaskError> {
        let n = self.channels.len();
        match &mut self.selector {
            ChannelSelector::Forward => self.push(0, record, timestamp),
            ChannelSelector::RoundRobin { next } => {
                let channel = *next;
                *next = if channel + 1 == n { 0 } else { channel + 1 };
                self.push(channel, record, timestamp)
            }
            ChannelSelector::Broadcast => {
                for channel in 0..n - 1 {
                    self.push(channel, record.clone(), timestamp)?;
                }
                self.push(n - 1, record, timestamp)
            }
            ChannelSelector::Hash {
                key_group_of,
                assigner,
                name,
            } => {
                let group = key_group_in_user_code(key_group_of.as_ref(), &record, assigner, name)?;
                let channel =
                    operator_index_for_key_group(assigner.max_parallelism(), n as u32, group);
                self.push_keyed(channel as usize, record, timestamp, group)
            }
        }
    }

    /// Sends one record read at `origin` (an attempt that traces origins) to the channel its
    /// partitioner picks, its origin with it.
    fn collect_traced(
        &mut self,
        record: T,
        timestamp: Option<i64>,
        origin: Option<crate::connectors::origin::TracedOrigin>,
    ) -> Result<(), TaskError> {
        let n = self.channels.len();
        let (channels, key_group) = match &mut self.selector {
            ChannelSelector::Forward => (0..1, None),
            ChannelSelector::RoundRobin { next } => {
                let channel = *next;
                *next = if channel + 1 == n { 0 } else { channel + 1 };
                (channel..channel + 1, None)
            }
            ChannelSelector::Broadcast => (0..n, None),
            ChannelSelector::Hash {
                key_group_of,
                assigner,
                name,
            } => {
                // A poison record the key selector fails on is named, as a failing
                // operator's is.
                let group = key_group_in_user_code(key_group_of.as_ref(), &record, assigner, name)
                    .map_err(|error| match &origin {
                        Some(origin) => error.at_record(&origin.to_origin()),
                        None => error,
                    })?;
                let channel =
                    operator_index_for_key_group(assigner.max_parallelism(), n as u32, group)
                        as usize;
                (channel..channel + 1, Some(group))
            }
        };
        let last = channels.end - 1;
        let mut record = Some(record);
        for channel in channels {
            let value = match channel == last {
                true => record.take(),
                false => record.clone(),
            };
            let Some(value) = value else { break };
            let buffer = &mut self.buffers[channel];
            buffer.push_traced(value, timestamp, key_group, origin);
            if buffer.len() >= self.batch_size {
                self.send_batch(channel)?;
            }
        }
        Ok(())
    }

    /// Sends `event` on every channel, after the records buffered before it. An unaligned
    /// checkpoint's barrier goes ahead of everything first, on every channel's priority
    /// lane — before the flush, which may wait for room — and then in order as well: the
    /// receivers snapshot at the first, and the second marks where the records in flight
    /// before the barrier end.
    pub fn emit_event(&mut self, event: &StreamEvent) -> Result<(), TaskError> {
        if let StreamEvent::Barrier(barrier) = event {
            if barrier.unaligned {
                for channel in &self.channels {
                    channel.send_priority(*barrier)?;
                }
            }
        }
        // Everything before the event, overdraft first, goes before it, however long the
        // wait for room.
        self.drain_overflow(false, None)?;
        for channel in 0..self.channels.len() {
            if !self.buffers[channel].is_empty() {
                let batch = std::mem::replace(
                    &mut self.buffers[channel],
                    Self::empty_batch(self.keyed, self.batch_size),
                );
                self.channels[channel].send(StreamElement::Records(batch), &self.cancel)?;
            }
        }
        for channel in &self.channels {
            channel.send(StreamElement::Event(*event), &self.cancel)?;
        }
        Ok(())
    }

    /// Sends every partly filled batch (after the overdraft; with a wakeup that rings
    /// meanwhile, what is left waits for the next flush).
    pub fn flush(&mut self) -> Result<(), TaskError> {
        if !self.drain_overflow(true, None)? {
            return Ok(());
        }
        for channel in 0..self.channels.len() {
            if !self.buffers[channel].is_empty() {
                self.send_batch(channel)?;
            }
        }
        Ok(())
    }
}

/// A record writer ends a chain: what reaches it leaves the task.
impl<T: Record> ChainedNode for RecordWriter<T> {
    fn name(&self) -> &str {
        "record writer"
    }
    fn input_type(&self) -> TypeId {
        TypeId::of::<T>()
    }
    fn output_type(&self) -> Option<TypeId> {
        None
    }
    fn set_successors(&mut self, _successors: Vec<usize>) {}
    fn open(&mut self) -> Result<(), TaskError> {
        Ok(())
    }
    fn process_records(
        &mut self,
        batch: &mut dyn Any,
        _rest: &mut ChainTail,
    ) -> Result<(), TaskError> {
        let batch = batch.downcast_mut::<RecordBatch<T>>().ok_or_else(|| {
            TaskError::Internal("a record writer received records of another type".into())
        })?;
        // Records leaving the task, once each: a broadcast sends each on every channel.
        if let Some(metrics) = &self.metrics {
            metrics.records_out.inc_by(batch.len() as u64);
        }
        if batch.has_origins() {
            for (record, timestamp, _, origin) in batch.drain_traced() {
                self.collect_traced(record, timestamp, origin)?;
            }
        } else if batch.has_timestamps() {
            for (record, timestamp) in batch.drain() {
                self.collect(record, timestamp)?;
            }
        } else {
            for record in batch.drain_records() {
                self.collect(record, None)?;
            }
        }
        Ok(())
    }
    fn process_watermark(
        &mut self,
        watermark: Watermark,
        _rest: &mut ChainTail,
    ) -> Result<(), TaskError> {
        self.emit_event(&StreamEvent::Watermark(watermark))
    }
    fn process_watermark_status(
        &mut self,
        status: WatermarkStatus,
        _rest: &mut ChainTail,
    ) -> Result<(), TaskError> {
        self.emit_event(&StreamEvent::WatermarkStatus(status))
    }
    fn next_processing_time(&self) -> Option<i64> {
        None
    }
    fn on_processing_time(&mut self, _time: i64, _rest: &mut ChainTail) -> Result<(), TaskError> {
        Ok(())
    }
    fn end_input(&mut self, _cause: InputEnd, _rest: &mut ChainTail) -> Result<(), TaskError> {
        Ok(())
    }
    fn prepare_snapshot_pre_barrier(
        &mut self,
        _checkpoint_id: u64,
        _rest: &mut ChainTail,
    ) -> Result<(), TaskError> {
        Ok(())
    }
    fn snapshot_state(
        &mut self,
        _barrier: CheckpointBarrier,
        _into: &mut Vec<OperatorSnapshot>,
    ) -> Result<(), TaskError> {
        Ok(())
    }
    fn notify_checkpoint(
        &mut self,
        _notification: CheckpointNotification,
    ) -> Result<(), TaskError> {
        Ok(())
    }
    fn broadcast_event(&mut self, event: &StreamEvent) -> Result<(), TaskError> {
        self.emit_event(event)
    }
    fn flush(&mut self) -> Result<(), TaskError> {
        RecordWriter::flush(self)
    }
    fn settle_overdraft(&mut self, until: Option<std::time::Instant>) -> Result<bool, TaskError> {
        RecordWriter::settle_overdraft(self, until)
    }
    fn close(&mut self) -> Result<(), TaskError> {
        Ok(())
    }
    fn report_metrics(&self, _into: &mut Vec<OperatorMetrics>) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::channel::{cancel_pair, channel, ChannelReceiver};
    use crate::runtime::key_selector::FnKeySelector;

    fn drain(rx: &ChannelReceiver<u64>) -> (Vec<u64>, Vec<StreamEvent>) {
        let (mut records, mut events) = (vec![], vec![]);
        while let Ok(el) = rx.rx.try_recv() {
            match el {
                StreamElement::Records(b) => records.extend(b.into_records()),
                StreamElement::Event(e) => events.push(e),
            }
        }
        (records, events)
    }

    fn writer(
        n: usize,
        selector: ChannelSelector<u64>,
    ) -> (RecordWriter<u64>, Vec<ChannelReceiver<u64>>) {
        let (_h, cancel) = cancel_pair();
        std::mem::forget(_h);
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..n).map(|_| channel(64)).unzip();
        (RecordWriter::new(txs, selector, 4, cancel), rxs)
    }

    #[test]
    fn round_robin_spreads_evenly() {
        let (mut w, rxs) = writer(3, ChannelSelector::RoundRobin { next: 0 });
        (0..30).for_each(|i| w.collect(i, None).unwrap());
        w.emit_event(&StreamEvent::EndOfStream).unwrap();
        for rx in &rxs {
            let (records, events) = drain(rx);
            assert_eq!(records.len(), 10);
            assert_eq!(events, vec![StreamEvent::EndOfStream]);
        }
    }

    #[test]
    fn broadcast_reaches_every_channel() {
        let (mut w, rxs) = writer(2, ChannelSelector::Broadcast);
        (0..5).for_each(|i| w.collect(i, None).unwrap());
        w.flush().unwrap();
        for rx in &rxs {
            assert_eq!(drain(rx).0, vec![0, 1, 2, 3, 4]);
        }
    }

    #[test]
    fn hash_sends_each_key_to_its_key_group_owner() {
        let selector = ChannelSelector::Hash {
            key_group_of: Arc::new(FnKeySelector::new(|r: &u64| r % 10)),
            assigner: KeyGroupAssigner::new(16),
            name: Arc::from("key selector of `count`"),
        };
        let (mut w, rxs) = writer(3, selector);
        (0..100).for_each(|i| w.collect(i, None).unwrap());
        w.flush().unwrap();
        let mut assigner = KeyGroupAssigner::new(16);
        for (subtask, rx) in rxs.iter().enumerate() {
            for r in drain(rx).0 {
                let group = assigner.key_group(&(r % 10)).unwrap();
                assert_eq!(operator_index_for_key_group(16, 3, group), subtask as u32);
            }
        }
    }

    #[test]
    fn a_key_selector_that_panics_is_an_error_of_the_key_selector() {
        let selector = ChannelSelector::Hash {
            key_group_of: Arc::new(FnKeySelector::new(|r: &u64| {
                assert_ne!(*r, 7, "no key for 7");
                *r
            })),
            assigner: KeyGroupAssigner::new(16),
            name: Arc::from("key selector of `count`"),
        };
        let (mut w, _rxs) = writer(2, selector);
        (0..7).for_each(|i| w.collect(i, None).unwrap());
        let error = w.collect(7, None).unwrap_err();
        assert!(
            matches!(&error, TaskError::Operator { operator, cause }
                if operator == "key selector of `count`"
                    && matches!(**cause, TaskError::UserPanic { .. })),
            "{error:?}"
        );
        assert!(error.to_string().contains("no key for 7"), "{error}");
    }

    #[test]
    fn a_writer_woken_while_waiting_for_room_queues_in_overdraft_and_sends_it_first() {
        let (_h, cancel) = cancel_pair();
        std::mem::forget(_h);
        let (tx, rx) = channel::<u64>(1);
        let (ring, wakeup) = crossbeam_channel::bounded::<()>(1);
        let mut w = RecordWriter::new(vec![tx], ChannelSelector::Forward, 2, cancel)
            .with_wakeup(Some(Arc::new(wakeup.clone())));
        // The first batch fills the channel; the second would wait, but the wakeup rings.
        ring.send(()).unwrap();
        (0..6).for_each(|i| w.collect(i, None).unwrap());
        assert_eq!(rx.rx.len(), 1, "nothing waited for room");
        // Settling waits for room unless rung again: here it is rung, so it returns.
        assert!(w.settle_overdraft(None).unwrap(), "still in overdraft");
        // An event goes after everything before it, overdraft first, waiting for room.
        let reader = std::thread::spawn(move || drain_blocking(&rx, 1));
        while wakeup.try_recv().is_ok() {}
        w.emit_event(&StreamEvent::EndOfStream).unwrap();
        let (records, events) = reader.join().unwrap();
        assert_eq!(records, vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(events, vec![StreamEvent::EndOfStream]);
    }

    /// Reads `rx` until `events` events came.
    fn drain_blocking(rx: &ChannelReceiver<u64>, events: usize) -> (Vec<u64>, Vec<StreamEvent>) {
        let (mut records, mut seen) = (vec![], vec![]);
        while seen.len() < events {
            match rx.rx.recv().unwrap() {
                StreamElement::Records(b) => records.extend(b.into_records()),
                StreamElement::Event(e) => seen.push(e),
            }
        }
        (records, seen)
    }

    #[test]
    fn events_follow_buffered_records() {
        let (mut w, rxs) = writer(1, ChannelSelector::Forward);
        w.collect(7, None).unwrap();
        w.emit_event(&StreamEvent::EndOfStream).unwrap();
        let first = rxs[0].rx.try_recv().unwrap();
        assert_eq!(first, StreamElement::Records(vec![7].into()));
    }
}
