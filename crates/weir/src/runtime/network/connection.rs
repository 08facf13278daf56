//! One data connection between two TaskManagers: a writer thread that sends the frames of
//! every channel on it, a reader thread that routes incoming frames to the channels' queues
//! and credits to their senders, and the routing tables both share.
//!
//! The writer ends once every channel end that writes through it is gone (and everything
//! queued is written), then closes its direction; the reader ends when the peer closes its
//! direction. Either side failing — a socket error, a malformed frame — fails the connection:
//! every channel on it is disconnected, so the tasks using them fail with the reason.

use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_channel::{Receiver, Sender};
use serde::de::DeserializeOwned;

use super::credit::{CreditReturn, LinkState, Outbound, RemoteSender};
use super::frame::{write_close, write_credit, Frame, FrameReader};
use super::NetworkError;
use crate::runtime::channel::{ring, ChannelReceiver, DoorbellSlot};
use crate::runtime::stream_element::{CheckpointBarrier, StreamElement};

/// Most credits one frame may grant; more is a protocol error (a window is a few batches).
const MAX_CREDITS_PER_FRAME: u32 = 1 << 16;
/// Socket buffer of the writer and reader.
const IO_BUFFER: usize = 64 * 1024;

/// Where a remote channel's incoming elements go: decodes them and queues them for the
/// receiving task.
pub trait ChannelInbox: Send {
    /// Decodes one element and queues it; an error fails the connection.
    fn deliver(&self, payload: &[u8]) -> Result<(), String>;
    /// Decodes a barrier sent ahead of the queue and puts it on the priority lane.
    fn deliver_priority(&self, payload: &[u8]) -> Result<(), String>;
}

struct TypedInbox<T> {
    tx: Sender<StreamElement<T>>,
    priority: Sender<CheckpointBarrier>,
    doorbell: DoorbellSlot,
    /// Bytes received for the channel.
    received: Arc<std::sync::atomic::AtomicU64>,
}

impl<T: DeserializeOwned + Send> ChannelInbox for TypedInbox<T> {
    fn deliver(&self, payload: &[u8]) -> Result<(), String> {
        self.received
            .fetch_add(payload.len() as u64, std::sync::atomic::Ordering::Relaxed);
        let element: StreamElement<T> =
            postcard::from_bytes(payload).map_err(|e| format!("undecodable element: {e}"))?;
        if let StreamElement::Records(batch) = &element {
            batch.check_shape()?;
        }
        match self.tx.try_send(element) {
            Ok(()) => Ok(()),
            Err(crossbeam_channel::TrySendError::Full(_)) => {
                Err("the sender sent more than its credits".into())
            }
            // The receiving task has ended (it was cancelled); what still comes is dropped.
            Err(crossbeam_channel::TrySendError::Disconnected(_)) => Ok(()),
        }
    }

    fn deliver_priority(&self, payload: &[u8]) -> Result<(), String> {
        let barrier: CheckpointBarrier =
            postcard::from_bytes(payload).map_err(|e| format!("undecodable barrier: {e}"))?;
        // A receiving task that ended needs no barrier.
        let _ = self.priority.send(barrier);
        ring(&self.doorbell);
        Ok(())
    }
}

/// The receiving end of a remote channel with room for `capacity` elements, and the inbox
/// the connection delivers into.
pub fn remote_receiver<T: DeserializeOwned + Send + 'static>(
    capacity: usize,
    credit: CreditReturn,
) -> (ChannelReceiver<T>, Box<dyn ChannelInbox>) {
    let (tx, rx) = crossbeam_channel::bounded(capacity);
    let (priority, priority_rx) = crossbeam_channel::unbounded();
    let doorbell = DoorbellSlot::default();
    let received = credit.received_counter();
    (
        ChannelReceiver::remote(rx, priority_rx, doorbell.clone(), credit),
        Box::new(TypedInbox {
            tx,
            priority,
            doorbell,
            received,
        }),
    )
}

/// A channel's credit tokens: created by whichever comes first, the sender's registration
/// or the receiver's first grant.
struct CreditSlot {
    tx: Sender<()>,
    rx: Option<Receiver<()>>,
    /// The receiver's queue size, once the sender registered: unused credits never exceed it.
    window: Option<usize>,
}

#[derive(Default)]
struct Routes {
    inboxes: HashMap<u32, Box<dyn ChannelInbox>>,
    credits: HashMap<u32, CreditSlot>,
    /// The reader has ended: nothing more arrives, so nothing may register.
    closed: bool,
}

impl Routes {
    fn credit_slot(&mut self, channel: u32) -> &mut CreditSlot {
        self.credits.entry(channel).or_insert_with(|| {
            let (tx, rx) = crossbeam_channel::unbounded();
            CreditSlot {
                tx,
                rx: Some(rx),
                window: None,
            }
        })
    }
}

type SharedRoutes = Arc<Mutex<Routes>>;

fn lock(routes: &SharedRoutes) -> MutexGuard<'_, Routes> {
    // A panic while holding the lock leaves consistent maps (inserts and removals only).
    routes
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One live data connection.
pub struct Connection {
    link: Arc<LinkState>,
    /// The largest frame a peer accepts.
    max_frame: usize,
    /// The connection's own line to its writer, for initial credits; dropped by
    /// [`Connection::seal`] so that the writer can end with the channels.
    out: Option<Sender<Outbound>>,
    routes: SharedRoutes,
    stream: TcpStream,
}

impl Connection {
    /// Starts the writer and reader threads of `stream`, a connection to `peer` whose
    /// handshake is done.
    pub fn start(stream: TcpStream, peer: String, max_frame: usize) -> Result<Self, NetworkError> {
        let io = |what: &str| {
            let peer = peer.clone();
            let what = what.to_string();
            move |source| NetworkError::Io {
                what: format!("{what} of the connection to {peer}"),
                cause: source,
            }
        };
        stream.set_nodelay(true).map_err(io("setting no-delay"))?;
        stream
            .set_read_timeout(None)
            .map_err(io("clearing the read timeout"))?;
        let link = LinkState::new(peer.clone());
        let routes: SharedRoutes = Arc::default();
        let (out, outbound) = crossbeam_channel::unbounded();
        let write_half = stream.try_clone().map_err(io("cloning the socket"))?;
        let read_half = stream.try_clone().map_err(io("cloning the socket"))?;
        {
            let link = link.clone();
            std::thread::Builder::new()
                .name(format!("net-write {peer}"))
                .spawn(move || write_loop(write_half, outbound, &link))
                .map_err(io("starting the writer"))?;
        }
        {
            let (link, routes) = (link.clone(), routes.clone());
            std::thread::Builder::new()
                .name(format!("net-read {peer}"))
                .spawn(move || read_loop(read_half, max_frame, &link, &routes))
                .map_err(io("starting the reader"))?;
        }
        Ok(Self {
            link,
            max_frame,
            out: Some(out),
            routes,
            stream,
        })
    }

    /// The peer, for messages.
    pub fn peer(&self) -> &str {
        &self.link.peer
    }

    fn out(&self) -> Result<Sender<Outbound>, NetworkError> {
        self.out
            .clone()
            .ok_or_else(|| NetworkError::NoConnection(format!("{} (sealed)", self.link.peer)))
    }

    /// Registers the receiving side of `channel`, delivering into `inbox`, and grants its
    /// sender `capacity` credits (the queue's size).
    pub fn register_inbox(
        &self,
        channel: u32,
        capacity: usize,
        inbox: Box<dyn ChannelInbox>,
    ) -> Result<(), NetworkError> {
        let out = self.out()?;
        let mut routes = lock(&self.routes);
        if routes.closed {
            return Err(self.closed_error());
        }
        routes.inboxes.insert(channel, inbox);
        drop(routes);
        CreditReturn::new(channel, out, self.link.clone()).grant(capacity as u32);
        Ok(())
    }

    /// A line back to the sender of `channel`, for a receiver about to be registered.
    pub fn credit_return(&self, channel: u32) -> Result<CreditReturn, NetworkError> {
        Ok(CreditReturn::new(channel, self.out()?, self.link.clone()))
    }

    /// The sending end of `channel`, whose receiver's queue holds `window` elements.
    pub fn register_sender(
        &self,
        channel: u32,
        window: usize,
    ) -> Result<RemoteSender, NetworkError> {
        let out = self.out()?;
        let mut routes = lock(&self.routes);
        if routes.closed {
            return Err(self.closed_error());
        }
        let slot = routes.credit_slot(channel);
        slot.window = Some(window);
        let credits = slot.rx.take().ok_or_else(|| NetworkError::Protocol {
            peer: self.link.peer.clone(),
            reason: format!("channel {channel} has two senders"),
        })?;
        Ok(RemoteSender::new(
            channel,
            credits,
            window,
            self.max_frame,
            out,
            self.link.clone(),
        ))
    }

    fn closed_error(&self) -> NetworkError {
        NetworkError::NoConnection(format!(
            "{} (closed: {})",
            self.link.peer,
            self.link.failure().unwrap_or("the peer ended it")
        ))
    }

    /// Every channel is registered: from now on the writer ends with the last channel end.
    pub fn seal(&mut self) {
        self.out = None;
    }

    /// Cuts the connection (the run is cancelled): every channel on it fails.
    pub fn shutdown(&self, reason: &str) {
        self.link.fail(reason);
        let _ = self.stream.shutdown(Shutdown::Both);
    }

    /// Why the connection failed, if it has.
    pub fn failure(&self) -> Option<String> {
        self.link.failure().map(str::to_string)
    }
}

fn write_loop(stream: TcpStream, outbound: Receiver<Outbound>, link: &LinkState) {
    let mut writer = BufWriter::with_capacity(IO_BUFFER, &stream);
    // Credits of one round, merged per channel.
    let mut credits: Vec<(u32, u32)> = Vec::new();
    let result = (|| -> std::io::Result<()> {
        while let Ok(first) = outbound.recv() {
            let mut next = Some(first);
            while let Some(frame) = next.take().or_else(|| outbound.try_recv().ok()) {
                match frame {
                    Outbound::Data(bytes) => writer.write_all(&bytes)?,
                    Outbound::Credit {
                        channel,
                        credits: n,
                    } => match credits.iter_mut().find(|(c, _)| *c == channel) {
                        Some((_, total)) => *total = total.saturating_add(n),
                        None => credits.push((channel, n)),
                    },
                }
            }
            for (channel, n) in credits.drain(..) {
                write_credit(&mut writer, channel, n)?;
            }
            writer.flush()?;
        }
        write_close(&mut writer)?;
        writer.flush()
    })();
    match result {
        // Every channel end is gone and all is written: close this direction only, the peer
        // may still be sending.
        Ok(()) => {
            let _ = stream.shutdown(Shutdown::Write);
        }
        Err(e) => {
            link.fail(format!("writing failed: {e}"));
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

fn read_loop(stream: TcpStream, max_frame: usize, link: &LinkState, routes: &SharedRoutes) {
    let mut reader = FrameReader::new(
        BufReader::with_capacity(IO_BUFFER, &stream),
        link.peer.clone(),
        max_frame,
    );
    let mut closed = false;
    let failure = loop {
        match reader.next_frame() {
            Ok(Some(_)) if closed => break Some("a frame after the close frame".into()),
            Ok(Some(Frame::Close)) => closed = true,
            Ok(Some(Frame::Data { channel, payload })) => {
                let routes = lock(routes);
                let Some(inbox) = routes.inboxes.get(&channel) else {
                    break Some(format!(
                        "data for channel {channel}, which has no receiver here"
                    ));
                };
                if let Err(reason) = inbox.deliver(payload) {
                    break Some(format!("channel {channel}: {reason}"));
                }
            }
            Ok(Some(Frame::Priority { channel, payload })) => {
                let routes = lock(routes);
                let Some(inbox) = routes.inboxes.get(&channel) else {
                    break Some(format!(
                        "a barrier for channel {channel}, which has no receiver here"
                    ));
                };
                if let Err(reason) = inbox.deliver_priority(payload) {
                    break Some(format!("channel {channel}: {reason}"));
                }
            }
            Ok(Some(Frame::Credit { channel, credits })) => {
                if credits > MAX_CREDITS_PER_FRAME {
                    break Some(format!(
                        "{credits} credits in one frame for channel {channel}"
                    ));
                }
                let mut routes = lock(routes);
                let slot = routes.credit_slot(channel);
                // A receiver never has more room than its queue.
                let unused = slot.tx.len() + credits as usize;
                if let Some(window) = slot.window.filter(|w| unused > *w) {
                    break Some(format!(
                        "channel {channel} was granted {unused} credits, more than its window of {window}"
                    ));
                }
                for _ in 0..credits {
                    let _ = slot.tx.send(());
                }
            }
            Ok(None) if closed => break None,
            // An end without the close frame: the connection was cut (or the peer died).
            Ok(None) => {
                break Some(
                    "the connection ended without its close frame (cut, or the peer died)".into(),
                )
            }
            Err(e) => break Some(e.to_string()),
        }
    };
    // `None`: a clean end, the peer's channels are done.
    if let Some(reason) = failure {
        tracing::warn!(peer = %link.peer, %reason, "data connection failed");
        link.fail(reason);
        let _ = stream.shutdown(Shutdown::Both);
    }
    // Nothing more arrives: the channels' receivers and senders see the end.
    let mut routes = lock(routes);
    routes.closed = true;
    routes.inboxes.clear();
    routes.credits.clear();
}
