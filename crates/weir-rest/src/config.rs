//! Where and how the REST endpoint listens: its address and port, its optional bearer
//! token, and its optional TLS certificate.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use weir::configuration::{Configuration, ConfigurationError, Origin};

/// The REST endpoint's settings, named as Flink's keys where Flink has one.
///
/// ```
/// use weir_rest::RestConfig;
/// let config = RestConfig::default().with_port(8081).with_token("s3cret");
/// assert_eq!(config.bind_address.to_string(), "127.0.0.1"); // loopback unless told otherwise
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestConfig {
    /// The address the endpoint binds to (`rest.bind-address`; loopback by default, as an
    /// operating surface that can cancel jobs must not be reachable by accident).
    pub bind_address: IpAddr,
    /// The port (`rest.port`; 0: any free port, read it back from
    /// [`RestServer::address`](crate::RestServer::address)).
    pub port: u16,
    /// A bearer token every request must carry (`rest.authentication.token`); `None`: no
    /// authentication.
    pub token: Option<String>,
    /// A certificate to serve HTTPS with (`security.ssl.rest.enabled` with
    /// `security.ssl.rest.cert-file` and `security.ssl.rest.key-file`, PEM).
    pub tls: Option<TlsFiles>,
}

/// A PEM certificate chain and its private key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

impl Default for RestConfig {
    fn default() -> Self {
        Self {
            bind_address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 8081,
            token: None,
            tls: None,
        }
    }
}

impl RestConfig {
    /// The endpoint `configuration` asks for: with `rest.port` set, or when `on_by_default`
    /// (a cluster's JobManager serves it always, as Flink's does; the local mini-cluster
    /// only when asked). `None`: no endpoint.
    pub fn from_configuration(
        configuration: &Configuration,
        on_by_default: bool,
    ) -> Result<Option<Self>, ConfigurationError> {
        configuration.validate()?;
        let port = configuration.integer("rest.port")?;
        if port.is_none() && !on_by_default {
            return Ok(None);
        }
        let mut config = Self::default();
        if let Some(port) = port {
            config.port = u16::try_from(port).map_err(|_| ConfigurationError::InvalidValue {
                key: "rest.port".into(),
                value: port.to_string(),
                origin: configuration
                    .get("rest.port")
                    .map_or(Origin::Code, |v| v.origin.clone()),
                expected: "a port from 0 (any free one) to 65535".into(),
            })?;
        }
        if let Some(address) = configuration.text("rest.bind-address") {
            config.bind_address =
                address
                    .trim()
                    .parse()
                    .map_err(|_| ConfigurationError::InvalidValue {
                        key: "rest.bind-address".into(),
                        value: address.into(),
                        origin: configuration
                            .get("rest.bind-address")
                            .map_or(Origin::Code, |v| v.origin.clone()),
                        expected: "an IP address such as 127.0.0.1 or 0.0.0.0".into(),
                    })?;
        }
        if let Some(token) = configuration.text("rest.authentication.token") {
            config.token = Some(token.to_string());
        }
        let files = (
            configuration.text("security.ssl.rest.cert-file"),
            configuration.text("security.ssl.rest.key-file"),
        );
        match (configuration.boolean("security.ssl.rest.enabled")?, files) {
            (Some(true), (Some(cert), Some(key))) => {
                config.tls = Some(TlsFiles {
                    cert: cert.into(),
                    key: key.into(),
                })
            }
            (Some(true), _) => {
                return Err(ConfigurationError::Conflict(
                    "`security.ssl.rest.enabled: true` needs `security.ssl.rest.cert-file` and `security.ssl.rest.key-file` (PEM)".into(),
                ))
            }
            _ => {}
        }
        Ok(Some(config))
    }

    /// Sets the port (0: any free one).
    pub fn with_port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Sets the bind address.
    pub fn with_bind_address(mut self, address: IpAddr) -> Self {
        self.bind_address = address;
        self
    }

    /// Requires `Authorization: Bearer <token>` on every request.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Serves HTTPS with the PEM certificate chain `cert` and private key `key`.
    pub fn with_tls(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.tls = Some(TlsFiles {
            cert: cert.into(),
            key: key.into(),
        });
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configuration(yaml: &str) -> Configuration {
        Configuration::from_yaml_str(yaml, "weir.yaml").unwrap()
    }

    #[test]
    fn the_local_mini_cluster_serves_nothing_unless_a_port_is_set() {
        let unset = configuration("parallelism.default: 2\n");
        assert!(RestConfig::from_configuration(&unset, false)
            .unwrap()
            .is_none());
        // A cluster's JobManager serves it always, on Flink's port.
        let jobmanager = RestConfig::from_configuration(&unset, true)
            .unwrap()
            .unwrap();
        assert_eq!(jobmanager.port, 8081);
        assert_eq!(jobmanager.bind_address, IpAddr::V4(Ipv4Addr::LOCALHOST));
        let set = RestConfig::from_configuration(&configuration("rest.port: 9100\n"), false)
            .unwrap()
            .unwrap();
        assert_eq!(set.port, 9100);
        assert_eq!(set.bind_address, IpAddr::V4(Ipv4Addr::LOCALHOST));
    }

    #[test]
    fn a_port_out_of_range_or_a_bad_address_is_refused_naming_the_key() {
        let error = RestConfig::from_configuration(&configuration("rest.port: 70000\n"), false)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("weir.yaml:1: `rest.port: 70000` is invalid"),
            "{error}"
        );
        let error = RestConfig::from_configuration(
            &configuration("rest.bind-address: localhost:80\n"),
            true,
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("rest.bind-address"), "{error}");
    }
}
