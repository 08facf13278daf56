//! A task's inputs: one bounded channel per upstream subtask, read fairly, with the ability
//! to hold back a channel (barrier alignment) while reading the others.

use crossbeam_channel::{Receiver, Select, TryRecvError};

use crate::error::TaskError;
use crate::metrics::CurrentTask;
use crate::runtime::channel::{CancelToken, ChannelReceiver};
use crate::runtime::stream_element::StreamElement;

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
}

struct InputChannel<T> {
    receiver: ChannelReceiver<T>,
    finished: bool,
    blocked: bool,
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
                })
                .collect(),
            next: 0,
            open,
            cancel,
            since_published: 0,
            bytes_published: 0,
        }
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
    pub fn poll(&mut self) -> Result<Option<(usize, StreamElement<T>)>, TaskError> {
        let n = self.channels.len();
        for step in 0..n {
            let i = (self.next + step) % n;
            let channel = &self.channels[i];
            if !channel.is_readable() {
                continue;
            }
            match channel.receiver.rx.try_recv() {
                Ok(element) => {
                    channel.receiver.consumed();
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

    /// `channel` was just read by a wait over several gates: its sender gets a credit, and it
    /// goes to the back of the round-robin.
    pub(crate) fn was_read(&mut self, channel: usize) {
        self.channels[channel].receiver.consumed();
        self.next = (channel + 1) % self.channels.len();
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
    ) -> Result<GateNext<StreamElement<T>, C>, TaskError> {
        if let Some((channel, element)) = self.poll()? {
            return Ok(GateNext::Element(channel, element));
        }
        // Nothing is queued: the task waits for input.
        CurrentTask::set_input_queue(0);
        self.publish_bytes();
        let readable: Vec<usize> = (0..self.channels.len())
            .filter(|&i| self.channels[i].is_readable())
            .collect();
        let mut select = Select::new();
        let cancel_index = select.recv(self.cancel.receiver());
        let side_index = select.recv(side);
        for &i in &readable {
            select.recv(&self.channels[i].receiver.rx);
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
        // Select indices follow insertion order: cancel, side, then `readable`.
        let channel = readable[index - 2];
        match operation.recv(&self.channels[channel].receiver.rx) {
            Ok(element) => {
                self.channels[channel].receiver.consumed();
                self.next = (channel + 1) % self.channels.len();
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
    use crate::runtime::stream_element::StreamEvent;

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
