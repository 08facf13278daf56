//! Checks of a broker's bytes before kafka-protocol decodes them: kafka-protocol reserves
//! room for as many elements as a length field claims (`Vec::with_capacity(n)` for an array,
//! `reserve(record_count)` for a record batch, `IndexMap::with_capacity` for a record's
//! headers), so one corrupt or hostile count of two billion aborts the process on an
//! allocation of tens of gigabytes. [`check`] walks the layout of the responses the log
//! reader asks for (ApiVersions v0, Metadata v1–8, Fetch v4–11, SaslHandshake v1, all
//! non-flexible versions with plain `INT32` array lengths) and [`check_records`] that of a
//! record batch's records (decompressed first, within a bound: see `compression`), and each
//! refuses a count larger than the bytes left could hold, so that what is allocated stays a
//! small multiple of the bytes received or decompressed.

use kafka_protocol::messages::ApiKey;

/// Walks the encoded fields, checking lengths against the bytes left.
struct Walker<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Walker<'_> {
    fn skip(&mut self, n: usize, what: &str) -> Result<(), String> {
        if self.bytes.len() - self.at < n {
            return Err(format!("the response ends inside {what}"));
        }
        self.at += n;
        Ok(())
    }

    fn int32(&mut self, what: &str) -> Result<i32, String> {
        let start = self.at;
        self.skip(4, what)?;
        let b = &self.bytes[start..start + 4];
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn int16(&mut self, what: &str) -> Result<i16, String> {
        let start = self.at;
        self.skip(2, what)?;
        Ok(i16::from_be_bytes([
            self.bytes[start],
            self.bytes[start + 1],
        ]))
    }

    /// A `STRING` or `NULLABLE_STRING` (`INT16` length, -1 for null).
    fn string(&mut self, what: &str) -> Result<(), String> {
        let length = self.int16(what)?;
        if length >= 0 {
            self.skip(length as usize, what)?;
        }
        Ok(())
    }

    /// `BYTES` or `RECORDS` (`INT32` length, -1 for null).
    fn bytes_field(&mut self, what: &str) -> Result<(), String> {
        let length = self.int32(what)?;
        if length >= 0 {
            self.skip(length as usize, what)?;
        }
        Ok(())
    }

    /// An `ARRAY` whose elements take at least `min_element` bytes each, each walked by
    /// `element`.
    fn array(
        &mut self,
        what: &str,
        min_element: usize,
        mut element: impl FnMut(&mut Self) -> Result<(), String>,
    ) -> Result<(), String> {
        let count = self.int32(what)?;
        if count < 0 {
            return Ok(()); // null
        }
        let left = self.bytes.len() - self.at;
        if count as usize > left / min_element.max(1) {
            return Err(format!(
                "{what} claims {count} elements in the {left} bytes left of the response"
            ));
        }
        for _ in 0..count {
            element(self)?;
        }
        Ok(())
    }
}

/// Checks `body` (after the response header) of a response to `key` at `version`.
pub(super) fn check(key: ApiKey, version: i16, body: &[u8]) -> Result<(), String> {
    let mut w = Walker { bytes: body, at: 0 };
    match key {
        ApiKey::ApiVersions => api_versions(&mut w, version),
        ApiKey::Metadata => metadata(&mut w, version),
        ApiKey::Fetch => fetch(&mut w, version),
        ApiKey::SaslHandshake => {
            w.int16("the error code")?;
            w.array("the mechanisms", 2, |w| w.string("a mechanism"))
        }
        // SaslAuthenticate holds no arrays (its bytes are sliced, not reserved), and the
        // reader sends no other request: nothing to check.
        _ => Ok(()),
    }
}

fn api_versions(w: &mut Walker<'_>, version: i16) -> Result<(), String> {
    w.int16("the error code")?;
    w.array("the API keys", 6, |w| w.skip(6, "an API key"))?;
    if version >= 1 {
        w.int32("the throttle time")?;
    }
    Ok(())
}

fn metadata(w: &mut Walker<'_>, version: i16) -> Result<(), String> {
    if version >= 3 {
        w.int32("the throttle time")?;
    }
    let broker_min = if version >= 1 { 12 } else { 10 };
    w.array("the brokers", broker_min, |w| {
        w.int32("a broker id")?;
        w.string("a broker host")?;
        w.int32("a broker port")?;
        if version >= 1 {
            w.string("a broker rack")?;
        }
        Ok(())
    })?;
    if version >= 2 {
        w.string("the cluster id")?;
    }
    if version >= 1 {
        w.int32("the controller id")?;
    }
    w.array("the topics", 8, |w| {
        w.int16("a topic error code")?;
        w.string("a topic name")?;
        if version >= 1 {
            w.skip(1, "a topic's internal flag")?;
        }
        w.array("a topic's partitions", 18, |w| {
            w.skip(10, "a partition's error code, index and leader")?;
            if version >= 7 {
                w.int32("a partition's leader epoch")?;
            }
            w.array("a partition's replicas", 4, |w| w.skip(4, "a replica"))?;
            w.array("a partition's in-sync replicas", 4, |w| {
                w.skip(4, "a replica")
            })?;
            if version >= 5 {
                w.array("a partition's offline replicas", 4, |w| {
                    w.skip(4, "a replica")
                })?;
            }
            Ok(())
        })?;
        if version >= 8 {
            w.int32("a topic's authorized operations")?;
        }
        Ok(())
    })?;
    if version >= 8 {
        w.int32("the cluster's authorized operations")?;
    }
    Ok(())
}

fn fetch(w: &mut Walker<'_>, version: i16) -> Result<(), String> {
    if version >= 1 {
        w.int32("the throttle time")?;
    }
    if version >= 7 {
        w.int16("the error code")?;
        w.int32("the session id")?;
    }
    w.array("the topics", 6, |w| {
        w.string("a topic name")?;
        // Index, error code, high watermark and the records' length; then per version.
        let partition_min = 18
            + if version >= 4 { 12 } else { 0 }
            + if version >= 5 { 8 } else { 0 }
            + if version >= 11 { 4 } else { 0 };
        w.array("a topic's partitions", partition_min, |w| {
            w.skip(14, "a partition's index, error code and high watermark")?;
            if version >= 4 {
                w.skip(8, "a partition's last stable offset")?;
            }
            if version >= 5 {
                w.skip(8, "a partition's log start offset")?;
            }
            if version >= 4 {
                w.array("a partition's aborted transactions", 16, |w| {
                    w.skip(16, "an aborted transaction")
                })?;
            }
            if version >= 11 {
                w.int32("a partition's preferred read replica")?;
            }
            w.bytes_field("a partition's records")
        })
    })
}

/// Bytes of a v2 record batch before its records.
pub(super) const BATCH_HEADER: usize = 61;
/// The fewest bytes a v2 record takes: length, attributes, timestamp and offset deltas, key
/// and value lengths, header count.
const MIN_RECORD: usize = 7;

/// A zigzag varint (Kafka's `VARINT`/`VARLONG`) at `at`: its value and the position after it.
fn varint(bytes: &[u8], at: usize, what: &str) -> Result<(i64, usize), String> {
    let mut value = 0u64;
    for (i, &byte) in bytes
        .get(at..)
        .unwrap_or_default()
        .iter()
        .take(10)
        .enumerate()
    {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            let signed = (value >> 1) as i64 ^ -((value & 1) as i64);
            return Ok((signed, at + i + 1));
        }
    }
    Err(format!("a record batch ends inside {what}"))
}

/// Checks the counts of one uncompressed record batch (`bytes` is the whole batch): its record
/// count, and each record's length and header count, against the bytes they sit in. A
/// compressed batch's records are checked after decompression, by [`check_records`].
pub(super) fn check_batch(bytes: &[u8]) -> Result<(), String> {
    if bytes.len() < BATCH_HEADER || bytes[16] != 2 {
        return Ok(()); // kafka-protocol refuses it on its own
    }
    let attributes = i16::from_be_bytes([bytes[21], bytes[22]]);
    if attributes & 0x07 != 0 {
        return Ok(());
    }
    let count = i32::from_be_bytes([bytes[57], bytes[58], bytes[59], bytes[60]]);
    check_records(&bytes[BATCH_HEADER..], count)
}

/// Checks that `records` (a batch's records region, decompressed) can hold the `count`
/// records its header claims: each record's length and header count against the bytes
/// they sit in.
pub(super) fn check_records(records: &[u8], count: i32) -> Result<(), String> {
    if count < 0 || count as usize > records.len() / MIN_RECORD {
        return Err(format!(
            "a record batch claims {count} records in {} bytes",
            records.len()
        ));
    }
    let mut at = 0;
    for _ in 0..count {
        let (length, body) = varint(records, at, "a record's length")?;
        let end = usize::try_from(length)
            .ok()
            .and_then(|l| body.checked_add(l))
            .filter(|&end| end <= records.len())
            .ok_or_else(|| format!("a record claims {length} bytes past the batch's end"))?;
        let record = &records[..end];
        let mut p = body + 1; // attributes
        p = varint(record, p, "a record's timestamp delta")?.1;
        p = varint(record, p, "a record's offset delta")?.1;
        for what in ["a record's key", "a record's value"] {
            let (len, next) = varint(record, p, what)?;
            p = next.saturating_add(usize::try_from(len.max(0)).unwrap_or(usize::MAX));
            if p > end {
                return Err(format!("{what} runs past its record"));
            }
        }
        let (headers, next) = varint(record, p, "a record's header count")?;
        // A header takes two bytes at least (its key's and its value's lengths).
        if headers < 0 || headers as usize > (end - next) / 2 {
            return Err(format!(
                "a record claims {headers} headers in the {} bytes left of it",
                end - next
            ));
        }
        at = end;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::fetch_response::{
        AbortedTransaction, FetchableTopicResponse, PartitionData,
    };
    use kafka_protocol::messages::metadata_response::{
        MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    use kafka_protocol::messages::{
        ApiVersionsResponse, BrokerId, FetchResponse, MetadataResponse, TopicName,
    };
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

    fn encoded<M: Encodable>(message: &M, version: i16) -> Vec<u8> {
        let mut buf = BytesMut::new();
        message.encode(&mut buf, version).unwrap();
        buf.to_vec()
    }

    fn fetch_response() -> FetchResponse {
        let partition = |i: i32, aborted: bool| {
            PartitionData::default()
                .with_partition_index(i)
                .with_high_watermark(10)
                .with_last_stable_offset(9)
                .with_aborted_transactions(aborted.then(|| {
                    vec![AbortedTransaction::default()
                        .with_producer_id(kafka_protocol::messages::ProducerId(4))
                        .with_first_offset(2)]
                }))
                .with_records(Some(Bytes::from_static(b"0123456789abcdef")))
        };
        FetchResponse::default().with_responses(vec![
            FetchableTopicResponse::default()
                .with_topic(TopicName(StrBytes::from_static_str("orders")))
                .with_partitions(vec![partition(0, true), partition(1, false)]),
            FetchableTopicResponse::default()
                .with_topic(TopicName(StrBytes::from_static_str("t")))
                .with_partitions(vec![]),
        ])
    }

    fn metadata_response() -> MetadataResponse {
        MetadataResponse::default()
            .with_brokers(vec![MetadataResponseBroker::default()
                .with_node_id(BrokerId(1))
                .with_host(StrBytes::from_static_str("127.0.0.1"))
                .with_port(9092)
                .with_rack(Some(StrBytes::from_static_str("r1")))])
            .with_cluster_id(Some(StrBytes::from_static_str("c")))
            .with_topics(vec![MetadataResponseTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str("orders"))))
                .with_partitions(vec![MetadataResponsePartition::default()
                    .with_partition_index(0)
                    .with_leader_id(BrokerId(1))
                    .with_replica_nodes(vec![BrokerId(1), BrokerId(2)])
                    .with_isr_nodes(vec![BrokerId(1)])])])
    }

    /// Every response the reader can get walks to its end, at every version it may use.
    #[test]
    fn well_formed_responses_pass_at_every_version() {
        for version in 4..=11 {
            let body = encoded(&fetch_response(), version);
            check(ApiKey::Fetch, version, &body)
                .unwrap_or_else(|e| panic!("fetch v{version}: {e}"));
            assert!(FetchResponse::decode(&mut Bytes::from(body), version).is_ok());
        }
        for version in 1..=8 {
            let body = encoded(&metadata_response(), version);
            check(ApiKey::Metadata, version, &body)
                .unwrap_or_else(|e| panic!("metadata v{version}: {e}"));
        }
        let versions = ApiVersionsResponse::default().with_api_keys(vec![Default::default(); 3]);
        check(ApiKey::ApiVersions, 0, &encoded(&versions, 0)).unwrap();
    }

    #[test]
    fn record_batches_with_counts_beyond_their_bytes_are_refused() {
        use kafka_protocol::records::{
            Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
            TimestampType,
        };
        let records: Vec<Record> = (0..3)
            .map(|i| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: i,
                // Sequences that follow the offsets keep the records in one batch.
                sequence: i as i32,
                timestamp: 0,
                key: (i != 1).then(|| Bytes::from_static(b"key")),
                value: Some(Bytes::from(vec![b'v'; i as usize * 100])),
                headers: [(
                    StrBytes::from_static_str("h"),
                    Some(Bytes::from_static(b"x")),
                )]
                .into_iter()
                .collect(),
            })
            .collect();
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        };
        RecordBatchEncoder::encode(&mut buf, records.iter(), &options).unwrap();
        let batch = buf.to_vec();
        check_batch(&batch).unwrap();
        assert_eq!(
            RecordBatchDecoder::decode(&mut Bytes::from(batch.clone()))
                .unwrap()
                .records
                .len(),
            3
        );
        let mut huge = batch.clone();
        huge[57..61].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(check_batch(&huge)
            .unwrap_err()
            .contains("claims 2147483647 records"));
        huge[57..61].copy_from_slice(&(-5i32).to_be_bytes());
        assert!(check_batch(&huge).is_err());
        // The first record's header count: 1, as a zigzag varint (2), its last byte but the
        // header's own four (key length, "h", value length, "x").
        let first_length = (batch[61] >> 1) as usize;
        let header_count_at = 62 + first_length - 5;
        assert_eq!(batch[header_count_at], 2);
        let mut headers = batch.clone();
        headers[header_count_at] = 0x7e; // 63 headers in 4 bytes
        assert!(check_batch(&headers)
            .unwrap_err()
            .contains("claims 63 headers"));
    }

    #[test]
    fn an_array_longer_than_the_bytes_left_is_refused_before_any_allocation() {
        let mut body = encoded(&fetch_response(), 11);
        // The topics' count follows throttle time, error code and session id.
        body[10..14].copy_from_slice(&i32::MAX.to_be_bytes());
        let error = check(ApiKey::Fetch, 11, &body).unwrap_err();
        assert!(
            error.contains("the topics claims 2147483647 elements"),
            "{error}"
        );
        let error = check(ApiKey::Fetch, 11, &body[..20]).unwrap_err();
        assert!(
            error.contains("claims") || error.contains("ends inside"),
            "{error}"
        );
    }
}
