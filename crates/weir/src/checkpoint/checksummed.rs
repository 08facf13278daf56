//! The envelope of Weir's own durable files (checkpoint metadata, the job record):
//! `magic (8 bytes) | crc32 of the payload | payload length (u64) | postcard payload`, so that
//! a truncated, damaged or foreign file is told apart from a valid one and said what is wrong.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Bytes before the payload.
const HEADER: usize = 20;

/// Encodes `value` under `magic`.
pub fn encode<T: Serialize>(magic: &[u8; 8], value: &T) -> Result<Vec<u8>, postcard::Error> {
    let payload = postcard::to_allocvec(value)?;
    let mut out = Vec::with_capacity(payload.len() + HEADER);
    out.extend_from_slice(magic);
    out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

/// Decodes and verifies a file written by [`encode`] under `magic`; `what` names the kind of
/// file for the bad-magic error.
pub fn decode<T: DeserializeOwned>(magic: &[u8; 8], what: &str, bytes: &[u8]) -> Result<T, String> {
    if bytes.len() < HEADER {
        return Err(format!(
            "truncated: {} bytes, header needs {HEADER}",
            bytes.len()
        ));
    }
    if &bytes[..8] != magic {
        return Err(format!("not a {what} (bad magic)"));
    }
    let crc = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    let mut len_bytes = [0u8; 8];
    len_bytes.copy_from_slice(&bytes[12..HEADER]);
    let len = u64::from_le_bytes(len_bytes);
    let payload = &bytes[HEADER..];
    if payload.len() as u64 != len {
        return Err(format!(
            "truncated: payload is {} bytes, header says {len}",
            payload.len()
        ));
    }
    if crc32fast::hash(payload) != crc {
        return Err("checksum mismatch".into());
    }
    postcard::from_bytes(payload).map_err(|e| format!("cannot decode: {e}"))
}
