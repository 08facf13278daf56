//! Seed inputs for the fuzz targets: well-formed bytes of each kind, so that the fuzzer
//! starts from inputs that reach deep into the decoders. `weir-fuzz-seeds` writes them to
//! `fuzz/corpus/<target>/`, those of checkpoints taken from a real job's checkpoint
//! directory.

use std::path::Path;

use bytes::{Bytes, BytesMut};
use indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use weir::checkpoint::job_record_versions::JOB_RECORD_DIR;
use weir::checkpoint::metadata::{CheckpointMetadata, KeyedStateHandle};
use weir::runtime::batch::RecordBatch;
use weir::runtime::network::frame::{data_frame, priority_frame, write_close, write_credit};
use weir::runtime::stream_element::{CheckpointBarrier, SnapshotType, StreamElement, StreamEvent};

/// A seed: its target's name and its bytes.
pub type Seed = (&'static str, Vec<u8>);

/// The seeds that need no job run.
pub fn built_in() -> Vec<Seed> {
    let mut seeds = Vec::new();
    seeds.extend(network_frames().into_iter().map(|s| ("network_frames", s)));
    for text in [
        "1,2,3.5,hello,true,7\n-4,0,1e3,\"quoted, with comma\",false,\n",
        "id,name,score,flag\n1,ann,0.5,true\n2,\"b\"\"ob\",,false\n3,c,NaN,true\n",
        "255,-128,65535,-32768,18446744073709551615\n0,0,0,0,\n",
        " 1 , 2 ,3\n+5,-0,007\n1.0,0x10,1_000\n",
    ] {
        seeds.push(("csv_fast_path", text.as_bytes().to_vec()));
    }
    for json in [
        r#"{"id":1,"name":"ann","score":0.5,"flag":true}"#,
        r#"[1,2.5,"x",null,{"a":[true,false]}]"#,
        r#"{"id":18446744073709551615,"name":"\u00e9\ud83d\ude00","score":null,"flag":false}"#,
    ] {
        seeds.push(("json_value", json.as_bytes().to_vec()));
    }
    seeds.extend(kafka_logs().into_iter().map(|s| ("kafka_log", s)));
    seeds.extend(
        weir_kafka::log_reader::fuzzing::compressed_batch_seeds()
            .into_iter()
            .map(|s| ("kafka_compressed_batch", s)),
    );
    seeds.extend(kafka_responses().into_iter().map(|s| ("kafka_response", s)));
    seeds.extend(keyed_blocks().into_iter().map(|s| ("keyed_state_block", s)));
    seeds
}

/// Key group blocks of each state the keyed target registers (a job's own come from
/// [`from_checkpoints`]): `(state name, postcard of its (key, value) pairs)`, with a
/// time-to-live state's last-access times.
fn keyed_blocks() -> Vec<Vec<u8>> {
    let encode =
        |states: Vec<(String, Vec<u8>)>| postcard::to_allocvec(&states).unwrap_or_default();
    let pairs = |bytes: postcard::Result<Vec<u8>>| bytes.unwrap_or_default();
    vec![
        encode(vec![
            (
                "text".into(),
                pairs(postcard::to_allocvec(&vec![(
                    "k1".to_string(),
                    "v".to_string(),
                )])),
            ),
            (
                "pair".into(),
                pairs(postcard::to_allocvec(&vec![(7u64, (1i64, -2i64))])),
            ),
            (
                "list".into(),
                pairs(postcard::to_allocvec(&vec![(
                    "k2".to_string(),
                    vec![1i64, 2, 3],
                )])),
            ),
        ]),
        encode(vec![(
            "ttl".into(),
            pairs(postcard::to_allocvec(&vec![(
                "k3".to_string(),
                5u64,
                1_700_000_000_000i64,
            )])),
        )]),
    ]
}

/// Responses as the log reader reads them: the choice byte of the target, the response
/// header, the body.
fn kafka_responses() -> Vec<Vec<u8>> {
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::metadata_response::{
        MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    use kafka_protocol::messages::{
        ApiKey, ApiVersionsResponse, BrokerId, FetchResponse, MetadataResponse, ResponseHeader,
        TopicName,
    };
    use kafka_protocol::protocol::Encodable;

    fn encode<M: Encodable>(choice: u8, key: ApiKey, version: i16, message: &M) -> Vec<u8> {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&[choice]);
        let header = ResponseHeader::default().with_correlation_id(1);
        if header
            .encode(&mut buf, key.response_header_version(version))
            .and_then(|()| message.encode(&mut buf, version))
            .is_err()
        {
            return Vec::new();
        }
        buf.to_vec()
    }
    let versions = ApiVersionsResponse::default().with_api_keys(vec![
        ApiVersion::default()
            .with_api_key(ApiKey::Fetch as i16)
            .with_min_version(4)
            .with_max_version(16),
        ApiVersion::default()
            .with_api_key(ApiKey::Metadata as i16)
            .with_max_version(12),
    ]);
    let topic = TopicName(StrBytes::from_static_str("t"));
    let metadata = MetadataResponse::default()
        .with_brokers(vec![MetadataResponseBroker::default()
            .with_node_id(BrokerId(1))
            .with_host(StrBytes::from_static_str("127.0.0.1"))
            .with_port(9092)])
        .with_topics(vec![MetadataResponseTopic::default()
            .with_name(Some(topic.clone()))
            .with_partitions(vec![MetadataResponsePartition::default()
                .with_partition_index(0)
                .with_leader_id(BrokerId(1))])]);
    let records = Bytes::from(kafka_logs().concat());
    let fetch = FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
        .with_topic(topic)
        .with_partitions(vec![PartitionData::default()
            .with_partition_index(0)
            .with_high_watermark(8)
            .with_last_stable_offset(8)
            .with_records(Some(records))])]);
    vec![
        encode(0, ApiKey::ApiVersions, 0, &versions),
        encode(1, ApiKey::Metadata, 8, &metadata),
        encode(2, ApiKey::Fetch, 11, &fetch),
        encode(3, ApiKey::Fetch, 4, &fetch),
    ]
}

fn barrier(id: u64) -> CheckpointBarrier {
    CheckpointBarrier {
        checkpoint_id: id,
        timestamp_millis: 1_700_000_000_000 + id,
        snapshot_type: SnapshotType::Checkpoint,
        is_final: false,
        stop: None,
        unaligned: id.is_multiple_of(2),
    }
}

/// A connection's frames: batches of records (keyed and not, with timestamps), events,
/// a priority barrier, credit and close.
fn network_frames() -> Vec<Vec<u8>> {
    let mut keyed = RecordBatch::keyed_with_capacity(3);
    for i in 0..3u32 {
        keyed.push_keyed(
            (format!("k{i}"), i64::from(i) * 7),
            Some(i64::from(i)),
            i + 10,
        );
    }
    let mut plain = RecordBatch::with_capacity(2);
    plain.push(("a".to_string(), 1i64), None);
    plain.push(("b".to_string(), -1i64), None);
    let mut numbers = RecordBatch::with_capacity(2);
    numbers.push(5u64, Some(9));
    numbers.push(6u64, Some(10));
    let mut stream = Vec::new();
    let frames = [
        data_frame(0, &StreamElement::Records(keyed)),
        data_frame(1, &StreamElement::Records(plain)),
        data_frame(2, &StreamElement::Records(numbers)),
        data_frame(
            0,
            &StreamElement::<(String, i64)>::Event(StreamEvent::Barrier(barrier(4))),
        ),
        data_frame(
            0,
            &StreamElement::<(String, i64)>::Event(StreamEvent::EndOfData),
        ),
        priority_frame(3, &barrier(5)),
    ];
    let mut seeds = Vec::new();
    for frame in frames.into_iter().flatten() {
        seeds.push(frame.clone());
        stream.extend_from_slice(&frame);
    }
    let _ = write_credit(&mut stream, 1, 40);
    let _ = write_close(&mut stream);
    seeds.push(stream);
    seeds
}

/// One encoded record batch.
fn batch(
    offset: i64,
    producer_id: i64,
    transactional: bool,
    control: Option<bool>,
    values: &[&str],
) -> Vec<u8> {
    let entries: Vec<(Option<Bytes>, Option<Bytes>)> = match control {
        Some(commit) => {
            let mut key = BytesMut::new();
            key.extend_from_slice(&0i16.to_be_bytes());
            key.extend_from_slice(&i16::from(commit).to_be_bytes());
            vec![(Some(key.freeze()), Some(Bytes::new()))]
        }
        None => values
            .iter()
            .map(|v| {
                (
                    Some(Bytes::from(format!("k-{v}"))),
                    Some(Bytes::from(v.to_string())),
                )
            })
            .collect(),
    };
    let mut headers = IndexMap::new();
    if control.is_none() {
        headers.insert(
            StrBytes::from_static_str("weir-resend-of"),
            Some(Bytes::from_static(b"t/0/0")),
        );
    }
    let records: Vec<Record> = entries
        .into_iter()
        .enumerate()
        .map(|(i, (key, value))| Record {
            transactional,
            control: control.is_some(),
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: offset + i as i64,
            sequence: i as i32,
            timestamp: 1_700_000_000_000,
            key,
            value,
            headers: headers.clone(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let encoded = RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    );
    if encoded.is_err() {
        return Vec::new();
    }
    buf.to_vec()
}

/// Partitions' records: plain, a committed and an aborted transaction with their markers.
fn kafka_logs() -> Vec<Vec<u8>> {
    let plain = batch(0, -1, false, None, &["a", "b", "c"]);
    let mut transactions = batch(3, 7, true, None, &["x", "y"]);
    transactions.extend(batch(5, 7, true, Some(true), &[]));
    transactions.extend(batch(6, 8, true, None, &["z"]));
    transactions.extend(batch(7, 8, true, Some(false), &[]));
    vec![plain, transactions]
}

/// Seeds from a checkpoint directory `<dir>/<job>/chk-*`: each `_metadata`, the job record,
/// and each key group block of the keyed state files the metadata names.
pub fn from_checkpoints(job_dir: &Path) -> std::io::Result<Vec<Seed>> {
    let mut seeds = Vec::new();
    for entry in std::fs::read_dir(job_dir)? {
        let path = entry?.path();
        if path.file_name().is_some_and(|n| n == JOB_RECORD_DIR) {
            for version in std::fs::read_dir(&path)? {
                seeds.push(("checkpoint_metadata", std::fs::read(version?.path())?));
            }
        }
        let metadata_path = path.join("_metadata");
        if !metadata_path.is_file() {
            continue;
        }
        let bytes = std::fs::read(&metadata_path)?;
        let metadata = CheckpointMetadata::decode(&bytes).map_err(|reason| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: {reason}", metadata_path.display()),
            )
        })?;
        seeds.push(("checkpoint_metadata", bytes));
        for subtask in metadata.operators.iter().flat_map(|o| &o.subtasks) {
            let Some(KeyedStateHandle::KeyGroups(handle)) = &subtask.keyed else {
                continue;
            };
            let file = std::fs::read(path.join(&handle.file))?;
            for entry in handle.key_groups.iter().take(4) {
                let start = entry.offset as usize;
                let end = start + entry.length as usize;
                if let Some(block) = file.get(start..end) {
                    seeds.push(("keyed_state_block", block.to_vec()));
                }
            }
        }
    }
    Ok(seeds)
}
