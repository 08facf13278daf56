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
//!
//! It connects as the job's clients do: plaintext or TLS (rustls), and with SASL PLAIN or
//! SCRAM when `security.protocol` says `sasl_*` (see `sasl`), because managed Kafka services
//! require both and the exactly-once sink cannot recover without this reader.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, BrokerId, FetchRequest, FetchResponse,
    MetadataRequest, MetadataResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{encode_request_header_into_buffer, Decodable, Encodable, StrBytes};

use crate::client_config::KafkaConnection;
use crate::error::KafkaError;
use crate::security::{server_name, ConnectionSecurity};

mod batches;
mod compression;
#[doc(hidden)]
pub mod fuzzing;
mod response_guard;
mod sasl;

pub use batches::RESEND_HEADER;
use batches::{fold_committed, split_batches, OutcomeTracker, RawBatch, ResendTracker};
use sasl::SaslLogin;

/// The largest response the reader takes (fetches ask for a few MiB; a broker may return one
/// batch larger than asked, up to its `message.max.bytes`): beyond it a length field is a
/// protocol error, never an allocation.
const MAX_RESPONSE_BYTES: usize = 256 << 20;
/// What is allocated for a response before its bytes arrive.
const INITIAL_RESPONSE_CAPACITY: usize = 1 << 20;

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

/// What one fetch brought.
struct Fetched {
    high_watermark: i64,
    last_stable_offset: i64,
    records: Option<Bytes>,
}

/// A connection's byte stream: TCP, or TLS over TCP.
trait ByteStream: Read + Write + Send {
    /// The TLS error the peer sent before the connection failed (its alert), if any: a
    /// write that failed on a closed connection hides the alert waiting to be read.
    fn received_tls_error(&mut self) -> Option<rustls::Error> {
        None
    }
}

impl ByteStream for TcpStream {}

impl ByteStream for rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    fn received_tls_error(&mut self) -> Option<rustls::Error> {
        crate::security::received_tls_error(&mut self.conn, &mut self.sock)
    }
}

/// A blocking connection to one broker.
struct BrokerConnection {
    stream: Box<dyn ByteStream>,
    address: String,
    correlation_id: i32,
    versions: HashMap<i16, (i16, i16)>,
    /// When this connection's SASL session should be renewed, if the broker limits its
    /// lifetime (KIP-368's `session_lifetime_ms`): the reader then opens a new connection,
    /// which authenticates afresh, rather than have the broker close this one mid-request.
    session_renewal: Option<Instant>,
}

impl BrokerConnection {
    fn connect(
        address: &str,
        timeout: Duration,
        tls: Option<&Arc<rustls::ClientConfig>>,
        sasl: Option<&SaslLogin>,
    ) -> Result<Self, KafkaError> {
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
        let stream: Box<dyn ByteStream> = match tls {
            None => Box::new(stream),
            Some(config) => {
                let host = address
                    .rsplit_once(':')
                    .map_or(address, |(host, _)| host)
                    .trim_start_matches('[')
                    .trim_end_matches(']');
                let session = rustls::ClientConnection::new(config.clone(), server_name(host)?)
                    .map_err(|e| KafkaError::Protocol {
                        broker: address.to_string(),
                        message: format!("TLS setup: {e}"),
                    })?;
                let mut stream = rustls::StreamOwned::new(session, stream);
                // Complete the handshake here, so that a certificate the CA does not sign
                // is reported as that rather than as a failed first request.
                let presented = config.client_auth_cert_resolver.has_certs();
                while stream.conn.is_handshaking() {
                    stream
                        .conn
                        .complete_io(&mut stream.sock)
                        .map_err(|e| tls_error(address, e, presented))?;
                }
                Box::new(stream)
            }
        };
        let mut connection = Self {
            stream,
            address: address.to_string(),
            correlation_id: 0,
            versions: HashMap::new(),
            session_renewal: None,
        };
        let first = connection.send(ApiKey::ApiVersions, 0, &ApiVersionsRequest::default());
        let response: ApiVersionsResponse = match (first, tls) {
            (Ok(response), _) => response,
            // In TLS 1.3 a broker refuses the client's certificate after the handshake: its
            // alert is the answer to the first request, or waits behind the failed write of
            // it when the broker closed the connection first.
            (Err(KafkaError::BrokerIo { source, .. }), Some(config)) => {
                let presented = config.client_auth_cert_resolver.has_certs();
                let alert = match client_certificate_alert(&source) {
                    Some(_) => None,
                    None if closed(&source) => connection.stream.received_tls_error(),
                    None => None,
                };
                match alert {
                    Some(alert) => {
                        return Err(tls_error(address, std::io::Error::other(alert), presented))
                    }
                    None => return Err(tls_error_or_io(address, source, presented)),
                }
            }
            (Err(e), _) => return Err(e),
        };
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
        if let Some(login) = sasl {
            connection.authenticate(login)?;
        }
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
        // A read timeout surfaces as EAGAIN ("resource temporarily unavailable"): say what
        // it means.
        let io = |source: std::io::Error| KafkaError::BrokerIo {
            broker: self.address.clone(),
            source: match source.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                    std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no answer to a {key:?} request within the request timeout"),
                    )
                }
                _ => source,
            },
        };
        let length = i32::try_from(body.len())
            .map_err(|_| self.protocol_error("request too large".into()))?;
        self.stream.write_all(&length.to_be_bytes()).map_err(io)?;
        self.stream.write_all(&body).map_err(io)?;
        self.stream.flush().map_err(io)?;
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).map_err(io)?;
        let size = usize::try_from(i32::from_be_bytes(size))
            .map_err(|_| self.protocol_error("negative response size".into()))?;
        if size > MAX_RESPONSE_BYTES {
            return Err(self.protocol_error(format!(
                "a {key:?} response of {size} bytes is larger than the reader accepts \
                 ({MAX_RESPONSE_BYTES} bytes)"
            )));
        }
        // Memory follows the bytes that arrive, not the length the peer claims.
        let mut response = Vec::with_capacity(size.min(INITIAL_RESPONSE_CAPACITY));
        (&mut self.stream)
            .take(size as u64)
            .read_to_end(&mut response)
            .map_err(io)?;
        if response.len() != size {
            return Err(self.protocol_error(format!(
                "the connection ended {} bytes into a {key:?} response of {size}",
                response.len()
            )));
        }
        let mut response = Bytes::from(response);
        let header = ResponseHeader::decode(&mut response, key.response_header_version(version))
            .map_err(|e| self.protocol_error(format!("decoding {key:?} header: {e}")))?;
        if header.correlation_id != self.correlation_id {
            return Err(self.protocol_error(format!(
                "correlation id {} answers request {}",
                header.correlation_id, self.correlation_id
            )));
        }
        decode_response(key, version, response).map_err(|e| self.protocol_error(e))
    }
}

/// Whether an I/O error says the peer closed the connection.
fn closed(error: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(
        error.kind(),
        ErrorKind::BrokenPipe | ErrorKind::ConnectionReset | ErrorKind::UnexpectedEof
    )
}

/// A failed first request over TLS: the client certificate's refusal when that is what it
/// says, the I/O error otherwise.
fn tls_error_or_io(address: &str, error: std::io::Error, presented: bool) -> KafkaError {
    match client_certificate_alert(&error) {
        Some(_) => tls_error(address, error, presented),
        None => KafkaError::BrokerIo {
            broker: address.to_string(),
            source: error,
        },
    }
}

/// The TLS error an I/O error carries, when it is the broker refusing a client certificate.
fn client_certificate_alert(error: &std::io::Error) -> Option<&rustls::Error> {
    let tls = error.get_ref()?.downcast_ref::<rustls::Error>()?;
    crate::security::client_certificate_refusal(tls, false).map(|_| tls)
}

/// A failed TLS handshake as an error that says what to check; `presented`: whether the
/// client offered a certificate of its own.
fn tls_error(address: &str, error: std::io::Error, presented: bool) -> KafkaError {
    if let Some(refusal) = client_certificate_alert(&error)
        .and_then(|tls| crate::security::client_certificate_refusal(tls, presented))
    {
        return KafkaError::Protocol {
            broker: address.to_string(),
            message: format!("TLS handshake failed: {refusal}"),
        };
    }
    let certificate = error
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
        .is_some_and(|e| matches!(e, rustls::Error::InvalidCertificate(_)));
    let hint = if certificate {
        "; check that `ssl.ca.location` holds the CA that signed the broker's certificate, and that the certificate names this host"
    } else {
        "; check that this listener speaks TLS (`security.protocol`)"
    };
    KafkaError::Protocol {
        broker: address.to_string(),
        message: format!("TLS handshake failed: {error}{hint}"),
    }
}

/// Decodes the body of a response to `key` at `version`, its array lengths checked first
/// against the bytes received (see [`response_guard`]).
fn decode_response<Resp: Decodable>(
    key: ApiKey,
    version: i16,
    mut body: Bytes,
) -> Result<Resp, String> {
    response_guard::check(key, version, &body)
        .map_err(|e| format!("malformed {key:?} response: {e}"))?;
    Resp::decode(&mut body, version).map_err(|e| format!("decoding {key:?} response: {e}"))
}

/// Reads partitions' raw logs from a Kafka cluster.
pub struct LogReader {
    bootstrap: Vec<String>,
    timeout: Duration,
    tls: Option<Arc<rustls::ClientConfig>>,
    sasl: Option<SaslLogin>,
    connections: HashMap<String, BrokerConnection>,
}

impl LogReader {
    /// A reader for the cluster at `bootstrap_servers` (comma-separated `host:port`), over
    /// plaintext connections.
    pub fn new(bootstrap_servers: &str, timeout: Duration) -> Self {
        Self {
            bootstrap: bootstrap_servers
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            timeout,
            tls: None,
            sasl: None,
            connections: HashMap::new(),
        }
    }

    /// A reader for the cluster of `connection`, over connections secured as its properties
    /// say: TLS with `security.protocol` = `ssl` or `sasl_ssl`, and SASL (PLAIN,
    /// SCRAM-SHA-256 or SCRAM-SHA-512, `sasl.username`, `sasl.password`) with `sasl_*`.
    pub fn for_connection(
        connection: &KafkaConnection,
        timeout: Duration,
    ) -> Result<Self, KafkaError> {
        let security = ConnectionSecurity::from_properties(&connection.properties)?;
        let mut reader = Self::new(&connection.bootstrap_servers, timeout);
        reader.tls = security.tls_config()?;
        reader.sasl = SaslLogin::from_security(&security)?;
        Ok(reader)
    }

    /// Why the brokers refuse this reader's SASL login, if they do: the first bootstrap
    /// server that answers is asked. `None` without SASL, when none answers, or when the
    /// login succeeds. librdkafka reports a refused login only as "Authentication failure"
    /// or a timeout; the broker's own reason comes this way.
    pub(crate) fn authentication_failure(&self) -> Option<KafkaError> {
        let login = self.sasl.as_ref()?;
        for address in &self.bootstrap {
            match BrokerConnection::connect(address, self.timeout, self.tls.as_ref(), Some(login)) {
                Ok(_) => return None,
                Err(e @ KafkaError::Authentication { .. }) => return Some(e),
                Err(_) => continue,
            }
        }
        None
    }

    fn connection(&mut self, address: &str) -> Result<&mut BrokerConnection, KafkaError> {
        let renew = self.connections.get(address).is_some_and(|connection| {
            connection
                .session_renewal
                .is_some_and(|at| Instant::now() >= at)
        });
        if renew {
            tracing::debug!(broker = address, "SASL session ends soon: reconnecting");
            self.connections.remove(address);
        }
        if !self.connections.contains_key(address) {
            let connection = BrokerConnection::connect(
                address,
                self.timeout,
                self.tls.as_ref(),
                self.sasl.as_ref(),
            )?;
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
                .map(|b| {
                    // An IPv6 host goes in brackets, so that the port stays apart.
                    let address = if b.host.contains(':') {
                        format!("[{}]:{}", b.host, b.port)
                    } else {
                        format!("{}:{}", b.host, b.port)
                    };
                    (b.node_id, address)
                })
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A "broker" on 127.0.0.1 that reads one request and answers with `answer`.
    fn broker(answer: Vec<u8>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            if let Ok((mut stream, _)) = listener.accept() {
                let mut length = [0u8; 4];
                if stream.read_exact(&mut length).is_ok() {
                    let mut request = vec![0u8; i32::from_be_bytes(length).max(0) as usize];
                    let _ = stream.read_exact(&mut request);
                    let _ = stream.write_all(&answer);
                }
            }
        });
        address
    }

    #[test]
    fn a_response_length_beyond_the_limit_is_an_error_not_an_allocation() {
        let address = broker(i32::MAX.to_be_bytes().to_vec());
        let Err(err) = BrokerConnection::connect(&address, Duration::from_secs(5), None, None)
        else {
            panic!("connected");
        };
        let message = err.to_string();
        assert!(
            message.contains("larger than the reader accepts") && message.contains(&address),
            "{message}"
        );
    }

    #[test]
    fn a_response_cut_short_is_an_error_naming_the_broker() {
        let mut answer = 1000i32.to_be_bytes().to_vec();
        answer.extend_from_slice(&[0u8; 10]);
        let address = broker(answer);
        let Err(err) = BrokerConnection::connect(&address, Duration::from_secs(5), None, None)
        else {
            panic!("connected");
        };
        let message = err.to_string();
        assert!(
            message.contains("ended 10 bytes into") && message.contains(&address),
            "{message}"
        );
    }
}
