//! Credit-based flow control: a remote channel's sending end, which spends one credit per
//! element, and the receiving side's return of credits as its task takes elements.
//!
//! A channel's receiver grants as many credits as its queue has slots, so the elements in
//! flight on a channel never exceed what its receiver can hold: the connection's reader can
//! always deliver at once, and a channel whose task does not read stops only its own sender.

use std::sync::{Arc, OnceLock};

use crossbeam_channel::{select, Receiver, Sender, TryRecvError};
use serde::Serialize;

use super::frame::{data_frame, priority_frame};
use crate::error::TaskError;
use crate::runtime::channel::CancelToken;
use crate::runtime::stream_element::{CheckpointBarrier, StreamElement};

/// What a connection's writer thread sends: encoded data frames, and credits (which it
/// merges per channel before writing).
#[derive(Debug)]
pub enum Outbound {
    /// A complete data frame.
    Data(Vec<u8>),
    /// Credits for the sender of `channel`.
    Credit {
        /// The channel.
        channel: u32,
        /// How many.
        credits: u32,
    },
}

/// What the ends of a connection's channels know of the connection: its peer, and why it
/// failed once it has.
#[derive(Debug)]
pub struct LinkState {
    /// The peer TaskManager and address, for errors.
    pub peer: String,
    failure: OnceLock<String>,
}

impl LinkState {
    /// The state of a new connection to `peer`.
    pub fn new(peer: impl Into<String>) -> Arc<Self> {
        Arc::new(Self {
            peer: peer.into(),
            failure: OnceLock::new(),
        })
    }

    /// Records why the connection failed; the first reason is kept.
    pub fn fail(&self, reason: impl Into<String>) {
        let _ = self.failure.set(reason.into());
    }

    /// Why the connection failed, if it has.
    pub fn failure(&self) -> Option<&str> {
        self.failure.get().map(String::as_str)
    }

    /// The error a sending channel end reports once the connection is gone: the failure if
    /// it failed, else (the peer closed it normally, its tasks having ended) a closed
    /// channel, which is only a consequence of the peer's end.
    pub fn lost(&self) -> TaskError {
        match self.failure() {
            Some(reason) => TaskError::ConnectionLost {
                peer: self.peer.clone(),
                reason: reason.to_string(),
            },
            None => TaskError::ChannelClosed { peer: "downstream" },
        }
    }
}

/// The sending end of a channel whose receiver runs in another TaskManager.
pub struct RemoteSender {
    channel: u32,
    /// One token per credit granted by the receiver.
    credits: Receiver<()>,
    /// The receiver's queue size: the most elements in flight.
    window: usize,
    /// The largest frame the receiver accepts.
    max_frame: usize,
    out: Sender<Outbound>,
    link: Arc<LinkState>,
}

impl RemoteSender {
    /// The sender of `channel`, spending `credits` and writing through `out`.
    pub fn new(
        channel: u32,
        credits: Receiver<()>,
        window: usize,
        max_frame: usize,
        out: Sender<Outbound>,
        link: Arc<LinkState>,
    ) -> Self {
        Self {
            channel,
            credits,
            window,
            max_frame,
            out,
            link,
        }
    }

    /// Encodes and sends `element` once the receiver has granted a credit, waiting for one
    /// (backpressure) until the job is cancelled or the connection is lost.
    pub fn send<T: Serialize>(
        &self,
        element: &StreamElement<T>,
        cancel: &CancelToken,
    ) -> Result<(), TaskError> {
        match self.credits.try_recv() {
            Ok(()) => {}
            Err(TryRecvError::Disconnected) => return Err(self.link.lost()),
            Err(TryRecvError::Empty) => crate::metrics::CurrentTask::backpressured(|| {
                select! {
                    recv(self.credits) -> credit => credit.map_err(|_| self.link.lost()),
                    recv(cancel.receiver()) -> _ => Err(TaskError::Cancelled),
                }
            })?,
        }
        let frame = data_frame(self.channel, element).map_err(|e| {
            TaskError::User(
                format!(
                    "cannot encode a batch for channel {} to {}: {e}",
                    self.channel, self.link.peer
                )
                .into(),
            )
        })?;
        // The receiver would refuse it and fail the whole connection; this channel's task
        // fails instead, saying what is too large.
        if frame.len() > self.max_frame {
            return Err(TaskError::User(
                format!(
                    "a batch of {} bytes for channel {} to {} is larger than the {} bytes a \
                     network frame may hold: make the records smaller, or the batches \
                     shorter (`ExecutionConfig::with_buffer_size`)",
                    frame.len(),
                    self.channel,
                    self.link.peer,
                    self.max_frame
                )
                .into(),
            ));
        }
        crate::metrics::CurrentTask::sent_bytes(frame.len());
        self.out
            .send(Outbound::Data(frame))
            .map_err(|_| self.link.lost())
    }

    /// Sends `element` like [`RemoteSender::send`], except that a wait for a credit ends as
    /// soon as `wakeup` rings: the element comes back unsent.
    pub fn send_or_defer<T: Serialize>(
        &self,
        element: StreamElement<T>,
        cancel: &CancelToken,
        wakeup: &dyn crate::runtime::channel::Wakeup,
    ) -> Result<Option<StreamElement<T>>, TaskError> {
        if self.credits.is_empty() {
            let deferred = crate::metrics::CurrentTask::backpressured(|| loop {
                if wakeup.has_rung() {
                    return Ok(true);
                }
                let mut select = crossbeam_channel::Select::new();
                let credit = select.recv(&self.credits);
                let cancelled = select.recv(cancel.receiver());
                wakeup.watch(&mut select);
                let Some(ready) = crate::runtime::channel::ready_or_deadline(&mut select, wakeup)
                else {
                    return Ok(true);
                };
                if ready == cancelled {
                    return Err(TaskError::Cancelled);
                }
                if ready == credit {
                    // A credit (taken below), or the connection is gone (reported below).
                    return Ok(false);
                }
            })?;
            if deferred {
                return Ok(Some(element));
            }
        }
        self.send(&element, cancel)?;
        Ok(None)
    }

    /// Sends `barrier` ahead of the channel's queue: it spends no credit, so a sender
    /// waiting for credits is never what holds an unaligned checkpoint back.
    pub fn send_priority(&self, barrier: &CheckpointBarrier) -> Result<(), TaskError> {
        let frame = priority_frame(self.channel, barrier).map_err(|e| {
            TaskError::Internal(format!(
                "cannot encode a barrier for channel {}: {e}",
                self.channel
            ))
        })?;
        self.out
            .send(Outbound::Data(frame))
            .map_err(|_| self.link.lost())
    }

    /// Elements sent and not yet taken by the receiver, as far as credits tell.
    pub fn in_flight(&self) -> usize {
        self.window.saturating_sub(self.credits.len())
    }
}

/// The receiving side's line back to a remote channel's sender.
pub struct CreditReturn {
    channel: u32,
    out: Sender<Outbound>,
    link: Arc<LinkState>,
    /// Bytes of the channel's elements received so far (counted by the connection's
    /// reader, read by the receiving task for `numBytesIn`).
    received: Arc<std::sync::atomic::AtomicU64>,
}

impl CreditReturn {
    /// Credits of `channel`, written through `out` on the connection `link`.
    pub fn new(channel: u32, out: Sender<Outbound>, link: Arc<LinkState>) -> Self {
        Self {
            channel,
            out,
            link,
            received: Arc::default(),
        }
    }

    /// Where the connection counts the bytes it receives for this channel.
    pub(crate) fn received_counter(&self) -> Arc<std::sync::atomic::AtomicU64> {
        self.received.clone()
    }

    /// Bytes of the channel's elements received so far.
    pub(crate) fn received_bytes(&self) -> u64 {
        self.received.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The error of a channel whose elements stopped coming: the connection's failure if it
    /// failed, otherwise the upstream task went away.
    pub fn disconnected(&self) -> TaskError {
        match self.link.failure() {
            Some(_) => self.link.lost(),
            None => TaskError::ChannelClosed { peer: "upstream" },
        }
    }

    /// Grants `credits` more elements to the sender.
    pub fn grant(&self, credits: u32) {
        // A closed connection fails the channel on its own; nothing to tell then.
        let _ = self.out.send(Outbound::Credit {
            channel: self.channel,
            credits,
        });
    }
}
