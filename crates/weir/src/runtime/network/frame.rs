//! The wire format of a data connection.
//!
//! A connection opens with a handshake: the dialing side writes [`MAGIC`] and a
//! length-prefixed [`Hello`] (postcard), the accepting side answers with a length-prefixed
//! `Result<(), String>`. After that both directions carry frames:
//!
//! ```text
//! u32 length (little endian; the bytes after it) | u8 kind | u32 channel | body
//!   kind 1, data:   body = one postcard-encoded StreamElement (a batch or an event)
//!   kind 2, credit: body = u32 number of elements the sender may send
//!   kind 3, close:  no body (channel 0); the last frame of a direction that ends normally
//!   kind 4, priority: body = one postcard-encoded CheckpointBarrier sent ahead of the
//!                   channel's queue (an unaligned checkpoint's); it spends no credit
//! ```
//!
//! A direction that ends without a close frame was cut: the reader reports it as a failure,
//! not as the peer's normal end.
//!
//! A length above the configured maximum, an unknown kind or a short body is a protocol
//! error: the reader never allocates more than the maximum, whatever the length field says.

use std::io::{ErrorKind, Read, Write};

use serde::{Deserialize, Serialize};

use super::NetworkError;

/// The first bytes of every data connection (and the format's version).
pub const MAGIC: &[u8; 8] = b"WEIRNET1";

/// Bytes of a frame header after the length field: kind and channel.
const HEADER: usize = 5;
/// The length field.
const LENGTH: usize = 4;
/// Largest handshake message accepted.
const MAX_HELLO: usize = 64 * 1024;

const KIND_DATA: u8 = 1;
const KIND_CREDIT: u8 = 2;
const KIND_CLOSE: u8 = 3;
const KIND_PRIORITY: u8 = 4;

/// One run of a job's tasks: the JobManager's epoch (fencing token) and the attempt number
/// within it. Connections, and the channels on them, belong to one run.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default,
)]
pub struct RunId {
    /// The JobManager's epoch.
    pub epoch: u64,
    /// The attempt within the epoch.
    pub attempt: u64,
}

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.epoch, self.attempt)
    }
}

/// What the dialing TaskManager says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The fingerprint of the job graph it was built from; a mismatch is refused.
    pub job_fingerprint: u64,
    /// The run the connection serves.
    pub run: RunId,
    /// The dialing TaskManager's id.
    pub from: String,
}

/// A frame read from a connection; the data body borrows the reader's buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// One encoded element of `channel`.
    Data {
        /// The channel's index in the ExecutionGraph.
        channel: u32,
        /// The postcard-encoded element.
        payload: &'a [u8],
    },
    /// The receiver of `channel` has room for `credits` more elements.
    Credit {
        /// The channel's index in the ExecutionGraph.
        channel: u32,
        /// How many.
        credits: u32,
    },
    /// The peer ends this direction normally: nothing follows.
    Close,
    /// An unaligned checkpoint's barrier for `channel`, ahead of its queued elements.
    Priority {
        /// The channel's index in the ExecutionGraph.
        channel: u32,
        /// The postcard-encoded barrier.
        payload: &'a [u8],
    },
}

/// Encodes `element` as a complete data frame of `channel`, ready to be written.
pub fn data_frame<E: Serialize>(channel: u32, element: &E) -> Result<Vec<u8>, postcard::Error> {
    frame_of(KIND_DATA, channel, element)
}

/// Encodes `barrier` as a complete priority frame of `channel`.
pub fn priority_frame(
    channel: u32,
    barrier: &crate::runtime::stream_element::CheckpointBarrier,
) -> Result<Vec<u8>, postcard::Error> {
    frame_of(KIND_PRIORITY, channel, barrier)
}

fn frame_of<E: Serialize>(kind: u8, channel: u32, element: &E) -> Result<Vec<u8>, postcard::Error> {
    let mut frame = Vec::with_capacity(256);
    frame.extend_from_slice(&[0; LENGTH]);
    frame.push(kind);
    frame.extend_from_slice(&channel.to_le_bytes());
    let mut frame = postcard::to_extend(element, frame)?;
    let length = (frame.len() - LENGTH) as u32;
    frame[..LENGTH].copy_from_slice(&length.to_le_bytes());
    Ok(frame)
}

/// Writes a credit frame.
pub fn write_credit(out: &mut impl Write, channel: u32, credits: u32) -> std::io::Result<()> {
    let mut frame = [0u8; LENGTH + HEADER + 4];
    frame[..LENGTH].copy_from_slice(&((HEADER + 4) as u32).to_le_bytes());
    frame[LENGTH] = KIND_CREDIT;
    frame[LENGTH + 1..LENGTH + HEADER].copy_from_slice(&channel.to_le_bytes());
    frame[LENGTH + HEADER..].copy_from_slice(&credits.to_le_bytes());
    out.write_all(&frame)
}

/// Writes the close frame that ends a direction normally.
pub fn write_close(out: &mut impl Write) -> std::io::Result<()> {
    let mut frame = [0u8; LENGTH + HEADER];
    frame[..LENGTH].copy_from_slice(&(HEADER as u32).to_le_bytes());
    frame[LENGTH] = KIND_CLOSE;
    out.write_all(&frame)
}

/// Reads frames from one connection into a buffer it reuses.
pub struct FrameReader<R> {
    inner: R,
    peer: String,
    max_frame: usize,
    buffer: Vec<u8>,
}

impl<R: Read> FrameReader<R> {
    /// Reads from `inner` (the connection to `peer`), refusing frames longer than
    /// `max_frame` bytes.
    pub fn new(inner: R, peer: impl Into<String>, max_frame: usize) -> Self {
        Self {
            inner,
            peer: peer.into(),
            max_frame,
            buffer: Vec::new(),
        }
    }

    fn protocol(&self, reason: impl Into<String>) -> NetworkError {
        NetworkError::Protocol {
            peer: self.peer.clone(),
            reason: reason.into(),
        }
    }

    fn io(&self, source: std::io::Error) -> NetworkError {
        NetworkError::Io {
            what: format!("reading from {}", self.peer),
            cause: source,
        }
    }

    /// The next frame; `None` when the peer closed the connection between two frames.
    pub fn next_frame(&mut self) -> Result<Option<Frame<'_>>, NetworkError> {
        let mut length = [0u8; LENGTH];
        // A clean end is an end before the first byte of a frame.
        let mut read = 0;
        while read < LENGTH {
            match self.inner.read(&mut length[read..]) {
                Ok(0) if read == 0 => return Ok(None),
                Ok(0) => return Err(self.protocol("the connection ended inside a frame header")),
                Ok(n) => read += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io(e)),
            }
        }
        let length = u32::from_le_bytes(length) as usize;
        if length > self.max_frame {
            return Err(self.protocol(format!(
                "a frame of {length} bytes exceeds the maximum of {} bytes",
                self.max_frame
            )));
        }
        if length < HEADER {
            return Err(self.protocol(format!("a frame of {length} bytes has no header")));
        }
        self.buffer.resize(length, 0);
        if let Err(e) = self.inner.read_exact(&mut self.buffer) {
            return Err(if e.kind() == ErrorKind::UnexpectedEof {
                self.protocol("the connection ended inside a frame")
            } else {
                self.io(e)
            });
        }
        let kind = self.buffer[0];
        let channel = u32::from_le_bytes([
            self.buffer[1],
            self.buffer[2],
            self.buffer[3],
            self.buffer[4],
        ]);
        let body = &self.buffer[HEADER..];
        match kind {
            KIND_DATA => Ok(Some(Frame::Data {
                channel,
                payload: body,
            })),
            KIND_CREDIT => match <[u8; 4]>::try_from(body) {
                Ok(credits) => Ok(Some(Frame::Credit {
                    channel,
                    credits: u32::from_le_bytes(credits),
                })),
                Err(_) => Err(self.protocol(format!(
                    "a credit frame of channel {channel} has a body of {} bytes, not 4",
                    body.len()
                ))),
            },
            KIND_PRIORITY => Ok(Some(Frame::Priority {
                channel,
                payload: body,
            })),
            KIND_CLOSE if body.is_empty() => Ok(Some(Frame::Close)),
            KIND_CLOSE => Err(self.protocol("a close frame with a body")),
            other => Err(self.protocol(format!("unknown frame kind {other}"))),
        }
    }
}

/// Writes a length-prefixed postcard message (handshake).
fn write_message<M: Serialize>(out: &mut impl Write, message: &M) -> std::io::Result<()> {
    let bytes = postcard::to_allocvec(message)
        .map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e))?;
    out.write_all(&(bytes.len() as u32).to_le_bytes())?;
    out.write_all(&bytes)?;
    out.flush()
}

/// Reads a length-prefixed postcard message of at most [`MAX_HELLO`] bytes.
fn read_message<M: for<'de> Deserialize<'de>>(
    input: &mut impl Read,
    peer: &str,
) -> Result<M, NetworkError> {
    let handshake = |reason: String| NetworkError::Handshake {
        peer: peer.to_string(),
        reason,
    };
    let mut length = [0u8; LENGTH];
    input
        .read_exact(&mut length)
        .map_err(|e| handshake(format!("cannot read: {e}")))?;
    let length = u32::from_le_bytes(length) as usize;
    if length > MAX_HELLO {
        return Err(handshake(format!(
            "a handshake message of {length} bytes is over the limit of {MAX_HELLO}"
        )));
    }
    let mut bytes = vec![0; length];
    input
        .read_exact(&mut bytes)
        .map_err(|e| handshake(format!("cannot read: {e}")))?;
    postcard::from_bytes(&bytes).map_err(|e| handshake(format!("undecodable message: {e}")))
}

/// The dialing side's half of the handshake: introduces itself and reads the answer.
pub fn dial_handshake<S: Read + Write>(
    stream: &mut S,
    hello: &Hello,
    peer: &str,
) -> Result<(), NetworkError> {
    let io = |source| NetworkError::Io {
        what: format!("handshake with {peer}"),
        cause: source,
    };
    stream.write_all(MAGIC).map_err(io)?;
    write_message(stream, hello).map_err(io)?;
    let answer: Result<(), String> = read_message(stream, peer)?;
    answer.map_err(|reason| NetworkError::Handshake {
        peer: peer.to_string(),
        reason: format!("refused: {reason}"),
    })
}

/// The accepting side's half of the handshake: reads the dialer's [`Hello`]. The caller
/// checks it and answers with [`answer_handshake`].
pub fn read_hello<S: Read>(stream: &mut S, peer: &str) -> Result<Hello, NetworkError> {
    let mut magic = [0u8; 8];
    stream
        .read_exact(&mut magic)
        .map_err(|e| NetworkError::Handshake {
            peer: peer.to_string(),
            reason: format!("cannot read the preamble: {e}"),
        })?;
    if &magic != MAGIC {
        return Err(NetworkError::Handshake {
            peer: peer.to_string(),
            reason: format!(
                "not a Weir data connection (preamble {:?})",
                String::from_utf8_lossy(&magic)
            ),
        });
    }
    read_message(stream, peer)
}

/// Answers a dialer's handshake: accepted, or refused with a reason.
pub fn answer_handshake<S: Write>(
    stream: &mut S,
    answer: &Result<(), String>,
) -> std::io::Result<()> {
    write_message(stream, answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::batch::RecordBatch;
    use crate::runtime::stream_element::{StreamElement, StreamEvent};
    use proptest::prelude::*;

    fn read_all(bytes: &[u8], max: usize) -> Result<Vec<(u8, u32, Vec<u8>)>, NetworkError> {
        let mut reader = FrameReader::new(bytes, "test", max);
        let mut out = Vec::new();
        while let Some(frame) = reader.next_frame()? {
            out.push(match frame {
                Frame::Data { channel, payload } => (1, channel, payload.to_vec()),
                Frame::Credit { channel, credits } => (2, channel, credits.to_le_bytes().to_vec()),
                Frame::Close => (3, 0, Vec::new()),
                Frame::Priority { channel, payload } => (4, channel, payload.to_vec()),
            });
        }
        Ok(out)
    }

    #[test]
    fn data_and_credit_frames_round_trip() {
        let element: StreamElement<String> =
            StreamElement::Records(RecordBatch::from(vec!["a".to_string(), "bc".to_string()]));
        let mut wire = data_frame(7, &element).unwrap();
        write_credit(&mut wire, 3, 4).unwrap();
        wire.extend(
            data_frame(9, &StreamElement::<String>::Event(StreamEvent::EndOfStream)).unwrap(),
        );
        let barrier = crate::runtime::stream_element::CheckpointBarrier {
            checkpoint_id: 5,
            timestamp_millis: 1,
            snapshot_type: crate::runtime::stream_element::SnapshotType::Checkpoint,
            is_final: false,
            stop: None,
            unaligned: true,
        };
        wire.extend(priority_frame(9, &barrier).unwrap());
        write_close(&mut wire).unwrap();
        let frames = read_all(&wire, 1 << 20).unwrap();
        assert_eq!(frames.len(), 5);
        assert_eq!(frames[4], (3, 0, Vec::new()));
        assert_eq!((frames[3].0, frames[3].1), (4, 9));
        let decoded: crate::runtime::stream_element::CheckpointBarrier =
            postcard::from_bytes(&frames[3].2).unwrap();
        assert_eq!(decoded, barrier);
        assert_eq!((frames[0].0, frames[0].1), (1, 7));
        let decoded: StreamElement<String> = postcard::from_bytes(&frames[0].2).unwrap();
        assert_eq!(decoded, element);
        assert_eq!(frames[1], (2, 3, 4u32.to_le_bytes().to_vec()));
        assert_eq!((frames[2].0, frames[2].1), (1, 9));
    }

    #[test]
    fn oversized_and_truncated_frames_are_protocol_errors() {
        let frame = data_frame(
            1,
            &StreamElement::Records(RecordBatch::from(vec![0u64; 100])),
        )
        .unwrap();
        let err = read_all(&frame, 16).unwrap_err().to_string();
        assert!(err.contains("exceeds the maximum of 16"), "{err}");
        let err = read_all(&frame[..frame.len() - 1], 1 << 20)
            .unwrap_err()
            .to_string();
        assert!(err.contains("ended inside a frame"), "{err}");
        let err = read_all(&frame[..2], 1 << 20).unwrap_err().to_string();
        assert!(err.contains("inside a frame header"), "{err}");
        let mut bad = frame.clone();
        bad[4] = 9;
        let err = read_all(&bad, 1 << 20).unwrap_err().to_string();
        assert!(err.contains("unknown frame kind 9"), "{err}");
    }

    #[test]
    fn handshake_round_trips_and_rejects_strangers() {
        let hello = Hello {
            job_fingerprint: 42,
            run: RunId {
                epoch: 3,
                attempt: 1,
            },
            from: "tm-1".into(),
        };
        let mut wire = Vec::new();
        wire.extend_from_slice(MAGIC);
        write_message(&mut wire, &hello).unwrap();
        assert_eq!(read_hello(&mut wire.as_slice(), "peer").unwrap(), hello);
        let err = read_hello(&mut &b"GET / HTTP/1.1\r\n"[..], "peer").unwrap_err();
        assert!(
            err.to_string().contains("not a Weir data connection"),
            "{err}"
        );
    }

    proptest! {
        /// No byte string makes the reader panic or allocate past the maximum.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let mut reader = FrameReader::new(bytes.as_slice(), "fuzz", 64);
            for _ in 0..64 {
                match reader.next_frame() {
                    Ok(Some(_)) => prop_assert!(reader.buffer.len() <= 64),
                    Ok(None) | Err(_) => break,
                }
            }
        }
    }
}
