//! Mutual TLS between the JobManager and its TaskManagers (Flink's
//! `security.ssl.internal.*`): each side presents a certificate signed by the cluster's CA
//! and accepts only peers whose certificate is, so that a process without one can neither
//! register as a TaskManager nor pose as the JobManager.

use std::path::Path;

use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};
use weir::configuration::{Configuration, ConfigurationError};

use crate::error::ClusterError;

/// The PEM files of one process of a cluster with internal TLS.
#[derive(Clone, PartialEq, Eq)]
pub struct InternalTls {
    cert: Vec<u8>,
    key: Vec<u8>,
    ca: Vec<u8>,
}

impl std::fmt::Debug for InternalTls {
    // The private key never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InternalTls").finish_non_exhaustive()
    }
}

fn read_pem(
    configuration: &Configuration,
    key: &'static str,
    marker: &str,
) -> Result<Vec<u8>, ClusterError> {
    let path = configuration.text(key).ok_or_else(|| {
        ClusterError::Configuration(ConfigurationError::Conflict(format!(
            "`security.ssl.internal.enabled: true` needs `{key}` (a PEM file)"
        )))
    })?;
    let invalid = |reason: String| ClusterError::InvalidSetting {
        setting: key,
        value: path.to_string(),
        reason,
    };
    let bytes = std::fs::read(Path::new(path.trim()))
        .map_err(|e| invalid(format!("cannot be read: {e}")))?;
    if !String::from_utf8_lossy(&bytes).contains(marker) {
        return Err(invalid(format!("holds no PEM `{marker}` block")));
    }
    Ok(bytes)
}

/// Makes `ring` the process's TLS provider unless one is installed: with more than one
/// compiled in (the object-storage clients bring another), rustls cannot pick by itself.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl InternalTls {
    /// The internal TLS `configuration` asks for (`None`: plaintext).
    pub fn from_configuration(configuration: &Configuration) -> Result<Option<Self>, ClusterError> {
        if configuration.boolean("security.ssl.internal.enabled")? != Some(true) {
            return Ok(None);
        }
        install_crypto_provider();
        let tls = Self {
            cert: read_pem(
                configuration,
                "security.ssl.internal.cert-file",
                "CERTIFICATE",
            )?,
            key: read_pem(
                configuration,
                "security.ssl.internal.key-file",
                "PRIVATE KEY",
            )?,
            ca: read_pem(
                configuration,
                "security.ssl.internal.trust-cert-file",
                "CERTIFICATE",
            )?,
        };
        // A certificate and key that do not go together are refused here, naming the keys,
        // rather than at the first connection.
        tonic::transport::Server::builder()
            .tls_config(tls.server())
            .map_err(|e| ClusterError::InvalidSetting {
                setting: "security.ssl.internal.cert-file / security.ssl.internal.key-file",
                value: configuration
                    .text("security.ssl.internal.cert-file")
                    .unwrap_or_default()
                    .to_string(),
                reason: crate::error::chain(&e),
            })?;
        Ok(Some(tls))
    }

    /// The JobManager's side: its certificate, and TaskManagers must present one signed by
    /// the CA.
    pub fn server(&self) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(Identity::from_pem(&self.cert, &self.key))
            .client_ca_root(Certificate::from_pem(&self.ca))
    }

    /// A TaskManager's side: the JobManager at `host` must present a certificate for that
    /// name signed by the CA, and this TaskManager presents its own.
    pub fn client(&self, host: &str) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca))
            .identity(Identity::from_pem(&self.cert, &self.key))
            .domain_name(host)
    }
}
