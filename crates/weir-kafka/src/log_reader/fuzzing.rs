//! Entry points for the fuzz targets (`crates/weir-fuzz`): every decoder the log reader runs
//! on bytes from a broker, driven as the reader drives them. Errors are fine; a panic, an
//! allocation that follows a length field rather than the input, or a loop is a bug.

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, FetchResponse, MetadataResponse, ResponseHeader,
};
use kafka_protocol::protocol::Decodable;

use super::batches::{
    control_outcome, decode_records, fold_committed, split_batches, OutcomeTracker, ResendTracker,
};
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
