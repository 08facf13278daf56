//! A task's inputs: one bounded channel per upstream subtask, read fairly, with the ability
//! to hold back a channel (barrier alignment) while reading the others.
//!
//! For unaligned checkpoints the gate also reads each channel's priority lane (barriers that
//! overtook the queue), and captures a checkpoint's in-flight records: from the moment the
//! task snapshots until each channel's in-order barrier, every record that comes out of
//! the channel is copied into the checkpoint's channel state. To finish that capture
//! without waiting for the task to process the records, the gate reads the capturing
//! channels ahead into a look-ahead queue, from which the task then takes them in order.

use std::collections::VecDeque;

use crossbeam_channel::{Receiver, Select, TryRecvError};

use crate::checkpoint::metadata::ListStateEntry;
use crate::error::TaskError;
use crate::metrics::CurrentTask;
use crate::record::Record;
use crate::runtime::batch::RecordBatch;
use crate::runtime::channel::{CancelToken, ChannelReceiver};
use crate::runtime::channel_state::InFlightRecorder;
use crate::runtime::stream_element::{CheckpointBarrier, StreamElement, StreamEvent};

/// How many elements a gate hands out between two publications of its queue length.
const QUEUE_SAMPLE_EVERY: u32 = 8;

/// What a blocking read of the gate yields.
#[derive(Debug, PartialEq)]
pub enum GateNext<E, C> {
    /// An element of input channel `.0`.
    Element(usize, E),
    /// A message from the side channel watched alongside the inputs.
    Other(C),
    /// The deadline passed first.
    Timeout,
    /// A barrier that overtook the queue of input channel `.0` (an unaligned checkpoint's).
    Priority(usize, CheckpointBarrier),
}

struct InputChannel<T> {
    receiver: ChannelReceiver<T>,
    finished: bool,
    blocked: bool,
    /// Elements read out of the channel ahead of the task, in order.
    lookahead: VecDeque<StreamElement<T>>,
    /// The checkpoint whose in-flight records this channel is being captured for, until
    /// its in-order barrier (or its end) comes out of the channel.
    capturing: Option<u64>,
    /// The priority lane's sender is gone (the producer ended): not watched any more.
    priority_closed: bool,
}

impl<T> InputChannel<T> {
    fn watches_priority(&self) -> bool {
        !self.finished && !self.priority_closed
    }
}

impl<T> InputChannel<T> {
    fn is_readable(&self) -> bool {
        !self.finished && !self.blocked
    }
}

/// The input channels of one subtask.
pub struct InputGate<T> {
    channels: Vec<InputChannel<T>>,
    next: usize,
    open: usize,
    cancel: CancelToken,
    /// Elements taken since the input queue length was last published.
    since_published: u32,
    /// Network bytes received, as last added to the task's `numBytesIn`.
    bytes_published: u64,
    /// Whether the priority lanes are read (unaligned checkpoints are on).
    watch_priority: bool,
    /// The in-flight records captured for the checkpoint being captured.
    recorder: InFlightRecorder,
    /// Rung when a barrier arrives on a priority lane; the task's record writers watch it
    /// while they wait for room, so it is emptied whenever the lanes are read.
    doorbell: Option<Receiver<()>>,
}

impl<T> InputGate<T> {
    /// A gate over `receivers`, indexed by input channel index.
    pub fn new(receivers: Vec<ChannelReceiver<T>>, cancel: CancelToken) -> Self {
        let open = receivers.len();
        Self {
            channels: receivers
                .into_iter()
                .map(|receiver| InputChannel {
                    receiver,
                    finished: false,
                    blocked: false,
                    lookahead: VecDeque::new(),
                    capturing: None,
                    priority_closed: false,
                })
                .collect(),
            next: 0,
            open,
            cancel,
            since_published: 0,
            bytes_published: 0,
            watch_priority: false,
            recorder: InFlightRecorder::default(),
            doorbell: None,
        }
    }

    /// Rings `bell` (whose receiving end is `doorbell`) when a barrier arrives on any
    /// channel's priority lane.
    pub fn with_doorbell(
        mut self,
        bell: crossbeam_channel::Sender<()>,
        doorbell: Receiver<()>,
    ) -> Self {
        for channel in &self.channels {
            channel.receiver.set_doorbell(bell.clone());
        }
        self.doorbell = Some(doorbell);
        self
    }

    /// Stores the in-flight records of this gate as input `input` of its task, fed by a
    /// broadcast exchange or not.
    pub fn with_channel_state(mut self, input: u8, broadcast: bool) -> Self {
        self.recorder = InFlightRecorder::new(input, broadcast);
        self
    }

    /// Reads the channels' priority lanes from now on (unaligned checkpoints are on).
    pub fn watch_priority(&mut self) {
        self.watch_priority = true;
    }

    /// A barrier that overtook the queue of an open channel, if one is waiting.
    pub fn poll_priority(&mut self) -> Option<(usize, CheckpointBarrier)> {
        if !self.watch_priority {
            return None;
        }
        if let Some(doorbell) = &self.doorbell {
            while doorbell.try_recv().is_ok() {}
        }
        for (i, channel) in self.channels.iter_mut().enumerate() {
            if !channel.watches_priority() {
                continue;
            }
            match channel.receiver.priority.try_recv() {
                Ok(barrier) => return Some((i, barrier)),
                Err(TryRecvError::Disconnected) => channel.priority_closed = true,
                Err(TryRecvError::Empty) => {}
            }
        }
        None
    }

    /// Whether a barrier waits on some channel's priority lane (not taken).
    pub fn priority_pending(&self) -> bool {
        self.watch_priority
            && self
                .channels
                .iter()
                .any(|c| c.watches_priority() && !c.receiver.priority.is_empty())
    }

    /// Puts the unprocessed rest of a batch read from `channel` back in front of it: a
    /// barrier that overtook it is taken first, and the rest counts as in flight.
    pub fn put_back(&mut self, channel: usize, batch: RecordBatch<T>) {
        if let Some(c) = self.channels.get_mut(channel) {
            c.lookahead.push_front(StreamElement::Records(batch));
        }
    }

    /// Whether a capture of in-flight records is in progress on some channel.
    pub fn capturing(&self) -> bool {
        self.channels.iter().any(|c| c.capturing.is_some())
    }

    /// Whether every channel's capture has reached its in-order barrier or its end.
    pub fn capture_complete(&self) -> bool {
        self.channels.iter().all(|c| c.capturing.is_none())
    }

    /// Gives up the capture in progress, forgetting what it recorded.
    pub fn abort_capture(&mut self) {
        self.channels.iter_mut().for_each(|c| c.capturing = None);
        self.recorder.clear();
    }

    /// The channel state captured (call once [`InputGate::capture_complete`]).
    pub fn take_channel_state(&mut self) -> Vec<ListStateEntry> {
        self.recorder.take()
    }
}

/// Whether `element` ends the capture for checkpoint `id`: the channel's in-order barrier
/// of it (or of a newer checkpoint), or the channel's end.
fn ends_capture<T>(element: &StreamElement<T>, id: u64) -> bool {
    match element {
        StreamElement::Event(StreamEvent::Barrier(b)) => b.checkpoint_id >= id,
        StreamElement::Event(StreamEvent::EndOfStream) => true,
        _ => false,
    }
}

impl<T: Record> InputGate<T> {
    /// Starts capturing checkpoint `id`'s in-flight records on `channels`: what is already
    /// read ahead counts first, then whatever comes out of each channel until its barrier.
    pub fn start_capture(&mut self, id: u64, channels: &[usize]) -> Result<(), TaskError> {
        for &c in channels {
            let Some(channel) = self.channels.get_mut(c) else {
                continue;
            };
            if channel.finished {
                continue;
            }
            channel.capturing = Some(id);
            for element in &channel.lookahead {
                if ends_capture(element, id) {
                    channel.capturing = None;
                    break;
                }
                if let StreamElement::Records(batch) = element {
                    self.recorder.record(batch)?;
                }
            }
        }
        Ok(())
    }

    /// Bookkeeping for an element just taken out of channel `c`: a capture records it, or
    /// ends at it.
    fn captured(&mut self, c: usize, element: &StreamElement<T>) -> Result<(), TaskError> {
        if let Some(id) = self.channels[c].capturing {
            if ends_capture(element, id) {
                self.channels[c].capturing = None;
            } else if let StreamElement::Records(batch) = element {
                self.recorder.record(batch)?;
            }
        }
        Ok(())
    }

    /// Reads every capturing channel ahead as far as it has elements queued, so that the
    /// capture ends as soon as the barriers are in, however slowly the task processes.
    pub fn drain_captures(&mut self) -> Result<(), TaskError> {
        for c in 0..self.channels.len() {
            while self.channels[c].capturing.is_some() {
                let element = match self.channels[c].receiver.rx.try_recv() {
                    Ok(element) => element,
                    // Read normally, a vanished sender is reported where it belongs.
                    Err(_) => break,
                };
                self.channels[c].receiver.consumed();
                self.captured(c, &element)?;
                self.channels[c].lookahead.push_back(element);
            }
        }
        Ok(())
    }

    /// Number of input channels.
    pub fn num_channels(&self) -> usize {
        self.channels.len()
    }

    /// Marks `channel` as ended (its end-of-stream was received); it is not read again.
    pub fn mark_finished(&mut self, channel: usize) {
        if !self.channels[channel].finished {
            self.channels[channel].finished = true;
            self.open -= 1;
        }
    }

    /// Whether `channel` has ended.
    pub fn is_channel_finished(&self, channel: usize) -> bool {
        self.channels[channel].finished
    }

    /// For each channel, whether it is still open (has not ended).
    pub fn open_flags(&self) -> Vec<bool> {
        self.channels.iter().map(|c| !c.finished).collect()
    }

    /// Whether every channel has ended.
    pub fn is_finished(&self) -> bool {
        self.open == 0
    }

    /// Holds back (or releases) `channel`: a blocked channel is not read, so its producer
    /// eventually blocks too, while the other channels keep flowing.
    pub fn set_blocked(&mut self, channel: usize, blocked: bool) {
        self.channels[channel].blocked = blocked;
    }

    /// Releases every held-back channel.
    pub fn unblock_all(&mut self) {
        self.channels.iter_mut().for_each(|c| c.blocked = false);
    }

    /// Publishes how many elements wait in the gate's channels (`inputQueueLength`) and
    /// the network bytes received since the last time (`numBytesIn`).
    #[cold]
    fn publish_queue_length(&mut self) {
        self.since_published = 0;
        let queued: usize = self.channels.iter().map(|c| c.receiver.rx.len()).sum();
        CurrentTask::set_input_queue(queued);
        self.publish_bytes();
    }

    fn publish_bytes(&mut self) {
        let received: u64 = self
            .channels
            .iter()
            .map(|c| c.receiver.received_bytes())
            .sum();
        if received > self.bytes_published {
            CurrentTask::received_bytes(received - self.bytes_published);
            self.bytes_published = received;
        }
    }

    /// The next element of a readable channel, if one is ready now. Channels are visited
    /// round-robin so that no input starves another.
    pub fn poll(&mut self) -> Result<Option<(usize, StreamElement<T>)>, TaskError>
    where
        T: Record,
    {
        let n = self.channels.len();
        for step in 0..n {
            let i = (self.next + step) % n;
            let channel = &mut self.channels[i];
            if !channel.is_readable() {
                continue;
            }
            if let Some(element) = channel.lookahead.pop_front() {
                self.next = (i + 1) % n;
                return Ok(Some((i, element)));
            }
            match channel.receiver.rx.try_recv() {
                Ok(element) => {
                    channel.receiver.consumed();
                    self.captured(i, &element)?;
                    self.next = (i + 1) % n;
                    self.since_published += 1;
                    if self.since_published == QUEUE_SAMPLE_EVERY {
                        self.publish_queue_length();
                    }
                    return Ok(Some((i, element)));
                }
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => return Err(channel.receiver.disconnected()),
            }
        }
        Ok(None)
    }

    /// The receivers of the channels that may be read now, with their indexes (to wait on
    /// several gates at once).
    pub(crate) fn readable(&self) -> Vec<(usize, &Receiver<StreamElement<T>>)> {
        self.channels
            .iter()
            .enumerate()
            .filter(|(_, c)| c.is_readable())
            .map(|(i, c)| (i, &c.receiver.rx))
            .collect()
    }

    /// The priority lanes of the open channels, with their indexes, if they are watched.
    pub(crate) fn priority_lanes(&self) -> Vec<(usize, &Receiver<CheckpointBarrier>)> {
        if !self.watch_priority {
            return Vec::new();
        }
        self.channels
            .iter()
            .enumerate()
            .filter(|(_, c)| c.watches_priority())
            .map(|(i, c)| (i, &c.receiver.priority))
            .collect()
    }

    /// `channel` was just read by a wait over several gates: its sender gets a credit, a
    /// capture takes note, and it goes to the back of the round-robin.
    pub(crate) fn was_read(
        &mut self,
        channel: usize,
        element: &StreamElement<T>,
    ) -> Result<(), TaskError>
    where
        T: Record,
    {
        self.channels[channel].receiver.consumed();
        self.captured(channel, element)?;
        self.next = (channel + 1) % self.channels.len();
        Ok(())
    }

    /// The cancellation signal the gate obeys.
    pub(crate) fn cancel(&self) -> &CancelToken {
        &self.cancel
    }

    /// The next element of a readable channel, waiting for one, for a message on `side`,
    /// for cancellation, or until `deadline`.
    pub fn next_blocking<C>(
        &mut self,
        side: &Receiver<C>,
        deadline: Option<std::time::Instant>,
    ) -> Result<GateNext<StreamElement<T>, C>, TaskError>
    where
        T: Record,
    {
        if let Some((channel, element)) = self.poll()? {
            return Ok(GateNext::Element(channel, element));
        }
        // Nothing is queued: the task waits for input.
        CurrentTask::set_input_queue(0);
        self.publish_bytes();
        let readable: Vec<usize> = (0..self.channels.len())
            .filter(|&i| self.channels[i].is_readable())
            .collect();
        let lanes: Vec<usize> = self.priority_lanes().into_iter().map(|(i, _)| i).collect();
        let mut select = Select::new();
        let cancel_index = select.recv(self.cancel.receiver());
        let side_index = select.recv(side);
        for &i in &readable {
            select.recv(&self.channels[i].receiver.rx);
        }
        for &i in &lanes {
            select.recv(&self.channels[i].receiver.priority);
        }
        let operation = match deadline {
            None => CurrentTask::idle(|| select.select()),
            Some(deadline) => match CurrentTask::idle(|| select.select_deadline(deadline)) {
                Ok(operation) => operation,
                Err(_) => return Ok(GateNext::Timeout),
            },
        };
        let index = operation.index();
        if index == cancel_index {
            let _ = operation.recv(self.cancel.receiver());
            return Err(TaskError::Cancelled);
        }
        if index == side_index {
            return match operation.recv(side) {
                Ok(message) => Ok(GateNext::Other(message)),
                // The job manager is gone: nobody will ever read this task's output.
                Err(_) => Err(TaskError::Cancelled),
            };
        }
        // Select indices follow insertion order: cancel, side, `readable`, then `lanes`.
        if index - 2 >= readable.len() {
            let channel = lanes[index - 2 - readable.len()];
            return match operation.recv(&self.channels[channel].receiver.priority) {
                Ok(barrier) => Ok(GateNext::Priority(channel, barrier)),
                // The producer ended; its queue says how when read.
                Err(_) => {
                    self.channels[channel].priority_closed = true;
                    Ok(GateNext::Timeout)
                }
            };
        }
        let channel = readable[index - 2];
        match operation.recv(&self.channels[channel].receiver.rx) {
            Ok(element) => {
                self.was_read(channel, &element)?;
                Ok(GateNext::Element(channel, element))
            }
            Err(_) => Err(self.channels[channel].receiver.disconnected()),
        }
    }

    /// Why `channel` stopped delivering (its sender is gone).
    pub(crate) fn disconnected(&self, channel: usize) -> TaskError {
        self.channels[channel].receiver.disconnected()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::channel::{cancel_pair, channel};

    #[test]
    fn blocked_channel_is_not_read_until_released() {
        let (_h, cancel) = cancel_pair();
        let (tx0, rx0) = channel::<u32>(4);
        let (tx1, rx1) = channel::<u32>(4);
        let mut gate = InputGate::new(vec![rx0, rx1], cancel.clone());
        tx0.send(StreamElement::Records(vec![1].into()), &cancel)
            .unwrap();
        tx1.send(StreamElement::Records(vec![2].into()), &cancel)
            .unwrap();
        gate.set_blocked(0, true);
        assert_eq!(
            gate.poll().unwrap(),
            Some((1, StreamElement::Records(vec![2].into())))
        );
        assert_eq!(gate.poll().unwrap(), None);
        gate.unblock_all();
        assert_eq!(
            gate.poll().unwrap(),
            Some((0, StreamElement::Records(vec![1].into())))
        );
    }

    fn barrier(id: u64) -> CheckpointBarrier {
        CheckpointBarrier {
            checkpoint_id: id,
            timestamp_millis: 0,
            snapshot_type: crate::runtime::stream_element::SnapshotType::Checkpoint,
            is_final: false,
            stop: None,
            unaligned: true,
        }
    }

    #[test]
    fn a_capture_reads_ahead_to_each_channels_barrier_and_hands_everything_out_in_order() {
        let (_h, cancel) = cancel_pair();
        let (tx0, rx0) = channel::<u32>(8);
        let (tx1, rx1) = channel::<u32>(8);
        let mut gate = InputGate::new(vec![rx0, rx1], cancel.clone());
        gate.watch_priority();
        let send =
            |tx: &crate::runtime::channel::ChannelSender<u32>, e| tx.send(e, &cancel).unwrap();
        send(&tx0, StreamElement::Records(vec![1, 2].into()));
        send(&tx1, StreamElement::Records(vec![10].into()));
        tx0.send_priority(barrier(4)).unwrap();
        assert_eq!(gate.poll_priority(), Some((0, barrier(4))));
        assert_eq!(gate.poll_priority(), None);
        // Snapshot at the priority barrier: both channels' records until their in-order
        // barrier 4 are in flight.
        gate.start_capture(4, &[0, 1]).unwrap();
        send(&tx0, StreamElement::Event(StreamEvent::Barrier(barrier(4))));
        send(&tx0, StreamElement::Records(vec![3].into()));
        gate.drain_captures().unwrap();
        assert!(!gate.capture_complete(), "channel 1's barrier has not come");
        send(&tx1, StreamElement::Records(vec![11].into()));
        send(&tx1, StreamElement::Event(StreamEvent::EndOfStream));
        gate.drain_captures().unwrap();
        assert!(gate.capture_complete());
        let state = gate.take_channel_state();
        let mut captured: Vec<u32> =
            crate::runtime::channel_state::restore_batches::<u32>(&state, 0)
                .unwrap()
                .into_iter()
                .flat_map(RecordBatch::into_records)
                .collect();
        captured.sort_unstable();
        assert_eq!(
            captured,
            vec![1, 2, 10, 11],
            "not 3: it followed its barrier"
        );
        // The task still gets every element, each channel in order.
        let mut seen: Vec<Vec<StreamElement<u32>>> = vec![Vec::new(), Vec::new()];
        while let Some((c, e)) = gate.poll().unwrap() {
            let end = e == StreamElement::Event(StreamEvent::EndOfStream);
            seen[c].push(e);
            if end {
                gate.mark_finished(c);
            }
        }
        assert_eq!(
            seen[0],
            vec![
                StreamElement::Records(vec![1, 2].into()),
                StreamElement::Event(StreamEvent::Barrier(barrier(4))),
                StreamElement::Records(vec![3].into()),
            ]
        );
        assert_eq!(
            seen[1],
            vec![
                StreamElement::Records(vec![10].into()),
                StreamElement::Records(vec![11].into()),
                StreamElement::Event(StreamEvent::EndOfStream),
            ]
        );
    }

    #[test]
    fn blocking_read_wakes_on_cancel() {
        let (handle, cancel) = cancel_pair();
        let (_tx, rx) = channel::<u32>(1);
        let mut gate = InputGate::new(vec![rx], cancel);
        let (_side_tx, side) = crossbeam_channel::unbounded::<()>();
        let t = std::thread::spawn(move || gate.next_blocking(&side, None).map(|_| ()));
        std::thread::sleep(std::time::Duration::from_millis(20));
        drop(handle);
        assert!(matches!(t.join().unwrap(), Err(TaskError::Cancelled)));
    }

    #[test]
    fn vanished_producer_is_an_error_and_finished_channels_are_skipped() {
        let (_h, cancel) = cancel_pair();
        let (tx0, rx0) = channel::<u32>(4);
        let (tx1, rx1) = channel::<u32>(4);
        let mut gate = InputGate::new(vec![rx0, rx1], cancel.clone());
        tx0.send(StreamElement::Event(StreamEvent::EndOfStream), &cancel)
            .unwrap();
        drop(tx0);
        let (_side_tx, side) = crossbeam_channel::unbounded::<()>();
        let GateNext::Element(ch, _) = gate.next_blocking(&side, None).unwrap() else {
            panic!("expected an element")
        };
        gate.mark_finished(ch);
        assert!(!gate.is_finished());
        assert_eq!(gate.open_flags(), vec![false, true]);
        drop(tx1);
        assert!(matches!(
            gate.next_blocking(&side, None),
            Err(TaskError::ChannelClosed { .. })
        ));
    }
}
