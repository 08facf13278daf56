//! Connection settings shared by the source and the sink, and the reachability check that
//! turns "nothing answers" into a clear error.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use serde::{Deserialize, Serialize};

use crate::error::KafkaError;
use crate::security::{redacted, ConnectionSecurity};

/// Where the cluster is and how to talk to it. Its `Debug` form shows no secret (passwords
/// among the properties are redacted); the serialized form keeps them, since a TaskManager
/// running the job needs them.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaConnection {
    /// `host:port,host:port` of some brokers.
    pub bootstrap_servers: String,
    /// Extra librdkafka properties, applied last (they override the connector's defaults).
    pub properties: BTreeMap<String, String>,
    /// How long a metadata or offset request may take before the broker counts as
    /// unreachable.
    pub request_timeout: Duration,
}

impl std::fmt::Debug for KafkaConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaConnection")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("properties", &redacted(&self.properties))
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

impl KafkaConnection {
    /// Settings for the cluster at `bootstrap_servers`.
    pub fn new(bootstrap_servers: impl Into<String>) -> Self {
        Self {
            bootstrap_servers: bootstrap_servers.into(),
            properties: BTreeMap::new(),
            request_timeout: Duration::from_secs(10),
        }
    }

    /// Checks the settings that can be checked without a broker.
    pub fn validate(&self) -> Result<(), KafkaError> {
        if self.bootstrap_servers.trim().is_empty() {
            return Err(KafkaError::Config("`bootstrap.servers` is empty".into()));
        }
        for server in self.bootstrap_servers.split(',') {
            let server = server.trim();
            let port = server.rsplit_once(':').map(|(_, p)| p.parse::<u16>());
            if !matches!(port, Some(Ok(_))) {
                return Err(KafkaError::Config(format!(
                    "bootstrap server `{server}` is not host:port"
                )));
            }
        }
        if self.request_timeout.is_zero() {
            return Err(KafkaError::Config(
                "request timeout must be positive".into(),
            ));
        }
        ConnectionSecurity::from_properties(&self.properties)?;
        Ok(())
    }

    /// A librdkafka configuration with the connection settings, `defaults` (which the user's
    /// properties override) and the user's properties.
    pub fn client_config(&self, defaults: &[(&str, &str)]) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.bootstrap_servers);
        config.set("log_level", "3");
        for (key, value) in defaults {
            config.set(*key, *value);
        }
        for (key, value) in &self.properties {
            config.set(key, value);
        }
        config
    }

    /// Fails with [`KafkaError::BrokerUnreachable`] unless a broker answers a metadata
    /// request for `topic` (or for all topics) within the request timeout.
    pub fn check_reachable(
        &self,
        consumer: &BaseConsumer,
        topic: Option<&str>,
    ) -> Result<rdkafka::metadata::Metadata, KafkaError> {
        consumer
            .fetch_metadata(topic, self.request_timeout)
            .map_err(|e| {
                self.unreachable(format!(
                    "no metadata within {:?}: {e}",
                    self.request_timeout
                ))
            })
    }

    /// [`KafkaError::BrokerUnreachable`] with `detail`, and — when the connection uses TLS —
    /// why a TLS handshake with the brokers fails, if it does: librdkafka reports only
    /// "SSL error" or a timeout, so the connector shakes hands itself (with the same CA
    /// settings) to name the cause, such as an untrusted certificate. When the connection
    /// uses SASL and the brokers refuse the login, that is the error instead
    /// ([`KafkaError::Authentication`], with the broker's reason).
    pub fn unreachable(&self, detail: String) -> KafkaError {
        let timeout = self.request_timeout.min(std::time::Duration::from_secs(5));
        let diagnosis = ConnectionSecurity::from_properties(&self.properties)
            .ok()
            .and_then(|security| {
                crate::security::tls_diagnosis(&security, &self.bootstrap_servers, timeout)
            });
        if diagnosis.is_none() {
            if let Some(refused) = crate::log_reader::LogReader::for_connection(self, timeout)
                .ok()
                .and_then(|reader| reader.authentication_failure())
            {
                tracing::debug!(%detail, "librdkafka's view of the refused SASL login");
                return refused;
            }
        }
        KafkaError::BrokerUnreachable {
            servers: self.bootstrap_servers.clone(),
            detail: match diagnosis {
                Some(tls) => format!("{detail}; {tls}"),
                None => detail,
            },
        }
    }
}
