//! Bounded channels between subtasks, and the cancellation signal every blocking point obeys.
//!
//! A channel holds at most `channel_capacity` batches: a producer whose consumer lags blocks in
//! [`ChannelSender::send`], which is how backpressure reaches the sources. Every blocking wait
//! also watches the job's [`CancelToken`], so a failing job never leaves a task stuck.

use crossbeam_channel::{select, Receiver, Sender, TryRecvError, TrySendError};

use crate::error::TaskError;
use crate::runtime::network::credit::{CreditReturn, RemoteSender};
use crate::runtime::stream_element::{CheckpointBarrier, StreamElement};

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

/// Sending end of a channel between two subtasks: in-process, or to a subtask in another
/// process over the network (see [`crate::runtime::network`]). Which one is decided where the
/// channel is created (the [`Transport`](crate::runtime::transport::Transport)), never by the
/// operator that writes to it.
///
/// Besides the bounded queue of elements, a channel has a priority lane for unaligned
/// checkpoint barriers (FLIP-76): unbounded and read before the queue, so that a barrier
/// overtakes the records queued ahead of it.
pub struct ChannelSender<T> {
    kind: SenderKind<T>,
}

enum SenderKind<T> {
    Local {
        tx: Sender<StreamElement<T>>,
        priority: Sender<CheckpointBarrier>,
    },
    Remote(RemoteSender),
}

/// Receiving end of a channel between two subtasks.
///
/// A remote channel's elements arrive decoded in the same bounded queue as a local one's; the
/// receiver only has to hand back a credit for each element it takes, so that the sender may
/// send another (credit-based flow control).
pub struct ChannelReceiver<T> {
    pub(crate) rx: Receiver<StreamElement<T>>,
    /// Barriers sent ahead of the queue.
    pub(crate) priority: Receiver<CheckpointBarrier>,
    credit: Option<CreditReturn>,
}

/// Creates an in-process channel holding at most `capacity` elements (batches or events).
pub fn channel<T>(capacity: usize) -> (ChannelSender<T>, ChannelReceiver<T>) {
    let (tx, rx) = crossbeam_channel::bounded(capacity);
    let (priority_tx, priority) = crossbeam_channel::unbounded();
    (
        ChannelSender {
            kind: SenderKind::Local {
                tx,
                priority: priority_tx,
            },
        },
        ChannelReceiver {
            rx,
            priority,
            credit: None,
        },
    )
}

impl<T: serde::Serialize> ChannelSender<T> {
    /// The sending end of a channel whose receiver is in another process.
    pub(crate) fn remote(sender: RemoteSender) -> Self {
        Self {
            kind: SenderKind::Remote(sender),
        }
    }

    /// Sends one element, blocking while the channel is full (a remote channel: while the
    /// receiver has granted no credit), until the consumer takes it or the job is cancelled.
    pub fn send(&self, element: StreamElement<T>, cancel: &CancelToken) -> Result<(), TaskError> {
        match &self.kind {
            SenderKind::Local { tx, .. } => match tx.try_send(element) {
                Ok(()) => Ok(()),
                Err(TrySendError::Disconnected(_)) => {
                    Err(TaskError::ChannelClosed { peer: "downstream" })
                }
                Err(TrySendError::Full(element)) => {
                    crate::metrics::CurrentTask::backpressured(|| {
                        select! {
                            send(tx, element) -> sent => sent.map_err(|_| TaskError::ChannelClosed { peer: "downstream" }),
                            recv(cancel.receiver()) -> _ => Err(TaskError::Cancelled),
                        }
                    })
                }
            },
            SenderKind::Remote(remote) => remote.send(&element, cancel),
        }
    }

    /// Sends `barrier` ahead of the queued elements (an unaligned checkpoint's); never
    /// blocks, since the lane is not subject to backpressure. A receiver that has ended
    /// needs no barrier.
    pub fn send_priority(&self, barrier: CheckpointBarrier) -> Result<(), TaskError> {
        match &self.kind {
            SenderKind::Local { priority, .. } => {
                let _ = priority.send(barrier);
                Ok(())
            }
            SenderKind::Remote(remote) => remote.send_priority(&barrier),
        }
    }
}

impl<T> ChannelSender<T> {
    /// Number of elements queued in the channel now (for a remote channel: sent and not yet
    /// taken by the receiver, as far as the sender knows).
    pub fn queued(&self) -> usize {
        match &self.kind {
            SenderKind::Local { tx, .. } => tx.len(),
            SenderKind::Remote(remote) => remote.in_flight(),
        }
    }
}

impl<T> ChannelReceiver<T> {
    /// The receiving end of a remote channel: elements arrive in `rx`, and each one taken
    /// hands a credit back through `credit`.
    pub(crate) fn remote(
        rx: Receiver<StreamElement<T>>,
        priority: Receiver<CheckpointBarrier>,
        credit: CreditReturn,
    ) -> Self {
        Self {
            rx,
            priority,
            credit: Some(credit),
        }
    }

    /// Why the channel's elements stopped coming (its sender is gone): for a remote channel
    /// whose connection failed, the connection's failure.
    pub(crate) fn disconnected(&self) -> TaskError {
        match &self.credit {
            Some(credit) => credit.disconnected(),
            None => TaskError::ChannelClosed { peer: "upstream" },
        }
    }

    /// Bytes received over the network for this channel (0 for a channel in this process,
    /// which carries records, not bytes).
    pub(crate) fn received_bytes(&self) -> u64 {
        self.credit.as_ref().map_or(0, CreditReturn::received_bytes)
    }

    /// Called after each element taken from `rx`: a remote channel's sender gets a credit.
    #[inline]
    pub(crate) fn consumed(&self) {
        if let Some(credit) = &self.credit {
            credit.grant(1);
        }
    }
}
