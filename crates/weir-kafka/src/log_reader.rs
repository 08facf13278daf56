//! A transaction-aware reader of a partition's raw log, speaking the Kafka protocol directly
//! (with the `kafka-protocol` crate) instead of going through librdkafka.
//!
//! Why: the exactly-once sink must find out, after a crash, whether a transaction it
//! pre-committed was committed or aborted, and the tests must establish the committed
//! contents of a topic exactly. Both need the log as it is — record batches with their
//! producer ids and the COMMIT/ABORT control batches — not a consumer's filtered view: some
//! Kafka-protocol brokers (tansu among them) never list aborted transactions in fetch
//! responses, so `read_committed` consumers there see aborted records. Folding the control
//! markers ourselves gives the committed set a real Apache Kafka consumer would see.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, BrokerId, FetchRequest, FetchResponse,
    MetadataRequest, MetadataResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{encode_request_header_into_buffer, Decodable, Encodable, StrBytes};
use kafka_protocol::records::{BatchDecodeInfo, RecordBatchDecoder};

use crate::error::KafkaError;

/// The protocol versions this reader asks for (capped by what the broker supports): the
/// last ones that name topics rather than topic ids.
const FETCH_VERSION: i16 = 11;
const METADATA_VERSION: i16 = 8;
const MIN_FETCH_VERSION: i16 = 4;

/// One record of a partition's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// Offset in the partition.
    pub offset: i64,
    /// Record key.
    pub key: Option<Bytes>,
    /// Record value.
    pub value: Option<Bytes>,
    /// Record timestamp (ms).
    pub timestamp: i64,
    /// The producer that wrote it (-1: none).
    pub producer_id: i64,
    /// Its headers.
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// How a transaction ended, as its control marker in the log says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionOutcome {
    /// A COMMIT marker follows the batch.
    Committed,
    /// An ABORT marker follows the batch.
    Aborted,
    /// No marker yet: the transaction is still open.
    Open,
    /// The record is no longer in the log (retention or compaction removed it), so its
    /// transaction's fate cannot be read.
    Unknown,
}

/// A batch of the raw log with what matters for transactions.
#[derive(Debug, Clone)]
struct RawBatch {
    info: BatchDecodeInfo,
    /// Offset of the batch's last record.
    last_offset: i64,
    /// The whole encoded batch, decoded lazily (data batches may be compressed).
    bytes: Bytes,
}

/// What one fetch brought.
struct Fetched {
    high_watermark: i64,
    last_stable_offset: i64,
    records: Option<Bytes>,
}

/// A blocking connection to one broker.
struct BrokerConnection {
    stream: TcpStream,
    address: String,
    correlation_id: i32,
    versions: HashMap<i16, (i16, i16)>,
}

impl BrokerConnection {
    fn connect(address: &str, timeout: Duration) -> Result<Self, KafkaError> {
        let io = |source| KafkaError::BrokerIo {
            broker: address.to_string(),
            source,
        };
        let addr = address
            .to_socket_addrs()
            .map_err(io)?
            .next()
            .ok_or_else(|| KafkaError::Protocol {
                broker: address.to_string(),
                message: "address resolves to nothing".into(),
            })?;
        let stream = TcpStream::connect_timeout(&addr, timeout).map_err(io)?;
        stream.set_read_timeout(Some(timeout)).map_err(io)?;
        stream.set_write_timeout(Some(timeout)).map_err(io)?;
        stream.set_nodelay(true).map_err(io)?;
        let mut connection = Self {
            stream,
            address: address.to_string(),
            correlation_id: 0,
            versions: HashMap::new(),
        };
        let response: ApiVersionsResponse =
            connection.send(ApiKey::ApiVersions, 0, &ApiVersionsRequest::default())?;
        if response.error_code != 0 {
            return Err(connection.protocol_error(format!(
                "ApiVersions failed with error code {}",
                response.error_code
            )));
        }
        connection.versions = response
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        Ok(connection)
    }

    fn protocol_error(&self, message: String) -> KafkaError {
        KafkaError::Protocol {
            broker: self.address.clone(),
            message,
        }
    }

    /// The version to use for `key`: `wanted`, capped by the broker's maximum.
    fn version(&self, key: ApiKey, wanted: i16, minimum: i16) -> Result<i16, KafkaError> {
        let (min, max) = self
            .versions
            .get(&(key as i16))
            .copied()
            .ok_or_else(|| self.protocol_error(format!("broker does not support {key:?}")))?;
        let version = wanted.min(max);
        if version < min.max(minimum) {
            return Err(self.protocol_error(format!(
                "no common version of {key:?}: broker supports {min}..={max}, reader needs >= {minimum}"
            )));
        }
        Ok(version)
    }

    fn send<Req: Encodable, Resp: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp, KafkaError> {
        self.correlation_id += 1;
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("weir-log-reader")));
        let mut body = BytesMut::new();
        encode_request_header_into_buffer(&mut body, &header)
            .and_then(|_| request.encode(&mut body, version))
            .map_err(|e| self.protocol_error(format!("encoding {key:?}: {e}")))?;
        let io = |source| KafkaError::BrokerIo {
            broker: self.address.clone(),
            source,
        };
        let length = i32::try_from(body.len())
            .map_err(|_| self.protocol_error("request too large".into()))?;
        self.stream.write_all(&length.to_be_bytes()).map_err(io)?;
        self.stream.write_all(&body).map_err(io)?;
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).map_err(io)?;
        let size = usize::try_from(i32::from_be_bytes(size))
            .map_err(|_| self.protocol_error("negative response size".into()))?;
        let mut response = vec![0u8; size];
        self.stream.read_exact(&mut response).map_err(io)?;
        let mut response = Bytes::from(response);
        let header = ResponseHeader::decode(&mut response, key.response_header_version(version))
            .map_err(|e| self.protocol_error(format!("decoding {key:?} header: {e}")))?;
        if header.correlation_id != self.correlation_id {
            return Err(self.protocol_error(format!(
                "correlation id {} answers request {}",
                header.correlation_id, self.correlation_id
            )));
        }
        Resp::decode(&mut response, version)
            .map_err(|e| self.protocol_error(format!("decoding {key:?} response: {e}")))
    }
}

/// Reads partitions' raw logs from a Kafka cluster.
pub struct LogReader {
    bootstrap: Vec<String>,
    timeout: Duration,
    connections: HashMap<String, BrokerConnection>,
}

impl LogReader {
    /// A reader for the cluster at `bootstrap_servers` (comma-separated `host:port`).
    pub fn new(bootstrap_servers: &str, timeout: Duration) -> Self {
        Self {
            bootstrap: bootstrap_servers
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            timeout,
            connections: HashMap::new(),
        }
    }

    fn connection(&mut self, address: &str) -> Result<&mut BrokerConnection, KafkaError> {
        if !self.connections.contains_key(address) {
            let connection = BrokerConnection::connect(address, self.timeout)?;
            self.connections.insert(address.to_string(), connection);
        }
        self.connections
            .get_mut(address)
            .ok_or_else(|| KafkaError::Protocol {
                broker: address.to_string(),
                message: "connection vanished".into(),
            })
    }

    /// The address of the leader of `topic`/`partition`.
    fn leader(&mut self, topic: &str, partition: i32) -> Result<String, KafkaError> {
        let mut last_error = None;
        for bootstrap in self.bootstrap.clone() {
            let connection = match self.connection(&bootstrap) {
                Ok(c) => c,
                Err(e) => {
                    self.connections.remove(&bootstrap);
                    last_error = Some(e);
                    continue;
                }
            };
            let version = connection.version(ApiKey::Metadata, METADATA_VERSION, 1)?;
            let request =
                MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_string(topic.to_string()))))]));
            let response: MetadataResponse =
                match connection.send(ApiKey::Metadata, version, &request) {
                    Ok(r) => r,
                    Err(e) => {
                        self.connections.remove(&bootstrap);
                        last_error = Some(e);
                        continue;
                    }
                };
            let brokers: HashMap<BrokerId, String> = response
                .brokers
                .iter()
                .map(|b| (b.node_id, format!("{}:{}", b.host, b.port)))
                .collect();
            let Some(t) = response
                .topics
                .iter()
                .find(|t| t.name.as_ref().is_some_and(|n| &*n.0 == topic))
            else {
                return Err(KafkaError::UnknownPartition {
                    topic: topic.to_string(),
                    partition,
                });
            };
            let p = t
                .partitions
                .iter()
                .find(|p| p.partition_index == partition)
                .ok_or_else(|| KafkaError::UnknownPartition {
                    topic: topic.to_string(),
                    partition,
                })?;
            return brokers
                .get(&p.leader_id)
                .cloned()
                .ok_or_else(|| KafkaError::Protocol {
                    broker: bootstrap.clone(),
                    message: format!("{topic}-{partition} has no known leader"),
                });
        }
        Err(last_error.unwrap_or_else(|| KafkaError::Config("no bootstrap servers".into())))
    }

    /// One fetch of `topic`/`partition` at `offset`, read-uncommitted (every batch and
    /// marker) unless `read_committed`.
    fn fetch_once(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: i32,
        read_committed: bool,
    ) -> Result<Fetched, KafkaError> {
        let leader = self.leader(topic, partition)?;
        let connection = self.connection(&leader)?;
        let version = connection.version(ApiKey::Fetch, FETCH_VERSION, MIN_FETCH_VERSION)?;
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(100)
            .with_min_bytes(1)
            .with_max_bytes(max_bytes.max(1 << 20))
            .with_isolation_level(i8::from(read_committed))
            .with_session_epoch(0)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(offset)
                    .with_current_leader_epoch(-1)
                    .with_last_fetched_epoch(-1)
                    .with_log_start_offset(-1)
                    .with_partition_max_bytes(max_bytes)])]);
        let response: FetchResponse = match connection.send(ApiKey::Fetch, version, &request) {
            Ok(r) => r,
            Err(e) => {
                self.connections.remove(&leader);
                return Err(e);
            }
        };
        let data = response
            .responses
            .into_iter()
            .flat_map(|t| t.partitions.into_iter())
            .find(|p| p.partition_index == partition)
            .ok_or_else(|| KafkaError::Protocol {
                broker: leader.clone(),
                message: format!("fetch response lacks {topic}-{partition}"),
            })?;
        // OFFSET_OUT_OF_RANGE
        if data.error_code == 1 {
            return Err(KafkaError::OffsetOutOfRange {
                topic: topic.to_string(),
                partition,
                offset,
            });
        }
        if data.error_code != 0 {
            return Err(KafkaError::Protocol {
                broker: leader,
                message: format!(
                    "fetch of {topic}-{partition} at offset {offset} failed with error code {}",
                    data.error_code
                ),
            });
        }
        Ok(Fetched {
            high_watermark: data.high_watermark,
            last_stable_offset: data.last_stable_offset,
            records: data.records,
        })
    }

    /// Visits the batches of `topic`/`partition` from the one holding `from_offset` up to
    /// the high watermark, one fetch at a time, until `visit` returns false.
    fn scan(
        &mut self,
        topic: &str,
        partition: i32,
        from_offset: i64,
        mut visit: impl FnMut(&RawBatch) -> Result<bool, String>,
    ) -> Result<(), KafkaError> {
        let mut offset = from_offset;
        let protocol = |message: String| KafkaError::Protocol {
            broker: format!("{topic}-{partition}"),
            message,
        };
        loop {
            let Fetched {
                high_watermark,
                records,
                ..
            } = self.fetch_once(topic, partition, offset, 8 << 20, false)?;
            let mut batches = Vec::new();
            if let Some(records) = records {
                split_batches(records, &mut batches)
                    .map_err(|message| protocol(format!("at offset {offset}: {message}")))?;
            }
            let Some(last) = batches.last().map(|b| b.last_offset) else {
                return Ok(());
            };
            // Batches wholly before `from_offset` can come back when it points into a batch.
            for batch in batches.iter().filter(|b| b.last_offset >= from_offset) {
                if !visit(batch).map_err(protocol)? {
                    return Ok(());
                }
            }
            offset = offset.max(last + 1);
            if offset >= high_watermark {
                return Ok(());
            }
        }
    }

    /// The last stable offset of `topic`/`partition` (the end of what `read_committed`
    /// consumers can read) as a read-committed fetch response at `from_offset` (any offset in
    /// the log, e.g. its start) reports it.
    pub fn last_stable_offset(
        &mut self,
        topic: &str,
        partition: i32,
        from_offset: i64,
    ) -> Result<i64, KafkaError> {
        let fetched = self.fetch_once(topic, partition, from_offset, 1, true)?;
        Ok(if fetched.last_stable_offset >= 0 {
            fetched.last_stable_offset
        } else {
            fetched.high_watermark
        })
    }

    /// The records of `topic`/`partition` that are committed — non-transactional records and
    /// those of committed transactions — in log order, as a `read_committed` consumer of
    /// Apache Kafka sees them. Records of open transactions are left out.
    pub fn committed_records(
        &mut self,
        topic: &str,
        partition: i32,
    ) -> Result<Vec<LogRecord>, KafkaError> {
        let mut batches = Vec::new();
        self.scan(topic, partition, 0, |batch| {
            batches.push(batch.clone());
            Ok(true)
        })?;
        fold_committed(batches).map_err(|message| KafkaError::Protocol {
            broker: format!("{topic}-{partition}"),
            message,
        })
    }

    /// How the transaction that wrote the record at `offset` of `topic`/`partition` ended:
    /// by the first control marker of the same producer id after it — a producer id has at
    /// most one transaction open, and its marker is written before anything it sends next —
    /// or, where a broker writes no marker when a newer producer fences the old one, by data
    /// of a newer epoch of the same producer id, which means it never committed. A COMMIT
    /// of a later transaction of the same id never counts for this one: two processes
    /// sharing a transactional id share its producer id. No marker yet:
    /// [`TransactionOutcome::Open`]; the record gone from the log:
    /// [`TransactionOutcome::Unknown`].
    pub fn transaction_outcome(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<TransactionOutcome, KafkaError> {
        let mut tracker = OutcomeTracker::new(offset);
        match self.scan(topic, partition, offset, |batch| tracker.visit(batch)) {
            Ok(()) => Ok(tracker.outcome),
            Err(KafkaError::OffsetOutOfRange { .. }) => Ok(TransactionOutcome::Unknown),
            Err(e) => Err(e),
        }
    }

    /// Whether records carrying header [`RESEND_HEADER`] = `marker` were committed after
    /// `offset` of `topic`/`partition`: an earlier recovery sent an aborted transaction
    /// again, and the re-send committed, so it must not be sent a third time.
    pub fn resend_committed(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        marker: &str,
    ) -> Result<bool, KafkaError> {
        let mut tracker = ResendTracker::new(marker);
        match self.scan(topic, partition, offset + 1, |batch| tracker.visit(batch)) {
            Ok(()) | Err(KafkaError::OffsetOutOfRange { .. }) => Ok(tracker.committed),
            Err(e) => Err(e),
        }
    }

    /// Like [`LogReader::transaction_outcome`], but waits up to `patience` for an open
    /// transaction's marker (markers are written asynchronously after a commit or abort).
    pub fn await_transaction_outcome(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        patience: Duration,
    ) -> Result<TransactionOutcome, KafkaError> {
        let deadline = Instant::now() + patience;
        loop {
            let outcome = self.transaction_outcome(topic, partition, offset)?;
            if outcome != TransactionOutcome::Open || Instant::now() >= deadline {
                return Ok(outcome);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Header on the records the exactly-once sink sends again after the broker aborted their
/// transaction: `topic/partition/offset` of the original transaction's probe record, so that a
/// later recovery can tell that the re-send happened and committed.
pub const RESEND_HEADER: &str = "weir-resend-of";

/// Follows a partition's batches from the one holding `offset` until the transaction that
/// wrote `offset` ends (see [`LogReader::transaction_outcome`]).
struct OutcomeTracker {
    offset: i64,
    /// Producer id, epoch, and last offset seen of the transaction.
    ours: Option<(i64, i16, i64)>,
    outcome: TransactionOutcome,
}

impl OutcomeTracker {
    fn new(offset: i64) -> Self {
        Self {
            offset,
            ours: None,
            outcome: TransactionOutcome::Unknown,
        }
    }

    /// Takes the next batch; `false` once the outcome is decided.
    fn visit(&mut self, batch: &RawBatch) -> Result<bool, String> {
        let Some((producer_id, epoch, after)) = self.ours else {
            if batch.info.control || batch.info.min_offset > self.offset {
                // The record is gone (compacted away).
                self.outcome = TransactionOutcome::Unknown;
                return Ok(false);
            }
            if !batch.info.transactional {
                self.outcome = TransactionOutcome::Committed;
                return Ok(false);
            }
            self.ours = Some((
                batch.info.producer_id,
                batch.info.producer_epoch,
                batch.last_offset,
            ));
            self.outcome = TransactionOutcome::Open;
            return Ok(true);
        };
        if batch.info.producer_id != producer_id || batch.info.min_offset <= after {
            return Ok(true);
        }
        if batch.info.control {
            self.outcome = control_outcome(batch)?;
            return Ok(false);
        }
        if batch.info.producer_epoch > epoch {
            // A newer epoch of the producer writes: ours ended without committing.
            self.outcome = TransactionOutcome::Aborted;
            return Ok(false);
        }
        Ok(true)
    }
}

/// Looks for a committed re-send carrying [`RESEND_HEADER`] = `marker`.
struct ResendTracker<'a> {
    marker: &'a str,
    /// Re-send transactions seen, by producer id: their epoch.
    candidates: HashMap<i64, i16>,
    committed: bool,
}

impl<'a> ResendTracker<'a> {
    fn new(marker: &'a str) -> Self {
        Self {
            marker,
            candidates: HashMap::new(),
            committed: false,
        }
    }

    fn visit(&mut self, batch: &RawBatch) -> Result<bool, String> {
        let producer_id = batch.info.producer_id;
        if batch.info.control {
            if self.candidates.remove(&producer_id).is_some()
                && control_outcome(batch)? == TransactionOutcome::Committed
            {
                self.committed = true;
                return Ok(false);
            }
            return Ok(true);
        }
        if self
            .candidates
            .get(&producer_id)
            .is_some_and(|epoch| *epoch < batch.info.producer_epoch)
        {
            self.candidates.remove(&producer_id);
        }
        if batch.info.transactional && !self.candidates.contains_key(&producer_id) {
            let carries = decode_records(batch)?.iter().any(|r| {
                r.headers.iter().any(|(k, v)| {
                    k == RESEND_HEADER && v.as_deref() == Some(self.marker.as_bytes())
                })
            });
            if carries {
                self.candidates
                    .insert(producer_id, batch.info.producer_epoch);
            }
        }
        Ok(true)
    }
}

/// The committed records of a partition's batches: non-transactional records, and those of
/// transactions whose producer's next control marker is COMMIT; records of aborted or still
/// open transactions are left out.
fn fold_committed(batches: Vec<RawBatch>) -> Result<Vec<LogRecord>, String> {
    let mut committed = Vec::new();
    // Transactional records wait here, per producer, for their marker.
    let mut open: HashMap<i64, Vec<LogRecord>> = HashMap::new();
    for batch in batches {
        if batch.info.control {
            let outcome = control_outcome(&batch)?;
            let pending = open.remove(&batch.info.producer_id).unwrap_or_default();
            if outcome == TransactionOutcome::Committed {
                committed.extend(pending);
            }
            continue;
        }
        let records = decode_records(&batch)?;
        if batch.info.transactional {
            open.entry(batch.info.producer_id)
                .or_default()
                .extend(records);
        } else {
            committed.extend(records);
        }
    }
    committed.sort_by_key(|r| r.offset);
    Ok(committed)
}

/// Splits a fetch response's record bytes into batches (a trailing partial batch, which
/// brokers may send when a size limit cuts it, is dropped).
fn split_batches(mut records: Bytes, out: &mut Vec<RawBatch>) -> Result<(), String> {
    const HEADER: usize = 12;
    while records.len() >= HEADER {
        let length = i32::from_be_bytes([records[8], records[9], records[10], records[11]]);
        let length = usize::try_from(length).map_err(|_| "negative batch length".to_string())?;
        if records.len() < HEADER + length {
            break;
        }
        let mut bytes = records.split_to(HEADER + length);
        let whole = bytes.clone();
        let infos = RecordBatchDecoder::decode_batch_info(&mut bytes)
            .map_err(|e| format!("bad record batch: {e}"))?;
        let Some(info) = infos.into_iter().next() else {
            return Err("record batch of an unsupported (pre-0.11) format".into());
        };
        let last_offset_delta = if whole.len() >= 27 {
            i32::from_be_bytes([whole[23], whole[24], whole[25], whole[26]])
        } else {
            0
        };
        out.push(RawBatch {
            last_offset: info.min_offset + i64::from(last_offset_delta),
            info,
            bytes: whole,
        });
    }
    Ok(())
}

fn decode_records(batch: &RawBatch) -> Result<Vec<LogRecord>, String> {
    let mut bytes = batch.bytes.clone();
    let set = RecordBatchDecoder::decode(&mut bytes).map_err(|e| {
        format!(
            "cannot decode batch at offset {} ({:?} compression): {e}",
            batch.info.min_offset, batch.info.compression
        )
    })?;
    Ok(set
        .records
        .into_iter()
        .map(|r| LogRecord {
            offset: r.offset,
            key: r.key,
            value: r.value,
            timestamp: r.timestamp,
            producer_id: r.producer_id,
            headers: r
                .headers
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        })
        .collect())
}

/// A control batch's marker: the record key is (version: i16, type: i16), type 0 = ABORT,
/// 1 = COMMIT.
fn control_outcome(batch: &RawBatch) -> Result<TransactionOutcome, String> {
    let records = decode_records(batch)?;
    let key = records
        .first()
        .and_then(|r| r.key.clone())
        .ok_or_else(|| format!("control batch at {} has no key", batch.info.min_offset))?;
    let mut key = key;
    if key.len() < 4 {
        return Err(format!(
            "control batch at {} has a short key",
            batch.info.min_offset
        ));
    }
    let _version = key.get_i16();
    match key.get_i16() {
        0 => Ok(TransactionOutcome::Aborted),
        1 => Ok(TransactionOutcome::Committed),
        other => Err(format!(
            "control batch at {} has unknown type {other}",
            batch.info.min_offset
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use indexmap::IndexMap;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    /// One encoded batch at `offset`: data records with `values`, or a control marker.
    fn batch(offset: i64, producer_id: i64, transactional: bool, content: Content) -> Vec<u8> {
        batch_of(offset, producer_id, 0, transactional, content, None)
    }

    /// A batch of producer `producer_id` at epoch `epoch`, its records with `header`.
    fn batch_of(
        offset: i64,
        producer_id: i64,
        epoch: i16,
        transactional: bool,
        content: Content,
        header: Option<(&str, &str)>,
    ) -> Vec<u8> {
        let headers: IndexMap<StrBytes, Option<Bytes>> = header
            .map(|(k, v)| {
                (
                    StrBytes::from_string(k.to_string()),
                    Some(Bytes::from(v.to_string())),
                )
            })
            .into_iter()
            .collect();
        type KeyValue = (Option<Bytes>, Option<Bytes>);
        let (control, entries): (bool, Vec<KeyValue>) = match content {
            Content::Data(values) => (
                false,
                values
                    .iter()
                    .map(|v| (None, Some(Bytes::from(v.to_string()))))
                    .collect(),
            ),
            Content::Marker(commit) => {
                let mut key = BytesMut::new();
                key.extend_from_slice(&0i16.to_be_bytes());
                key.extend_from_slice(&i16::from(commit).to_be_bytes());
                (true, vec![(Some(key.freeze()), Some(Bytes::new()))])
            }
        };
        let records: Vec<Record> = entries
            .into_iter()
            .enumerate()
            .map(|(i, (key, value))| Record {
                transactional,
                control,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id,
                producer_epoch: epoch,
                timestamp_type: TimestampType::Creation,
                offset: offset + i as i64,
                sequence: i as i32,
                timestamp: 0,
                key,
                value,
                headers: if control {
                    IndexMap::new()
                } else {
                    headers.clone()
                },
            })
            .collect();
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            records.iter(),
            &RecordEncodeOptions {
                version: 2,
                compression: Compression::None,
            },
        )
        .unwrap();
        buf.to_vec()
    }

    enum Content {
        Data(Vec<&'static str>),
        Marker(bool),
    }

    fn log(parts: Vec<Vec<u8>>) -> Vec<RawBatch> {
        let bytes: Vec<u8> = parts.into_iter().flatten().collect();
        let mut batches = Vec::new();
        split_batches(Bytes::from(bytes), &mut batches).unwrap();
        batches
    }

    fn values(records: &[LogRecord]) -> Vec<String> {
        records
            .iter()
            .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
            .collect()
    }

    #[test]
    fn aborted_and_open_transactions_are_left_out_in_log_order() {
        let batches = log(vec![
            batch(0, 7, true, Content::Data(vec!["a1", "a2"])),
            batch(2, -1, false, Content::Data(vec!["plain"])),
            batch(3, 8, true, Content::Data(vec!["b1"])),
            batch(4, 7, true, Content::Marker(false)),
            batch(5, 8, true, Content::Marker(true)),
            batch(6, 7, true, Content::Data(vec!["c1"])),
            batch(7, 7, true, Content::Marker(true)),
            batch(8, 9, true, Content::Data(vec!["open"])),
        ]);
        assert_eq!(batches.len(), 8);
        assert_eq!(batches[0].last_offset, 1);
        let committed = fold_committed(batches).unwrap();
        assert_eq!(values(&committed), vec!["plain", "b1", "c1"]);
        assert_eq!(
            committed.iter().map(|r| r.offset).collect::<Vec<_>>(),
            vec![2, 3, 6]
        );
    }

    fn outcome_of(batches: &[RawBatch], offset: i64) -> TransactionOutcome {
        let mut tracker = OutcomeTracker::new(offset);
        for batch in batches.iter().filter(|b| b.last_offset >= offset) {
            if !tracker.visit(batch).unwrap() {
                break;
            }
        }
        tracker.outcome
    }

    fn resend_committed_in(batches: &[RawBatch], after: i64, marker: &str) -> bool {
        let mut tracker = ResendTracker::new(marker);
        for batch in batches.iter().filter(|b| b.info.min_offset > after) {
            if !tracker.visit(batch).unwrap() {
                break;
            }
        }
        tracker.committed
    }

    fn data(offset: i64, producer: i64, epoch: i16, value: &'static str) -> Vec<u8> {
        batch_of(
            offset,
            producer,
            epoch,
            true,
            Content::Data(vec![value]),
            None,
        )
    }

    fn marker(offset: i64, producer: i64, epoch: i16, commit: bool) -> Vec<u8> {
        batch_of(offset, producer, epoch, true, Content::Marker(commit), None)
    }

    #[test]
    fn the_first_marker_of_the_producer_decides_and_a_later_commit_never_counts() {
        use TransactionOutcome::*;
        // Committed, with another producer's batches in between.
        let committed = log(vec![
            data(0, 7, 0, "a"),
            data(1, 8, 0, "x"),
            marker(2, 8, 0, false),
            marker(3, 7, 0, true),
        ]);
        assert_eq!(outcome_of(&committed, 0), Committed);
        assert_eq!(outcome_of(&committed, 1), Aborted);
        // Fenced by a second process sharing the transactional id: its later commit of other
        // data must not count for the aborted transaction.
        let fenced = log(vec![
            data(0, 7, 0, "zombie"),
            marker(1, 7, 1, false),
            data(2, 7, 1, "replacement"),
            marker(3, 7, 1, true),
        ]);
        assert_eq!(outcome_of(&fenced, 0), Aborted);
        assert_eq!(outcome_of(&fenced, 2), Committed);
        // A broker that writes no marker when it fences: the newer epoch's data tells.
        let unmarked = log(vec![
            data(0, 7, 0, "zombie"),
            data(1, 7, 1, "replacement"),
            marker(2, 7, 1, true),
        ]);
        assert_eq!(outcome_of(&unmarked, 0), Aborted);
        // Several batches of one transaction, then no marker yet.
        let open = log(vec![data(0, 7, 0, "a"), data(1, 7, 0, "b")]);
        assert_eq!(outcome_of(&open, 0), Open);
        assert_eq!(outcome_of(&log(vec![marker(5, 7, 0, true)]), 3), Unknown);
    }

    #[test]
    fn a_committed_resend_is_found_by_its_header_and_an_aborted_one_is_not() {
        let resent = |offset, epoch, commit| {
            vec![
                batch_of(
                    offset,
                    7,
                    epoch,
                    true,
                    Content::Data(vec!["a"]),
                    Some((RESEND_HEADER, "t/0/0")),
                ),
                marker(offset + 1, 7, epoch, commit),
            ]
        };
        let mut parts = vec![data(0, 7, 0, "a"), marker(1, 7, 1, false)];
        parts.extend(resent(2, 1, false));
        let aborted_once = log(parts.clone());
        assert!(!resend_committed_in(&aborted_once, 0, "t/0/0"));
        parts.extend(resent(4, 2, true));
        let committed_second_time = log(parts);
        assert!(resend_committed_in(&committed_second_time, 0, "t/0/0"));
        assert!(!resend_committed_in(&committed_second_time, 0, "t/0/9"));
        // Another producer's commit does not confirm a re-send it did not write.
        let other = log(vec![
            data(0, 7, 0, "a"),
            marker(1, 7, 1, false),
            batch_of(
                2,
                7,
                1,
                true,
                Content::Data(vec!["a"]),
                Some((RESEND_HEADER, "t/0/0")),
            ),
            marker(3, 9, 0, true),
        ]);
        assert!(!resend_committed_in(&other, 0, "t/0/0"));
    }

    #[test]
    fn a_partial_trailing_batch_is_dropped_and_garbage_is_an_error() {
        let mut bytes = batch(0, -1, false, Content::Data(vec!["x"]));
        let whole = bytes.len();
        bytes.extend_from_slice(&batch(1, -1, false, Content::Data(vec!["y"]))[..10]);
        let mut batches = Vec::new();
        split_batches(Bytes::from(bytes), &mut batches).unwrap();
        assert_eq!(batches.len(), 1);
        assert_eq!(batches[0].bytes.len(), whole);
        let mut corrupt = batch(0, -1, false, Content::Data(vec!["x"]));
        let last = corrupt.len() - 1;
        corrupt[last] ^= 0xff;
        let mut batches = Vec::new();
        let error = split_batches(Bytes::from(corrupt), &mut batches).unwrap_err();
        assert!(error.contains("Cyclic redundancy check"), "{error}");
    }
}
