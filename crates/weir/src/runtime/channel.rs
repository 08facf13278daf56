//! Bounded channels between subtasks, and the cancellation signal every blocking point obeys.
//!
//! A channel holds at most `channel_capacity` batches: a producer whose consumer lags blocks in
//! [`ChannelSender::send`], which is how backpressure reaches the sources. Every blocking wait
//! also watches the job's [`CancelToken`], so a failing job never leaves a task stuck.

use std::sync::{Arc, OnceLock};

use crossbeam_channel::{select, Receiver, Select, Sender, TryRecvError, TrySendError};

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

/// What a task blocked on a full output watches besides the channel: a message that it must
/// handle before the send completes (an unaligned checkpoint's barrier at its inputs, or a
/// source's checkpoint trigger). Watched without being taken.
pub trait Wakeup: Send + Sync {
    /// Adds the receiver to watch to `select`; returns its index there.
    fn watch<'a>(&'a self, select: &mut Select<'a>) -> usize;
    /// Whether a message waits.
    fn has_rung(&self) -> bool;
    /// When to stop waiting anyway, if ever.
    fn deadline(&self) -> Option<std::time::Instant> {
        None
    }
}

/// `inner`, or `deadline` passing, whichever comes first.
pub struct WakeupBy<'w> {
    /// What else ends the wait.
    pub inner: &'w dyn Wakeup,
    /// When the wait ends anyway.
    pub deadline: std::time::Instant,
}

impl Wakeup for WakeupBy<'_> {
    fn watch<'a>(&'a self, select: &mut Select<'a>) -> usize {
        self.inner.watch(select)
    }
    fn has_rung(&self) -> bool {
        self.inner.has_rung() || std::time::Instant::now() >= self.deadline
    }
    fn deadline(&self) -> Option<std::time::Instant> {
        Some(self.deadline)
    }
}

/// Waits for one of `select`'s operations, or until `wakeup`'s deadline (`None`).
pub(crate) fn ready_or_deadline(select: &mut Select<'_>, wakeup: &dyn Wakeup) -> Option<usize> {
    match wakeup.deadline() {
        Some(deadline) => select.ready_deadline(deadline).ok(),
        None => Some(select.ready()),
    }
}

impl<M: Send> Wakeup for Receiver<M> {
    fn watch<'a>(&'a self, select: &mut Select<'a>) -> usize {
        select.recv(self)
    }
    fn has_rung(&self) -> bool {
        !self.is_empty()
    }
}

/// The receiving task's doorbell, shared by a channel's two ends: set by the receiving
/// task, rung when a barrier arrives on the channel's priority lane, so that the task can
/// stop waiting on its own full output.
pub(crate) type DoorbellSlot = Arc<OnceLock<Sender<()>>>;

/// Rings `slot`'s doorbell, if the receiving task has set one.
pub(crate) fn ring(slot: &DoorbellSlot) {
    if let Some(bell) = slot.get() {
        let _ = bell.try_send(());
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
        doorbell: DoorbellSlot,
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
    /// Rung (by the sender, or a remote channel's connection) after a priority barrier.
    doorbell: DoorbellSlot,
    credit: Option<CreditReturn>,
}

/// Creates an in-process channel holding at most `capacity` elements (batches or events).
pub fn channel<T>(capacity: usize) -> (ChannelSender<T>, ChannelReceiver<T>) {
    let (tx, rx) = crossbeam_channel::bounded(capacity);
    let (priority_tx, priority) = crossbeam_channel::unbounded();
    let doorbell = DoorbellSlot::default();
    (
        ChannelSender {
            kind: SenderKind::Local {
                tx,
                priority: priority_tx,
                doorbell: doorbell.clone(),
            },
        },
        ChannelReceiver {
            rx,
            priority,
            doorbell,
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

    /// Sends one element like [`ChannelSender::send`], except that a wait for room ends as
    /// soon as `wakeup` rings: the element comes back unsent (`Some`), for the caller to
    /// send once it has handled what woke it.
    pub fn send_or_defer(
        &self,
        element: StreamElement<T>,
        cancel: &CancelToken,
        wakeup: &dyn Wakeup,
    ) -> Result<Option<StreamElement<T>>, TaskError> {
        match &self.kind {
            SenderKind::Local { tx, .. } => {
                let mut element = match tx.try_send(element) {
                    Ok(()) => return Ok(None),
                    Err(TrySendError::Disconnected(_)) => {
                        return Err(TaskError::ChannelClosed { peer: "downstream" })
                    }
                    Err(TrySendError::Full(element)) => element,
                };
                crate::metrics::CurrentTask::backpressured(|| loop {
                    if wakeup.has_rung() {
                        return Ok(Some(element));
                    }
                    let mut select = Select::new();
                    let send = select.send(tx);
                    let cancelled = select.recv(cancel.receiver());
                    wakeup.watch(&mut select);
                    let Some(ready) = ready_or_deadline(&mut select, wakeup) else {
                        return Ok(Some(element));
                    };
                    if ready == cancelled {
                        return Err(TaskError::Cancelled);
                    }
                    if ready == send {
                        match tx.try_send(element) {
                            Ok(()) => return Ok(None),
                            Err(TrySendError::Full(back)) => element = back,
                            Err(TrySendError::Disconnected(_)) => {
                                return Err(TaskError::ChannelClosed { peer: "downstream" })
                            }
                        }
                    }
                })
            }
            SenderKind::Remote(remote) => remote.send_or_defer(element, cancel, wakeup),
        }
    }

    /// Sends `barrier` ahead of the queued elements (an unaligned checkpoint's); never
    /// blocks, since the lane is not subject to backpressure. A receiver that has ended
    /// needs no barrier.
    pub fn send_priority(&self, barrier: CheckpointBarrier) -> Result<(), TaskError> {
        match &self.kind {
            SenderKind::Local {
                priority, doorbell, ..
            } => {
                let _ = priority.send(barrier);
                ring(doorbell);
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
        doorbell: DoorbellSlot,
        credit: CreditReturn,
    ) -> Self {
        Self {
            rx,
            priority,
            doorbell,
            credit: Some(credit),
        }
    }

    /// Rings `bell` whenever a barrier arrives on this channel's priority lane.
    pub(crate) fn set_doorbell(&self, bell: Sender<()>) {
        let _ = self.doorbell.set(bell);
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
