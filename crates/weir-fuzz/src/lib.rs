//! # weir-fuzz
//!
//! The fuzz targets of every decoder that reads bytes from outside the process: checkpoint
//! metadata and the job record, keyed state blocks (and the heap backend restoring them),
//! the network frames of cluster mode and the elements they carry, the CSV fast path
//! (which must agree with the csv crate), JSON values, and the Kafka log reader's
//! responses, record batches (compressed ones too) and control markers.
//!
//! Each target is a plain function of bytes. Errors are expected; a target panics only when
//! a decoder breaks a rule: it panics itself, accepts what it then cannot write back the
//! same, or disagrees with the reference it must match. `fuzz/` (cargo-fuzz, nightly) runs
//! them under libFuzzer with memory and time limits, which also catch allocations that
//! follow a length field and loops; `tests/corpus.rs` replays the seed corpus and every
//! regression input on stable in CI, and runs them on random and mutated inputs.

#![warn(missing_docs)]

use std::io::Cursor;

use serde::{Deserialize, Serialize};
use weir::checkpoint::job_record::JobRecord;
use weir::checkpoint::metadata::{CheckpointMetadata, KeyGroupEntry};
use weir::runtime::network::frame::{read_hello, Frame, FrameReader};
use weir::runtime::stream_element::{CheckpointBarrier, StreamElement};
use weir::state::heap_keyed_state_backend::HeapKeyedStateBackend;
use weir::state::key_group::KeyGroupRange;
use weir::state::keyed_state_snapshot::{decode_key_group_block, KeyGroupBlock};

pub mod seeds;

/// A fuzz target: a name (its directory under `fuzz/corpus/`) and the function.
pub type Target = (&'static str, fn(&[u8]));

/// Every target.
pub const TARGETS: &[Target] = &[
    ("checkpoint_metadata", checkpoint_metadata),
    ("keyed_state_block", keyed_state_block),
    ("network_frames", network_frames),
    ("csv_fast_path", csv_fast_path),
    ("json_value", json_value),
    ("kafka_log", kafka_log),
    ("kafka_compressed_batch", kafka_compressed_batch),
    ("kafka_response", kafka_response),
];

/// The envelope of Weir's durable files (`magic | crc32 | length | payload`) around
/// `payload`, so that the fuzzer reaches the payload's decoder past the checksum.
pub fn framed(magic: &[u8; 8], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 20);
    out.extend_from_slice(magic);
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Checkpoint metadata and the job record, as read back from storage: the bytes as they
/// are, and as a checksummed payload. What decodes must encode back and decode equal.
pub fn checkpoint_metadata(data: &[u8]) {
    for bytes in [
        data.to_vec(),
        framed(b"WEIRCHK3", data),
        framed(b"WEIRJOB1", data),
    ] {
        if let Ok(metadata) = CheckpointMetadata::decode(&bytes) {
            let _ = metadata.state_size();
            let _ = metadata.shared_files().count();
            let again = metadata.encode().expect("decoded metadata encodes");
            assert_eq!(
                CheckpointMetadata::decode(&again).expect("re-encoded metadata decodes"),
                metadata
            );
        }
        if let Ok(record) = JobRecord::decode(&bytes) {
            let again = record.encode().expect("a decoded job record encodes");
            assert_eq!(
                JobRecord::decode(&again).expect("a re-encoded job record decodes"),
                record
            );
        }
    }
}

/// A key group block of a keyed state file, past its checksum, restored into the heap
/// backend with string and with integer keys, states registered before and after the
/// restore; a restored backend snapshots, and its blocks decode again.
pub fn keyed_state_block(data: &[u8]) {
    let entry = KeyGroupEntry {
        key_group: 3,
        offset: 0,
        length: data.len() as u64,
        crc32: crc32fast::hash(data),
    };
    let Ok(block) = decode_key_group_block(&entry, data, "fuzz.keyed") else {
        return;
    };
    let range = KeyGroupRange { start: 0, end: 7 };
    restore_into(HeapKeyedStateBackend::<String>::new(8, range), &block);
    restore_into(HeapKeyedStateBackend::<u64>::new(8, range), &block);
}

fn restore_into<K: weir::Key>(mut backend: HeapKeyedStateBackend<K>, block: &KeyGroupBlock) {
    // Registered before the restore: decoded now. After it: decoded when registered. The
    // rolling aggregations' state (the seeds' own) and a state with a time-to-live among them.
    let ttl = weir::StateTtlConfig::new(std::time::Duration::from_secs(60));
    if backend.register::<u64>("rolling-aggregate").is_err()
        || backend.register::<String>("text").is_err()
        || backend.register_with_ttl::<u64>("ttl", Some(ttl)).is_err()
    {
        return;
    }
    if backend.restore(vec![block.clone()]).is_err() {
        return;
    }
    if backend.register::<(i64, i64)>("pair").is_err()
        || backend.register::<Vec<i64>>("list").is_err()
    {
        return;
    }
    let snapshot = backend.snapshot();
    if let Ok((bytes, entries)) = snapshot.write() {
        for entry in entries {
            let start = entry.offset as usize;
            let end = start + entry.length as usize;
            decode_key_group_block(&entry, &bytes[start..end], "rewritten")
                .expect("a block the backend wrote decodes");
        }
    }
}

/// Cluster mode's data connection: frames read until the input ends, each data frame's
/// element decoded as the receiving task would (and a batch's shape checked), each priority
/// frame's barrier; and the bytes as a handshake message.
pub fn network_frames(data: &[u8]) {
    let _ = read_hello(&mut Cursor::new(data), "fuzz");
    let mut reader = FrameReader::new(Cursor::new(data), "fuzz", 1 << 20);
    // Each frame consumes at least its 4-byte length: the loop ends with the input.
    while let Ok(Some(frame)) = reader.next_frame() {
        match frame {
            Frame::Data { payload, .. } => {
                if let Ok(StreamElement::Records(batch)) =
                    postcard::from_bytes::<StreamElement<(String, i64)>>(payload)
                {
                    let _ = batch.check_shape();
                }
                if let Ok(StreamElement::Records(batch)) =
                    postcard::from_bytes::<StreamElement<u64>>(payload)
                {
                    let _ = batch.check_shape();
                }
            }
            Frame::Priority { payload, .. } => {
                let _ = postcard::from_bytes::<CheckpointBarrier>(payload);
            }
            Frame::Credit { .. } | Frame::Close => {}
        }
    }
}

/// A row type read by name, as a user's struct is.
#[derive(Debug, Deserialize, Serialize)]
struct NamedRow {
    id: u64,
    name: String,
    score: Option<f32>,
    flag: bool,
}

/// The CSV fast path against the csv crate's own deserializer, for rows of `data` (the
/// first also serving as the header row for a struct read by name): where the fast path
/// decodes a row, the csv crate must decode it to the same value.
pub fn csv_fast_path(data: &[u8]) {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(data);
    let mut headers: Option<csv::ByteRecord> = None;
    for record in reader.byte_records().take(64) {
        let Ok(record) = record else {
            return;
        };
        agree::<(i64, u32, f64, String, bool, Option<i64>)>(&record, None);
        agree::<(u8, i8, u16, i16, Option<u64>)>(&record, None);
        agree::<Vec<i32>>(&record, None);
        agree::<(String, Option<String>, f32)>(&record, None);
        match &headers {
            Some(h) => agree::<NamedRow>(&record, Some(h)),
            None => headers = Some(record.clone()),
        }
    }
}

fn agree<T: serde::de::DeserializeOwned + std::fmt::Debug>(
    record: &csv::ByteRecord,
    headers: Option<&csv::ByteRecord>,
) {
    let fast = weir::connectors::csv_fields::decode_record::<T>(record, headers);
    let reference = record.deserialize::<T>(headers);
    match (&fast, &reference) {
        // Debug forms compare NaN with NaN, which `==` would not.
        (Ok(a), Ok(b)) => assert_eq!(
            format!("{a:?}"),
            format!("{b:?}"),
            "the fast path and the csv crate disagree on {record:?}"
        ),
        (Err(_), Err(_)) => {}
        _ => panic!("the fast path gives {fast:?} and the csv crate {reference:?} for {record:?}"),
    }
}

/// A Kafka record's value through the JSON deserializer of the Kafka source.
pub fn json_value(data: &[u8]) {
    use weir_kafka::deserializer::{ConsumedRecord, JsonValue, KafkaRecordDeserializer};
    let record = ConsumedRecord {
        topic: "t",
        partition: 0,
        offset: 0,
        timestamp: None,
        key: None,
        value: Some(data),
    };
    let _ = JsonValue::<NamedRow>::default().deserialize(&record);
    // Any document, nested as deep as it goes.
    let _ = JsonValue::<serde::de::IgnoredAny>::default().deserialize(&record);
}

/// A fetched partition's records through the log reader's batch decoders.
pub fn kafka_log(data: &[u8]) {
    weir_kafka::log_reader::fuzzing::raw_log(data);
}

/// A compressed record batch through the log reader's codecs (each within a bound) and its
/// record decoder.
pub fn kafka_compressed_batch(data: &[u8]) {
    weir_kafka::log_reader::fuzzing::compressed_batch(data);
}

/// A broker's response through the log reader's response decoders.
pub fn kafka_response(data: &[u8]) {
    weir_kafka::log_reader::fuzzing::response(data);
}
