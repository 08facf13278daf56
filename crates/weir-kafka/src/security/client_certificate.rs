//! The client's own certificate, for brokers that authenticate clients by certificate
//! (mutual TLS): the checked `ssl.certificate.location` and `ssl.key.location`, and how a
//! broker's refusal of it is told from other TLS failures.

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use super::{config_error, ConnectionSecurity};
use crate::error::KafkaError;

/// A client certificate for mutual TLS: the PEM files of `ssl.certificate.location` (the
/// certificate, then any intermediates) and `ssl.key.location` (its unencrypted private key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertificate {
    /// `ssl.certificate.location`.
    pub certificate: PathBuf,
    /// `ssl.key.location`.
    pub key: PathBuf,
}

impl ClientCertificate {
    /// The client certificate the two properties name, checked: both or neither, and files
    /// that exist.
    pub(super) fn from_properties(
        certificate: Option<String>,
        key: Option<String>,
    ) -> Result<Option<Self>, KafkaError> {
        let (certificate, key) = match (certificate, key) {
            (None, None) => return Ok(None),
            (Some(certificate), Some(key)) => (PathBuf::from(certificate), PathBuf::from(key)),
            (Some(_), None) => {
                return Err(config_error(
                    "`ssl.certificate.location` is set without `ssl.key.location`: a client certificate needs its private key".into(),
                ))
            }
            (None, Some(_)) => {
                return Err(config_error(
                    "`ssl.key.location` is set without `ssl.certificate.location`: a private key needs its certificate".into(),
                ))
            }
        };
        for (property, path) in [
            ("ssl.certificate.location", &certificate),
            ("ssl.key.location", &key),
        ] {
            if !path.is_file() {
                return Err(config_error(format!(
                    "`{property}` = {}: no such file",
                    path.display()
                )));
            }
        }
        Ok(Some(Self { certificate, key }))
    }

    /// The certificate chain and the private key, read from their PEM files.
    pub(super) fn load(
        &self,
    ) -> Result<
        (
            Vec<rustls::pki_types::CertificateDer<'static>>,
            rustls::pki_types::PrivateKeyDer<'static>,
        ),
        KafkaError,
    > {
        let open = |property: &str, path: &PathBuf| {
            File::open(path)
                .map(BufReader::new)
                .map_err(|e| config_error(format!("`{property}` = {}: {e}", path.display())))
        };
        let chain =
            rustls_pemfile::certs(&mut open("ssl.certificate.location", &self.certificate)?)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| {
                    config_error(format!(
                        "`ssl.certificate.location` = {}: not PEM certificates: {e}",
                        self.certificate.display()
                    ))
                })?;
        if chain.is_empty() {
            return Err(config_error(format!(
                "`ssl.certificate.location` = {}: holds no PEM certificate",
                self.certificate.display()
            )));
        }
        let key = rustls_pemfile::private_key(&mut open("ssl.key.location", &self.key)?)
            .map_err(|e| {
                config_error(format!(
                    "`ssl.key.location` = {}: not a PEM private key: {e}",
                    self.key.display()
                ))
            })?
            .ok_or_else(|| {
                config_error(format!(
                    "`ssl.key.location` = {}: holds no unencrypted PEM private key (PKCS #8, PKCS #1 or SEC1)",
                    self.key.display()
                ))
            })?;
        Ok((chain, key))
    }
}

/// Why the broker ended a TLS connection with `error`, when that says it refused the
/// client's certificate (or that it wants one): a hint that names the properties to check.
/// In TLS 1.3 the broker judges the client's certificate after the client's side of the
/// handshake is done, so this arrives as the answer to the first request.
pub(crate) fn client_certificate_refusal(error: &rustls::Error, presented: bool) -> Option<String> {
    use rustls::AlertDescription as Alert;
    let rustls::Error::AlertReceived(alert) = error else {
        return None;
    };
    if !matches!(
        alert,
        Alert::CertificateRequired
            | Alert::BadCertificate
            | Alert::UnknownCA
            | Alert::CertificateUnknown
            | Alert::CertificateRevoked
            | Alert::CertificateExpired
            | Alert::UnsupportedCertificate
            | Alert::AccessDenied
    ) {
        return None;
    }
    Some(if presented {
        format!(
            "the broker refused the client certificate ({error}): check that `ssl.certificate.location` holds a certificate signed by a CA the broker trusts, with `ssl.key.location` its key"
        )
    } else {
        format!(
            "the broker requires a client certificate ({error}): set `ssl.certificate.location` and `ssl.key.location`"
        )
    })
}

/// [`client_certificate_refusal`] of an I/O error that carries a TLS error.
pub(crate) fn io_client_certificate_refusal(
    error: &std::io::Error,
    security: &ConnectionSecurity,
) -> Option<String> {
    let tls = error.get_ref()?.downcast_ref::<rustls::Error>()?;
    client_certificate_refusal(tls, security.client_certificate.is_some())
}

/// The TLS error the peer sent on `session` (an alert), read until the connection ends or
/// its read timeout passes; session tickets and the like are read past. A write that
/// failed on a connection the broker closed hides the alert waiting to be read.
pub(crate) fn received_tls_error(
    session: &mut rustls::ClientConnection,
    socket: &mut std::net::TcpStream,
) -> Option<rustls::Error> {
    loop {
        match session.read_tls(socket) {
            Ok(0) | Err(_) => return None,
            Ok(_) => {
                if let Err(e) = session.process_new_packets() {
                    return Some(e);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_client_certificate_is_told_from_a_missing_one() {
        use rustls::AlertDescription as Alert;
        let required = rustls::Error::AlertReceived(Alert::CertificateRequired);
        let unknown = rustls::Error::AlertReceived(Alert::UnknownCA);
        let missing = client_certificate_refusal(&required, false).unwrap();
        assert!(
            missing.contains("requires a client certificate"),
            "{missing}"
        );
        let refused = client_certificate_refusal(&unknown, true).unwrap();
        assert!(
            refused.contains("refused the client certificate"),
            "{refused}"
        );
        // Other alerts are no verdict on the client's certificate.
        let other = rustls::Error::AlertReceived(Alert::ProtocolVersion);
        assert!(client_certificate_refusal(&other, true).is_none());
    }
}
