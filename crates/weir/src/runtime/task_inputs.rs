//! The inputs of a stream task as one list of channels: one typed input gate, or two (a
//! connected stream), so that alignment, watermarks and the end of input work the same way
//! over every channel of the task.

use std::time::Instant;

use crossbeam_channel::{Receiver, Select};

use crate::checkpoint::metadata::ListStateEntry;
use crate::error::TaskError;
use crate::record::Record;
use crate::runtime::batch::RecordBatch;
use crate::runtime::chain::OperatorChain;
use crate::runtime::input_gate::{GateNext, InputGate};
use crate::runtime::stream_element::{CheckpointBarrier, StreamElement, StreamEvent};
use crate::runtime::task::TaskControl;

/// What a read of the inputs yielded: records (held by the inputs until
/// [`TaskInputs::process_pending`] hands them to the chain) or an event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum InputEvent {
    /// A batch of records is pending.
    Records,
    /// An in-band event.
    Event(StreamEvent),
}

/// The channels a stream task reads, numbered across all its inputs.
pub trait TaskInputs: Send {
    /// Number of channels, over all inputs.
    fn num_channels(&self) -> usize;
    /// The next element of a readable channel, if one is ready now.
    fn poll(&mut self) -> Result<Option<(usize, InputEvent)>, TaskError>;
    /// The next element, waiting for one, for a message on `side`, for cancellation, or
    /// until `deadline`.
    fn next_blocking(
        &mut self,
        side: &Receiver<TaskControl>,
        deadline: Option<Instant>,
    ) -> Result<GateNext<InputEvent, TaskControl>, TaskError>;
    /// Hands the pending batch to the chain, as records of the input they came from. With
    /// `chunk` (unaligned checkpoints), in chunks of that many records, stopping early when
    /// a barrier waits on a priority lane: the rest goes back in front of its channel.
    fn process_pending(
        &mut self,
        chain: &mut OperatorChain,
        chunk: Option<usize>,
    ) -> Result<(), TaskError>;
    /// Holds back (or releases) `channel`.
    fn set_blocked(&mut self, channel: usize, blocked: bool);
    /// Releases every held-back channel.
    fn unblock_all(&mut self);
    /// Marks `channel` as ended.
    fn mark_finished(&mut self, channel: usize);
    /// Whether `channel` has ended.
    fn is_channel_finished(&self, channel: usize) -> bool;
    /// For each channel, whether it is still open.
    fn open_flags(&self) -> Vec<bool>;
    /// Whether every channel has ended.
    fn is_finished(&self) -> bool;

    // Unaligned checkpoints (see `InputGate`).
    /// Reads the priority lanes from now on.
    fn watch_priority(&mut self);
    /// A barrier that overtook a channel's queue, if one waits.
    fn poll_priority(&mut self) -> Option<(usize, CheckpointBarrier)>;
    /// Starts capturing checkpoint `id`'s in-flight records on `channels`.
    fn start_capture(&mut self, id: u64, channels: &[usize]) -> Result<(), TaskError>;
    /// Reads capturing channels ahead as far as they have elements.
    fn drain_captures(&mut self) -> Result<(), TaskError>;
    /// Whether every capture has reached its channel's barrier or end.
    fn capture_complete(&self) -> bool;
    /// Gives up the capture in progress.
    fn abort_capture(&mut self);
    /// The captured channel state.
    fn take_channel_state(&mut self) -> Vec<ListStateEntry>;
}

/// Pushes `batch` (read from `channel` of `gate`) into the chain with `process`, in chunks
/// of `n` records, until a barrier waits on a priority lane or while a capture of in-flight
/// records is in progress (`other_capturing`: on the task's other input), so that the task
/// goes on reading the capturing channels; the rest goes back in front of the channel.
fn process_in_chunks<T: Record>(
    gate: &mut InputGate<T>,
    channel: usize,
    batch: &mut RecordBatch<T>,
    n: usize,
    other_capturing: bool,
    mut process: impl FnMut(&mut RecordBatch<T>) -> Result<(), TaskError>,
) -> Result<(), TaskError> {
    if batch.len() <= n {
        return process(batch);
    }
    let mut chunks = std::mem::take(batch).into_chunks(n);
    while let Some(mut piece) = chunks.next_chunk() {
        process(&mut piece)?;
        if gate.priority_pending() || gate.capturing() || other_capturing {
            let rest = chunks.into_rest();
            if !rest.is_empty() {
                gate.put_back(channel, rest);
            }
            return Ok(());
        }
    }
    Ok(())
}

fn event_of<T>(element: StreamElement<T>, pending: &mut Option<RecordBatch<T>>) -> InputEvent {
    match element {
        StreamElement::Records(batch) => {
            *pending = Some(batch);
            InputEvent::Records
        }
        StreamElement::Event(event) => InputEvent::Event(event),
    }
}

/// The one input of a one-input task.
pub struct OneInput<T> {
    gate: InputGate<T>,
    pending: Option<RecordBatch<T>>,
    /// The channel the pending batch came from.
    pending_channel: usize,
}

impl<T> OneInput<T> {
    /// Reads `gate`.
    pub fn new(gate: InputGate<T>) -> Self {
        Self {
            gate,
            pending: None,
            pending_channel: 0,
        }
    }
}

impl<T: Record> TaskInputs for OneInput<T> {
    fn num_channels(&self) -> usize {
        self.gate.num_channels()
    }
    fn poll(&mut self) -> Result<Option<(usize, InputEvent)>, TaskError> {
        Ok(self.gate.poll()?.map(|(channel, element)| {
            self.pending_channel = channel;
            (channel, event_of(element, &mut self.pending))
        }))
    }
    fn next_blocking(
        &mut self,
        side: &Receiver<TaskControl>,
        deadline: Option<Instant>,
    ) -> Result<GateNext<InputEvent, TaskControl>, TaskError> {
        Ok(match self.gate.next_blocking(side, deadline)? {
            GateNext::Element(channel, element) => {
                self.pending_channel = channel;
                GateNext::Element(channel, event_of(element, &mut self.pending))
            }
            GateNext::Other(control) => GateNext::Other(control),
            GateNext::Timeout => GateNext::Timeout,
            GateNext::Priority(channel, barrier) => GateNext::Priority(channel, barrier),
        })
    }
    fn process_pending(
        &mut self,
        chain: &mut OperatorChain,
        chunk: Option<usize>,
    ) -> Result<(), TaskError> {
        match (self.pending.as_mut(), chunk) {
            (Some(batch), Some(n)) => process_in_chunks(
                &mut self.gate,
                self.pending_channel,
                batch,
                n,
                false,
                |piece| chain.process_records(piece),
            ),
            (Some(batch), None) => chain.process_records(batch),
            (None, _) => Ok(()),
        }
    }
    fn set_blocked(&mut self, channel: usize, blocked: bool) {
        self.gate.set_blocked(channel, blocked);
    }
    fn unblock_all(&mut self) {
        self.gate.unblock_all();
    }
    fn mark_finished(&mut self, channel: usize) {
        self.gate.mark_finished(channel);
    }
    fn is_channel_finished(&self, channel: usize) -> bool {
        self.gate.is_channel_finished(channel)
    }
    fn open_flags(&self) -> Vec<bool> {
        self.gate.open_flags()
    }
    fn is_finished(&self) -> bool {
        self.gate.is_finished()
    }
    fn watch_priority(&mut self) {
        self.gate.watch_priority();
    }
    fn poll_priority(&mut self) -> Option<(usize, CheckpointBarrier)> {
        self.gate.poll_priority()
    }
    fn start_capture(&mut self, id: u64, channels: &[usize]) -> Result<(), TaskError> {
        self.gate.start_capture(id, channels)
    }
    fn drain_captures(&mut self) -> Result<(), TaskError> {
        self.gate.drain_captures()
    }
    fn capture_complete(&self) -> bool {
        self.gate.capture_complete()
    }
    fn abort_capture(&mut self) {
        self.gate.abort_capture();
    }
    fn take_channel_state(&mut self) -> Vec<ListStateEntry> {
        self.gate.take_channel_state()
    }
}

/// The two inputs of a two-input task (connected streams): channels `0..n1` are the first
/// input's, the rest the second's.
pub struct TwoInputs<A, B> {
    first: InputGate<A>,
    second: InputGate<B>,
    pending_first: Option<RecordBatch<A>>,
    pending_second: Option<RecordBatch<B>>,
    /// The channel (of its gate) the pending batch came from.
    pending_channel: usize,
    /// Which gate the next poll tries first, so that neither input starves the other.
    second_next: bool,
}

impl<A: Record, B: Record> TwoInputs<A, B> {
    /// Reads `first` and `second`.
    pub fn new(first: InputGate<A>, second: InputGate<B>) -> Self {
        Self {
            first,
            second,
            pending_first: None,
            pending_second: None,
            pending_channel: 0,
            second_next: false,
        }
    }

    fn split(&self, channel: usize) -> Result<usize, usize> {
        let n = self.first.num_channels();
        if channel < n {
            Ok(channel)
        } else {
            Err(channel - n)
        }
    }
}

impl<A: Record, B: Record> TaskInputs for TwoInputs<A, B> {
    fn num_channels(&self) -> usize {
        self.first.num_channels() + self.second.num_channels()
    }

    fn poll(&mut self) -> Result<Option<(usize, InputEvent)>, TaskError> {
        let n = self.first.num_channels();
        for _ in 0..2 {
            let second = self.second_next;
            self.second_next = !second;
            if second {
                if let Some((channel, element)) = self.second.poll()? {
                    self.pending_first = None;
                    self.pending_channel = channel;
                    return Ok(Some((
                        n + channel,
                        event_of(element, &mut self.pending_second),
                    )));
                }
            } else if let Some((channel, element)) = self.first.poll()? {
                self.pending_second = None;
                self.pending_channel = channel;
                return Ok(Some((channel, event_of(element, &mut self.pending_first))));
            }
        }
        Ok(None)
    }

    fn next_blocking(
        &mut self,
        side: &Receiver<TaskControl>,
        deadline: Option<Instant>,
    ) -> Result<GateNext<InputEvent, TaskControl>, TaskError> {
        if let Some((channel, event)) = self.poll()? {
            return Ok(GateNext::Element(channel, event));
        }
        let cancel = self.first.cancel().clone();
        let n = self.first.num_channels();
        let first = self.first.readable();
        let second = self.second.readable();
        let lanes: Vec<(usize, &Receiver<CheckpointBarrier>)> = self
            .first
            .priority_lanes()
            .into_iter()
            .chain(
                self.second
                    .priority_lanes()
                    .into_iter()
                    .map(|(c, rx)| (n + c, rx)),
            )
            .collect();
        let mut select = Select::new();
        select.recv(cancel.receiver());
        select.recv(side);
        for (_, rx) in &first {
            select.recv(rx);
        }
        for (_, rx) in &second {
            select.recv(rx);
        }
        for (_, rx) in &lanes {
            select.recv(rx);
        }
        crate::metrics::CurrentTask::set_input_queue(0);
        let operation = match deadline {
            None => crate::metrics::CurrentTask::idle(|| select.select()),
            Some(deadline) => {
                match crate::metrics::CurrentTask::idle(|| select.select_deadline(deadline)) {
                    Ok(operation) => operation,
                    Err(_) => return Ok(GateNext::Timeout),
                }
            }
        };
        // Select indices follow insertion order: cancel, side, the first input's channels,
        // then the second's.
        let index = operation.index();
        if index == 0 {
            let _ = operation.recv(cancel.receiver());
            return Err(TaskError::Cancelled);
        }
        if index == 1 {
            return match operation.recv(side) {
                Ok(message) => Ok(GateNext::Other(message)),
                Err(_) => Err(TaskError::Cancelled),
            };
        }
        if index - 2 >= first.len() + second.len() {
            let (channel, rx) = lanes[index - 2 - first.len() - second.len()];
            // A lane whose producer ended is seen closed by the next `poll_priority`.
            return Ok(match operation.recv(rx) {
                Ok(barrier) => GateNext::Priority(channel, barrier),
                Err(_) => {
                    drop((first, second, lanes));
                    self.poll_priority()
                        .map_or(GateNext::Timeout, |(c, b)| GateNext::Priority(c, b))
                }
            });
        }
        drop(lanes);
        if index - 2 < first.len() {
            let (channel, rx) = first[index - 2];
            let element = match operation.recv(rx) {
                Ok(element) => element,
                Err(_) => {
                    drop((first, second));
                    return Err(self.first.disconnected(channel));
                }
            };
            drop((first, second));
            self.first.was_read(channel, &element)?;
            self.pending_second = None;
            self.pending_channel = channel;
            Ok(GateNext::Element(
                channel,
                event_of(element, &mut self.pending_first),
            ))
        } else {
            let (channel, rx) = second[index - 2 - first.len()];
            let element = match operation.recv(rx) {
                Ok(element) => element,
                Err(_) => {
                    drop((first, second));
                    return Err(self.second.disconnected(channel));
                }
            };
            drop((first, second));
            self.second.was_read(channel, &element)?;
            self.pending_first = None;
            self.pending_channel = channel;
            Ok(GateNext::Element(
                n + channel,
                event_of(element, &mut self.pending_second),
            ))
        }
    }

    fn process_pending(
        &mut self,
        chain: &mut OperatorChain,
        chunk: Option<usize>,
    ) -> Result<(), TaskError> {
        let channel = self.pending_channel;
        if let Some(batch) = self.pending_first.as_mut() {
            match chunk {
                Some(n) => {
                    let other = self.second.capturing();
                    process_in_chunks(&mut self.first, channel, batch, n, other, |piece| {
                        chain.process_records(piece)
                    })?
                }
                None => chain.process_records(batch)?,
            }
        }
        if let Some(batch) = self.pending_second.as_mut() {
            match chunk {
                Some(n) => {
                    let other = self.first.capturing();
                    process_in_chunks(&mut self.second, channel, batch, n, other, |piece| {
                        chain.process_records_second(piece)
                    })?
                }
                None => chain.process_records_second(batch)?,
            }
        }
        Ok(())
    }

    fn set_blocked(&mut self, channel: usize, blocked: bool) {
        match self.split(channel) {
            Ok(c) => self.first.set_blocked(c, blocked),
            Err(c) => self.second.set_blocked(c, blocked),
        }
    }
    fn unblock_all(&mut self) {
        self.first.unblock_all();
        self.second.unblock_all();
    }
    fn mark_finished(&mut self, channel: usize) {
        match self.split(channel) {
            Ok(c) => self.first.mark_finished(c),
            Err(c) => self.second.mark_finished(c),
        }
    }
    fn is_channel_finished(&self, channel: usize) -> bool {
        match self.split(channel) {
            Ok(c) => self.first.is_channel_finished(c),
            Err(c) => self.second.is_channel_finished(c),
        }
    }
    fn open_flags(&self) -> Vec<bool> {
        let mut flags = self.first.open_flags();
        flags.extend(self.second.open_flags());
        flags
    }
    fn is_finished(&self) -> bool {
        self.first.is_finished() && self.second.is_finished()
    }
    fn watch_priority(&mut self) {
        self.first.watch_priority();
        self.second.watch_priority();
    }
    fn poll_priority(&mut self) -> Option<(usize, CheckpointBarrier)> {
        let n = self.first.num_channels();
        self.first
            .poll_priority()
            .or_else(|| self.second.poll_priority().map(|(c, b)| (n + c, b)))
    }
    fn start_capture(&mut self, id: u64, channels: &[usize]) -> Result<(), TaskError> {
        let n = self.first.num_channels();
        let (first, second): (Vec<usize>, Vec<usize>) = channels.iter().partition(|c| **c < n);
        self.first.start_capture(id, &first)?;
        let second: Vec<usize> = second.into_iter().map(|c| c - n).collect();
        self.second.start_capture(id, &second)
    }
    fn drain_captures(&mut self) -> Result<(), TaskError> {
        self.first.drain_captures()?;
        self.second.drain_captures()
    }
    fn capture_complete(&self) -> bool {
        self.first.capture_complete() && self.second.capture_complete()
    }
    fn abort_capture(&mut self) {
        self.first.abort_capture();
        self.second.abort_capture();
    }
    fn take_channel_state(&mut self) -> Vec<ListStateEntry> {
        let mut entries = self.first.take_channel_state();
        entries.extend(self.second.take_channel_state());
        entries
    }
}
