//! How a connection to Kafka is secured, read from the librdkafka (and Kafka client)
//! properties users already write: `security.protocol`, `ssl.ca.location`,
//! `ssl.endpoint.identification.algorithm`, `ssl.certificate.location` and
//! `ssl.key.location` (a client certificate, for brokers that require mutual TLS),
//! `sasl.mechanism(s)`, `sasl.username`, `sasl.password`.
//!
//! librdkafka applies these itself for the source and the sinks; this module checks them
//! up front (a typo fails the job at build time, naming the property, instead of as a
//! connection that never comes up) and gives the raw-protocol log reader the same TLS
//! settings, so that the exactly-once sink recovers its transactions over the same kind of
//! connection as it writes them.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};
use weir_cluster::chain_only_verifier::ChainOnlyVerifier;

use crate::error::KafkaError;

mod client_certificate;

pub use client_certificate::ClientCertificate;
pub(crate) use client_certificate::{
    client_certificate_refusal, io_client_certificate_refusal, received_tls_error,
};

/// `security.protocol`: whether the connection is encrypted and whether it authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    /// Neither (the default).
    Plaintext,
    /// TLS.
    Ssl,
    /// SASL over a plaintext connection.
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    /// Whether the connection is encrypted.
    pub fn uses_tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }

    /// Whether the client authenticates with SASL.
    pub fn uses_sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
}

/// `sasl.mechanism`: how the client proves who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    /// User name and password in the clear (only sensible over TLS).
    Plain,
    /// Salted challenge-response with SHA-256 (RFC 7677).
    ScramSha256,
    /// Salted challenge-response with SHA-512.
    ScramSha512,
    /// Kerberos (librdkafka needs a Kerberos setup of its own).
    Gssapi,
    /// OAuth 2 bearer tokens.
    OAuthBearer,
}

/// The checked security settings of a connection. Its `Debug` form shows no secret.
#[derive(Clone)]
pub struct ConnectionSecurity {
    /// `security.protocol`.
    pub protocol: SecurityProtocol,
    /// `ssl.ca.location`: the PEM file of the CAs that sign the brokers' certificates; none:
    /// the system's trust store.
    pub ca_location: Option<PathBuf>,
    /// Whether the broker's certificate must name the host connected to
    /// (`ssl.endpoint.identification.algorithm` = `https`, the default, or `none`).
    pub verify_hostname: bool,
    /// `ssl.certificate.location` and `ssl.key.location`: the PEM files of the client's
    /// certificate (chain) and its private key, presented to brokers that authenticate
    /// clients by certificate (Kafka's `ssl.client.auth=required`).
    pub client_certificate: Option<ClientCertificate>,
    /// `sasl.mechanism`, when the protocol uses SASL.
    pub sasl_mechanism: Option<SaslMechanism>,
    /// `sasl.username`.
    pub sasl_username: Option<String>,
    sasl_password: Option<String>,
    /// The TLS settings given that the raw-protocol log reader cannot apply (client
    /// certificates, in-line PEM, verification turned off), if any: the exactly-once sink,
    /// which recovers through that reader, refuses them.
    pub log_reader_unsupported: Vec<String>,
}

impl std::fmt::Debug for ConnectionSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionSecurity")
            .field("protocol", &self.protocol)
            .field("ca_location", &self.ca_location)
            .field("verify_hostname", &self.verify_hostname)
            .field("client_certificate", &self.client_certificate)
            .field("sasl_mechanism", &self.sasl_mechanism)
            .field("sasl_username", &self.sasl_username)
            .field(
                "sasl_password",
                &self.sasl_password.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// Whether a property's value is a secret: never printed, logged or put in an error. The
/// names librdkafka marks sensitive, and any other that looks like one.
pub fn is_secret_property(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    key.contains("password")
        || key.contains("passphrase")
        || key.contains("secret")
        || key.contains("private.key")
        || key.contains("jaas")
        || key == "sasl.oauthbearer.config"
        || key == "ssl.key.pem"
        || key == "ssl_key"
        || key.ends_with("token")
}

/// A copy of `properties` with every secret value replaced, for printing.
pub fn redacted(properties: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    properties
        .iter()
        .map(|(k, v)| {
            let v = if is_secret_property(k) {
                "<redacted>".to_string()
            } else {
                v.clone()
            };
            (k.clone(), v)
        })
        .collect()
}

fn config_error(message: String) -> KafkaError {
    KafkaError::Config(message)
}

impl ConnectionSecurity {
    /// Plaintext, no authentication.
    pub fn plaintext() -> Self {
        Self {
            protocol: SecurityProtocol::Plaintext,
            ca_location: None,
            verify_hostname: true,
            client_certificate: None,
            sasl_mechanism: None,
            sasl_username: None,
            sasl_password: None,
            log_reader_unsupported: Vec::new(),
        }
    }

    /// Reads and checks the security properties among a connection's `properties`.
    pub fn from_properties(properties: &BTreeMap<String, String>) -> Result<Self, KafkaError> {
        let get = |key: &str| properties.get(key).map(|v| v.trim().to_string());
        let protocol = match get("security.protocol")
            .map(|p| p.to_ascii_lowercase())
            .as_deref()
        {
            None | Some("plaintext") => SecurityProtocol::Plaintext,
            Some("ssl") => SecurityProtocol::Ssl,
            Some("sasl_plaintext") => SecurityProtocol::SaslPlaintext,
            Some("sasl_ssl") => SecurityProtocol::SaslSsl,
            Some(other) => {
                return Err(config_error(format!(
                    "`security.protocol` = `{other}` is not one of plaintext, ssl, sasl_plaintext, sasl_ssl"
                )))
            }
        };
        // `probe` (librdkafka: look for the system's CA files) is the system store here.
        let ca_location = get("ssl.ca.location")
            .filter(|l| l != "probe")
            .map(PathBuf::from);
        if let Some(path) = &ca_location {
            if protocol.uses_tls() && !path.exists() {
                return Err(config_error(format!(
                    "`ssl.ca.location` = {}: no such file or directory",
                    path.display()
                )));
            }
        }
        let ignored: Vec<&String> = properties
            .keys()
            .filter(|k| {
                (!protocol.uses_tls() && k.starts_with("ssl."))
                    || (!protocol.uses_sasl() && k.starts_with("sasl."))
            })
            .collect();
        if !ignored.is_empty() {
            // librdkafka ignores them too; a warning, since they usually mean a forgotten
            // `security.protocol`.
            tracing::warn!(
                ?ignored,
                protocol = ?protocol,
                "Kafka TLS or SASL properties are set but `security.protocol` does not use them"
            );
        }
        let verify_hostname = match get("ssl.endpoint.identification.algorithm")
            .map(|v| v.to_ascii_lowercase())
            .as_deref()
        {
            None | Some("https") => true,
            Some("none") => false,
            Some(other) => {
                return Err(config_error(format!(
                    "`ssl.endpoint.identification.algorithm` = `{other}` is not https or none"
                )))
            }
        };
        let client_certificate = if protocol.uses_tls() {
            ClientCertificate::from_properties(
                get("ssl.certificate.location"),
                get("ssl.key.location"),
            )?
        } else {
            None
        };
        let mechanism = get("sasl.mechanism").or_else(|| get("sasl.mechanisms"));
        let sasl_username = get("sasl.username");
        let sasl_password = properties.get("sasl.password").cloned();
        let sasl_mechanism = if protocol.uses_sasl() {
            let Some(name) = mechanism.as_deref() else {
                return Err(config_error(
                    "`security.protocol` uses SASL but `sasl.mechanism` is not set (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)"
                        .into(),
                ));
            };
            let mechanism = match name {
                "PLAIN" => SaslMechanism::Plain,
                "SCRAM-SHA-256" => SaslMechanism::ScramSha256,
                "SCRAM-SHA-512" => SaslMechanism::ScramSha512,
                "GSSAPI" => SaslMechanism::Gssapi,
                "OAUTHBEARER" => SaslMechanism::OAuthBearer,
                _ => {
                    let hint = match name.to_ascii_uppercase().as_str() {
                        upper @ ("PLAIN" | "SCRAM-SHA-256" | "SCRAM-SHA-512" | "GSSAPI"
                        | "OAUTHBEARER") => {
                            format!(": mechanism names are case-sensitive, write `{upper}`")
                        }
                        _ => ": use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, GSSAPI or OAUTHBEARER"
                            .to_string(),
                    };
                    return Err(config_error(format!(
                        "`sasl.mechanism` = `{name}` is not supported{hint}"
                    )));
                }
            };
            if matches!(
                mechanism,
                SaslMechanism::Plain | SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512
            ) {
                if sasl_username.as_deref().is_none_or(str::is_empty) {
                    return Err(config_error(format!(
                        "`sasl.mechanism` {name} needs `sasl.username`"
                    )));
                }
                if sasl_password.is_none() {
                    return Err(config_error(format!(
                        "`sasl.mechanism` {name} needs `sasl.password`"
                    )));
                }
            }
            Some(mechanism)
        } else {
            None
        };
        let mut log_reader_unsupported: Vec<String> = [
            "ssl.ca.pem",
            "ssl.certificate.pem",
            "ssl.key.pem",
            // An encrypted private key: the log reader's TLS reads unencrypted PEM keys only.
            "ssl.key.password",
            "ssl.keystore.location",
            "ssl.ca.certificate.stores",
            "ssl.engine.location",
        ]
        .iter()
        .filter(|k| protocol.uses_tls() && properties.contains_key(**k))
        .map(|k| format!("`{k}`"))
        .collect();
        if protocol.uses_tls()
            && get("enable.ssl.certificate.verification").is_some_and(|v| v == "false")
        {
            log_reader_unsupported.push("`enable.ssl.certificate.verification=false`".into());
        }
        Ok(Self {
            protocol,
            ca_location,
            verify_hostname,
            client_certificate,
            sasl_mechanism,
            sasl_username,
            sasl_password,
            log_reader_unsupported,
        })
    }

    /// The SASL password, for the handshake only.
    pub fn sasl_password(&self) -> Option<&str> {
        self.sasl_password.as_deref()
    }

    /// The TLS client configuration for the log reader, when the protocol uses TLS: the CAs
    /// of `ssl.ca.location` (or the system's), host-name checks unless turned off, and the
    /// client certificate of `ssl.certificate.location`, if any.
    pub fn tls_config(&self) -> Result<Option<Arc<ClientConfig>>, KafkaError> {
        if !self.protocol.uses_tls() {
            return Ok(None);
        }
        let mut roots = RootCertStore::empty();
        match &self.ca_location {
            Some(location) => {
                // A directory (as OpenSSL's CApath) holds one PEM file per CA.
                let files: Vec<PathBuf> = if location.is_dir() {
                    let entries = std::fs::read_dir(location).map_err(|e| {
                        config_error(format!("`ssl.ca.location` = {}: {e}", location.display()))
                    })?;
                    let mut files: Vec<PathBuf> = entries
                        .flatten()
                        .map(|e| e.path())
                        .filter(|p| p.is_file())
                        .collect();
                    files.sort();
                    files
                } else {
                    vec![location.clone()]
                };
                let mut found = 0;
                for path in &files {
                    let file = File::open(path).map_err(|e| {
                        config_error(format!("`ssl.ca.location` = {}: {e}", path.display()))
                    })?;
                    for cert in rustls_pemfile::certs(&mut BufReader::new(file)) {
                        let cert = cert.map_err(|e| {
                            config_error(format!(
                                "`ssl.ca.location` = {}: not PEM certificates: {e}",
                                path.display()
                            ))
                        })?;
                        roots.add(cert).map_err(|e| {
                            config_error(format!(
                                "`ssl.ca.location` = {}: a certificate is unusable: {e}",
                                path.display()
                            ))
                        })?;
                        found += 1;
                    }
                }
                if found == 0 {
                    return Err(config_error(format!(
                        "`ssl.ca.location` = {}: holds no PEM certificate",
                        location.display()
                    )));
                }
            }
            None => {
                let system = rustls_native_certs::load_native_certs();
                for cert in system.certs {
                    // A system certificate rustls cannot parse is skipped, as librdkafka does.
                    let _ = roots.add(cert);
                }
                if roots.is_empty() {
                    return Err(config_error(
                        "TLS to Kafka without `ssl.ca.location`, and the system trust store holds no certificate: set `ssl.ca.location` to the brokers' CA file".into(),
                    ));
                }
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| config_error(format!("TLS setup: {e}")))?;
        let client_auth =
            |builder: rustls::ConfigBuilder<ClientConfig, rustls::client::WantsClientCert>| {
                match &self.client_certificate {
                    None => Ok(builder.with_no_client_auth()),
                    Some(certificate) => {
                        let (chain, key) = certificate.load()?;
                        builder.with_client_auth_cert(chain, key).map_err(|e| {
                            config_error(format!(
                                "`ssl.certificate.location` = {} and `ssl.key.location` = {}: {e}",
                                certificate.certificate.display(),
                                certificate.key.display()
                            ))
                        })
                    }
                }
            };
        let config = if self.verify_hostname {
            client_auth(builder.with_root_certificates(roots))?
        } else {
            // The chain must lead to a trusted CA; the name may be another host's
            // (librdkafka's behaviour).
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| config_error(format!("TLS setup: {e}")))?;
            let verifier = ChainOnlyVerifier(webpki);
            client_auth(
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(verifier)),
            )?
        };
        Ok(Some(Arc::new(config)))
    }
}

/// Why a TLS handshake with the first of `bootstrap_servers` that answers fails, or `None`
/// when the connection uses no TLS, no server answers, or the handshake succeeds.
pub(crate) fn tls_diagnosis(
    security: &ConnectionSecurity,
    bootstrap_servers: &str,
    timeout: std::time::Duration,
) -> Option<String> {
    use std::net::{TcpStream, ToSocketAddrs};
    let config = match security.tls_config() {
        Ok(Some(config)) => config,
        Ok(None) => return None,
        Err(e) => return Some(e.to_string()),
    };
    for server in bootstrap_servers.split(',').map(str::trim) {
        let host = server.rsplit_once(':').map_or(server, |(h, _)| h);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let Some(addr) = server.to_socket_addrs().ok().and_then(|mut a| a.next()) else {
            continue;
        };
        let Ok(mut socket) = TcpStream::connect_timeout(&addr, timeout) else {
            continue;
        };
        let _ = socket.set_read_timeout(Some(timeout));
        let _ = socket.set_write_timeout(Some(timeout));
        let Ok(name) = server_name(host) else {
            continue;
        };
        let Ok(mut session) = rustls::ClientConnection::new(config.clone(), name) else {
            continue;
        };
        while session.is_handshaking() {
            if let Err(e) = session.complete_io(&mut socket) {
                if let Some(refusal) = io_client_certificate_refusal(&e, security) {
                    return Some(format!("TLS handshake with {server} failed: {refusal}"));
                }
                return Some(format!(
                    "TLS handshake with {server} failed: {e}; check that `ssl.ca.location` holds the CA that signed the broker's certificate and that the certificate names `{host}`"
                ));
            }
        }
        // A broker that refuses the client's certificate says so right after the handshake
        // (TLS 1.3): send the client's last handshake message, and wait briefly for that
        // alert. Silence means the certificate was accepted.
        while session.wants_write() {
            if session.write_tls(&mut socket).is_err() {
                return None;
            }
        }
        let _ = socket.set_read_timeout(Some(timeout.min(std::time::Duration::from_secs(2))));
        return received_tls_error(&mut session, &mut socket)
            .and_then(|e| client_certificate_refusal(&e, security.client_certificate.is_some()))
            .map(|refusal| format!("TLS connection to {server}: {refusal}"));
    }
    None
}

/// The TLS name to check a broker's certificate against: its host, as an IP address or a
/// DNS name.
pub(crate) fn server_name(host: &str) -> Result<ServerName<'static>, KafkaError> {
    ServerName::try_from(host.to_string()).map_err(|e| {
        config_error(format!(
            "broker host `{host}` is not a TLS server name: {e}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn plaintext_by_default_and_protocols_parsed_case_insensitively() {
        let s = ConnectionSecurity::from_properties(&props(&[])).unwrap();
        assert_eq!(s.protocol, SecurityProtocol::Plaintext);
        assert!(s.tls_config().unwrap().is_none());
        let s =
            ConnectionSecurity::from_properties(&props(&[("security.protocol", "SSL")])).unwrap();
        assert_eq!(s.protocol, SecurityProtocol::Ssl);
    }

    #[test]
    fn wrong_values_are_named() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[("security.protocol", "tls")],
                "`security.protocol` = `tls`",
            ),
            (
                &[
                    ("security.protocol", "ssl"),
                    ("ssl.ca.location", "/nonexistent/ca.pem"),
                ],
                "/nonexistent/ca.pem: no such file",
            ),
            (
                &[("security.protocol", "sasl_ssl")],
                "`sasl.mechanism` is not set",
            ),
            (
                &[
                    ("security.protocol", "sasl_ssl"),
                    ("sasl.mechanism", "DIGEST-MD5"),
                ],
                "`DIGEST-MD5` is not supported",
            ),
            (
                &[
                    ("security.protocol", "sasl_ssl"),
                    ("sasl.mechanism", "scram-sha-256"),
                ],
                "case-sensitive, write `SCRAM-SHA-256`",
            ),
            (
                &[
                    ("security.protocol", "sasl_ssl"),
                    ("sasl.mechanism", "SCRAM-SHA-512"),
                    ("sasl.password", "hunter2"),
                ],
                "needs `sasl.username`",
            ),
            (
                &[
                    ("security.protocol", "ssl"),
                    ("ssl.endpoint.identification.algorithm", "dns"),
                ],
                "is not https or none",
            ),
        ];
        for (properties, expected) in cases {
            let error = ConnectionSecurity::from_properties(&props(properties))
                .unwrap_err()
                .to_string();
            assert!(error.contains(expected), "{error} lacks {expected}");
            assert!(!error.contains("hunter2"), "{error} shows the password");
        }
    }

    #[test]
    fn sasl_settings_are_read_and_the_password_never_printed() {
        let s = ConnectionSecurity::from_properties(&props(&[
            ("security.protocol", "sasl_ssl"),
            ("sasl.mechanisms", "SCRAM-SHA-256"),
            ("sasl.username", "alice"),
            ("sasl.password", "hunter2"),
        ]))
        .unwrap();
        assert_eq!(s.sasl_mechanism, Some(SaslMechanism::ScramSha256));
        assert_eq!(s.sasl_password(), Some("hunter2"));
        let shown = format!("{s:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains("alice"),
            "{shown}"
        );
    }

    #[test]
    fn secrets_are_redacted_from_property_maps() {
        let shown = redacted(&props(&[
            ("sasl.password", "hunter2"),
            ("ssl.key.password", "k3y"),
            ("sasl.oauthbearer.client.secret", "s3"),
            ("sasl.username", "alice"),
        ]));
        let text = format!("{shown:?}");
        for secret in ["hunter2", "k3y", "s3\""] {
            assert!(!text.contains(secret), "{text}");
        }
        assert!(text.contains("alice"));
    }

    #[test]
    fn settings_librdkafka_accepts_are_accepted() {
        for properties in [
            &[("ssl.ca.location", "/etc/hostname")][..],
            &[("sasl.username", "alice"), ("sasl.password", "hunter2")],
            &[("security.protocol", "ssl"), ("ssl.ca.location", "probe")],
            &[("security.protocol", "ssl"), ("ssl.ca.location", "/etc")],
            &[
                ("security.protocol", "sasl_ssl"),
                ("sasl.mechanism", "OAUTHBEARER"),
            ],
        ] {
            ConnectionSecurity::from_properties(&props(properties))
                .unwrap_or_else(|e| panic!("{properties:?}: {e}"));
        }
        let s = ConnectionSecurity::from_properties(&props(&[
            ("security.protocol", "ssl"),
            ("ssl.certificate.location", "/etc/hostname"),
            ("ssl.key.location", "/etc/hostname"),
            ("ssl.key.password", "k3y"),
            ("enable.ssl.certificate.verification", "false"),
        ]))
        .unwrap();
        // The client certificate is the reader's too; an encrypted key is not.
        assert_eq!(
            s.log_reader_unsupported,
            vec![
                "`ssl.key.password`".to_string(),
                "`enable.ssl.certificate.verification=false`".to_string()
            ]
        );
        assert!(s.client_certificate.is_some());
    }

    #[test]
    fn a_client_certificate_needs_its_key_and_existing_files() {
        let cases: [(&[(&str, &str)], &str); 3] = [
            (
                &[("ssl.certificate.location", "/etc/hostname")],
                "`ssl.certificate.location` is set without `ssl.key.location`",
            ),
            (
                &[("ssl.key.location", "/etc/hostname")],
                "`ssl.key.location` is set without `ssl.certificate.location`",
            ),
            (
                &[
                    ("ssl.certificate.location", "/etc/hostname"),
                    ("ssl.key.location", "/nonexistent/client.key"),
                ],
                "`ssl.key.location` = /nonexistent/client.key: no such file",
            ),
        ];
        for (properties, says) in cases {
            let mut all = vec![("security.protocol", "ssl")];
            all.extend_from_slice(properties);
            let error = ConnectionSecurity::from_properties(&props(&all))
                .err()
                .unwrap_or_else(|| panic!("{properties:?} accepted"))
                .to_string();
            assert!(error.contains(says), "{error}");
        }
        // Without TLS they are not used (librdkafka ignores them too).
        let plaintext =
            ConnectionSecurity::from_properties(&props(&[("ssl.key.location", "/etc/hostname")]))
                .unwrap();
        assert!(plaintext.client_certificate.is_none());
    }

    #[test]
    fn a_client_key_file_without_a_key_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("client.key");
        std::fs::write(&key, "not a key\n").unwrap();
        let ca = dir.path().join("ca.pem");
        let key_pair = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        std::fs::write(&ca, params.self_signed(&key_pair).unwrap().pem()).unwrap();
        let s = ConnectionSecurity::from_properties(&props(&[
            ("security.protocol", "ssl"),
            ("ssl.ca.location", ca.to_str().unwrap()),
            ("ssl.certificate.location", ca.to_str().unwrap()),
            ("ssl.key.location", key.to_str().unwrap()),
        ]))
        .unwrap();
        let error = s.tls_config().unwrap_err().to_string();
        assert!(error.contains("`ssl.key.location`"), "{error}");
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate\n").unwrap();
        let s = ConnectionSecurity::from_properties(&props(&[
            ("security.protocol", "ssl"),
            ("ssl.ca.location", path.to_str().unwrap()),
        ]))
        .unwrap();
        let error = s.tls_config().unwrap_err().to_string();
        assert!(error.contains("holds no PEM certificate"), "{error}");
    }
}
