//! Entry points for the fuzz targets (`crates/weir-fuzz`): every decoder the log reader runs
//! on bytes from a broker, driven as the reader drives them. Errors are fine; a panic, an
//! allocation that follows a length field rather than the input, or a loop is a bug.

use bytes::{BufMut, Bytes};
use indexmap::IndexMap;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, FetchResponse, MetadataResponse, ResponseHeader,
};
use kafka_protocol::protocol::Decodable;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use super::batches::{
    control_outcome, decode_records, decode_records_within, fold_committed, split_batches,
    OutcomeTracker, RawBatch, ResendTracker,
};
use super::compression::compress;
use super::response_guard::BATCH_HEADER;
use super::{decode_response, FETCH_VERSION, METADATA_VERSION, MIN_FETCH_VERSION};

/// `bytes` as the records of a fetched partition: split into batches, each decoded, the
/// transaction trackers run over them, and the committed records folded.
pub fn raw_log(bytes: &[u8]) {
    let mut batches = Vec::new();
    if split_batches(Bytes::copy_from_slice(bytes), &mut batches).is_err() {
        return;
    }
    for batch in &batches {
        let _ = decode_records(batch);
        if batch.info.control {
            let _ = control_outcome(batch);
        }
    }
    let offset = batches.first().map_or(0, |b| b.info.min_offset);
    let mut outcome = OutcomeTracker::new(offset);
    let mut resend = ResendTracker::new("t/0/0");
    for batch in &batches {
        if !matches!(outcome.visit(batch), Ok(true)) {
            break;
        }
    }
    for batch in &batches {
        if !matches!(resend.visit(batch), Ok(true)) {
            break;
        }
    }
    let _ = fold_committed(batches);
}

/// `bytes` as a broker's response (after its size prefix) to each request the reader sends,
/// decoded as the reader decodes it. The first byte picks the request and version.
pub fn response(bytes: &[u8]) {
    let Some((&choice, body)) = bytes.split_first() else {
        return;
    };
    let mut body = Bytes::copy_from_slice(body);
    let (key, version) = match choice % 4 {
        0 => (ApiKey::ApiVersions, 0),
        1 => (ApiKey::Metadata, METADATA_VERSION),
        2 => (ApiKey::Fetch, FETCH_VERSION),
        _ => (ApiKey::Fetch, MIN_FETCH_VERSION),
    };
    if ResponseHeader::decode(&mut body, key.response_header_version(version)).is_err() {
        return;
    }
    match key {
        ApiKey::ApiVersions => {
            let _ = decode_response::<ApiVersionsResponse>(key, version, body);
        }
        ApiKey::Metadata => {
            let _ = decode_response::<MetadataResponse>(key, version, body);
        }
        _ => {
            if let Ok(fetch) = decode_response::<FetchResponse>(key, version, body) {
                for topic in fetch.responses {
                    for partition in topic.partitions {
                        if let Some(records) = partition.records {
                            raw_log(&records);
                        }
                    }
                }
            }
        }
    }
}

/// What a fuzzed compressed batch may expand to: small, so that a bomb is refused quickly.
const FUZZ_DECOMPRESSED_LIMIT: usize = 1 << 20;

/// The codecs a producer compresses with, in the order the fuzz input's first byte picks.
const CODECS: [Compression; 4] = [
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

/// `bytes` as a compressed batch. The first byte picks the codec, and whether the rest is the
/// batch's compressed region as it arrives, or its records in the clear, compressed here
/// first (so that the fuzzer also reaches the record decoder behind each codec); the second
/// byte is the record count the batch's header claims. The batch passes its CRC check, as a
/// broker's would, and is decoded within a small bound.
pub fn compressed_batch(bytes: &[u8]) {
    let [choice, count, rest @ ..] = bytes else {
        return;
    };
    let codec = CODECS[usize::from(choice % 4)];
    let region = if choice & 4 == 0 {
        rest.to_vec()
    } else {
        match compress(rest, codec) {
            Ok(compressed) => compressed,
            Err(_) => return,
        }
    };
    let Some(batch) = batch_around(&region, codec, usize::from(*count)) else {
        return;
    };
    let _ = decode_records_within(&batch, FUZZ_DECOMPRESSED_LIMIT);
}

/// Seeds of [`compressed_batch`]: three records compressed with each codec, as they arrive
/// and in the clear.
pub fn compressed_batch_seeds() -> Vec<Vec<u8>> {
    let Some(plain) = batch_of(&[b"a", b"bb", b"ccc"], Compression::None) else {
        return Vec::new();
    };
    let records = plain.bytes.get(BATCH_HEADER..).unwrap_or_default();
    let mut seeds = Vec::new();
    for (i, codec) in (0u8..).zip(CODECS) {
        if let Ok(compressed) = compress(records, codec) {
            seeds.push([&[i, 3][..], &compressed].concat());
        }
        seeds.push([&[i | 4, 3][..], records].concat());
    }
    seeds
}

/// A transactional batch of `count` empty records whose compressed region is `region`
/// (whatever it holds), with a valid CRC: what a broker would hand the reader.
pub(super) fn batch_around(region: &[u8], codec: Compression, count: usize) -> Option<RawBatch> {
    let records: Vec<Record> = (0..count).map(|i| record(i, None)).collect();
    encode(&records, codec, Some(region))
}

/// A transactional batch of records with `values`, compressed with `codec`.
pub(super) fn batch_of(values: &[&[u8]], codec: Compression) -> Option<RawBatch> {
    let records: Vec<Record> = (0..)
        .zip(values)
        .map(|(i, v)| record(i, Some(Bytes::copy_from_slice(v))))
        .collect();
    encode(&records, codec, None)
}

fn record(i: usize, value: Option<Bytes>) -> Record {
    let i = i32::try_from(i).unwrap_or(i32::MAX);
    Record {
        transactional: true,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: 7,
        producer_epoch: 0,
        timestamp_type: TimestampType::Creation,
        offset: i64::from(i),
        sequence: i,
        timestamp: 0,
        key: None,
        value,
        headers: IndexMap::new(),
    }
}

/// `records` encoded as one batch, its records region compressed with `codec`, or replaced
/// by `region`.
fn encode(records: &[Record], codec: Compression, region: Option<&[u8]>) -> Option<RawBatch> {
    let mut buf = bytes::BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: codec,
    };
    RecordBatchEncoder::encode_with_custom_compression(
        &mut buf,
        records,
        &options,
        Some(
            |clear: &mut bytes::BytesMut, out: &mut bytes::BytesMut, codec: Compression| {
                match region {
                    Some(region) => out.put_slice(region),
                    None => out.put_slice(&compress(clear, codec)?),
                }
                Ok(())
            },
        ),
    )
    .ok()?;
    let mut batches = Vec::new();
    split_batches(buf.freeze(), &mut batches).ok()?;
    batches.pop()
}
