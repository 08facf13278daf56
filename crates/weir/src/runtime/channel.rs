//! Bounded channels between subtasks, and the cancellation signal every blocking point obeys.
//!
//! A channel holds at most `channel_capacity` batches: a producer whose consumer lags blocks in
//! [`ChannelSender::send`], which is how backpressure reaches the sources. Every blocking wait
//! also watches the job's [`CancelToken`], so a failing job never leaves a task stuck.

use crossbeam_channel::{select, Receiver, Sender, TryRecvError, TrySendError};

use crate::error::TaskError;
use crate::runtime::stream_element::StreamElement;

/// Cancellation signal: the job manager cancels by dropping the paired sender, which every
/// clone of the token observes as a disconnect, whether it is polling or blocked.
#[derive(Debug, Clone)]
pub struct CancelToken {
    rx: Receiver<()>,
}

/// The job manager's side of a [`CancelToken`]; dropping it cancels.
#[derive(Debug)]
pub struct CancelHandle {
    _tx: Sender<()>,
}

/// Creates a linked cancel handle and token.
pub fn cancel_pair() -> (CancelHandle, CancelToken) {
    let (tx, rx) = crossbeam_channel::bounded(0);
    (CancelHandle { _tx: tx }, CancelToken { rx })
}

impl CancelToken {
    /// Whether cancellation was requested.
    pub fn is_cancelled(&self) -> bool {
        matches!(self.rx.try_recv(), Err(TryRecvError::Disconnected))
    }

    /// The receiver to add to a `select!`; it becomes ready (disconnected) on cancellation.
    pub fn receiver(&self) -> &Receiver<()> {
        &self.rx
    }
}

/// Sending end of a channel between two subtasks.
pub struct ChannelSender<T> {
    tx: Sender<StreamElement<T>>,
}

/// Receiving end of a channel between two subtasks.
pub struct ChannelReceiver<T> {
    pub(crate) rx: Receiver<StreamElement<T>>,
}

/// Creates a channel holding at most `capacity` elements (batches or events).
pub fn channel<T>(capacity: usize) -> (ChannelSender<T>, ChannelReceiver<T>) {
    let (tx, rx) = crossbeam_channel::bounded(capacity);
    (ChannelSender { tx }, ChannelReceiver { rx })
}

impl<T> ChannelSender<T> {
    /// Sends one element, blocking while the channel is full, until the consumer takes it
    /// or the job is cancelled.
    pub fn send(&self, element: StreamElement<T>, cancel: &CancelToken) -> Result<(), TaskError> {
        match self.tx.try_send(element) {
            Ok(()) => Ok(()),
            Err(TrySendError::Disconnected(_)) => {
                Err(TaskError::ChannelClosed { peer: "downstream" })
            }
            Err(TrySendError::Full(element)) => select! {
                send(self.tx, element) -> sent => sent.map_err(|_| TaskError::ChannelClosed { peer: "downstream" }),
                recv(cancel.receiver()) -> _ => Err(TaskError::Cancelled),
            },
        }
    }

    /// Number of elements queued in the channel now.
    pub fn queued(&self) -> usize {
        self.tx.len()
    }
}
