//! TLS to PostgreSQL, configured in the connection string as libpq users write it:
//! `sslmode` (`disable`, `allow`, `prefer`, `require`, `verify-ca`, `verify-full`),
//! `sslrootcert` (a PEM file of the CAs to trust, or `system`), and `sslcert` with `sslkey`
//! (a client certificate). tokio-postgres knows only `disable`, `prefer` and `require`, so
//! these settings are taken out of the string before it is parsed, and the verification they
//! ask for is done here with rustls:
//!
//! | `sslmode` | encrypted | server certificate checked |
//! |---|---|---|
//! | `disable` | never | — |
//! | `allow`, `prefer` (the default) | if the server offers it | chain, if a CA file is given or `~/.postgresql/root.crt` exists (as libpq) |
//! | `require` | always | the same |
//! | `verify-ca` | always | chain against `sslrootcert` |
//! | `verify-full` | always | chain against `sslrootcert`, and the host name |
//!
//! As in libpq 16, `sslrootcert=system` makes `verify-full` the default and refuses weaker
//! modes: the system's CAs vouch for names, so anything less would trust every certificate
//! any public CA ever issued.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;
use weir_cluster::chain_only_verifier::ChainOnlyVerifier;

use crate::error::PostgresError;

/// How much TLS a connection asks for (libpq's `sslmode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plaintext only.
    Disable,
    /// TLS if the server offers it, unverified (libpq tries plaintext first; both end the same
    /// way with a server that accepts either).
    Allow,
    /// TLS if the server offers it, unverified.
    Prefer,
    /// TLS always; the certificate checked only if `sslrootcert` is given.
    Require,
    /// TLS always, with a certificate chain to a trusted CA.
    VerifyCa,
    /// TLS always, with a certificate chain to a trusted CA, issued for the host.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<Self, PostgresError> {
        Ok(match value {
            "disable" => Self::Disable,
            "allow" => Self::Allow,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            other => {
                return Err(PostgresError::Config(format!(
                    "sslmode `{other}` is not one of disable, allow, prefer, require, \
                     verify-ca, verify-full"
                )))
            }
        })
    }

    /// The mode tokio-postgres is given: whether it asks the server for TLS, and whether it
    /// insists.
    fn driver_mode(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Allow | Self::Prefer => "prefer",
            Self::Require | Self::VerifyCa | Self::VerifyFull => "require",
        }
    }
}

/// Where the trusted CAs come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCert {
    /// A PEM file.
    File(PathBuf),
    /// The operating system's store (`sslrootcert=system`).
    System,
}

/// The TLS settings of a connection string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// `sslmode`.
    pub mode: SslMode,
    /// `sslrootcert`.
    pub root_cert: Option<RootCert>,
    /// `sslcert`: the client's certificate chain (PEM).
    pub client_cert: Option<PathBuf>,
    /// `sslkey`: the client's private key (PEM).
    pub client_key: Option<PathBuf>,
}

/// The TLS settings libpq knows and tokio-postgres does not parse.
const TLS_KEYS: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// Splits `connection` into the string tokio-postgres parses (with its own `sslmode`) and
/// the TLS settings.
pub fn split(connection: &str) -> Result<(String, TlsSettings), PostgresError> {
    let trimmed = connection.trim();
    let is_url = trimmed.starts_with("postgres://") || trimmed.starts_with("postgresql://");
    let (rest, pairs) = if is_url {
        split_url(trimmed)
    } else {
        split_key_values(trimmed)?
    };
    let value = |key: &str| {
        pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let root_cert = value("sslrootcert").map(|v| match v {
        "system" => RootCert::System,
        path => RootCert::File(PathBuf::from(path)),
    });
    let default_mode = if root_cert == Some(RootCert::System) {
        SslMode::VerifyFull
    } else {
        SslMode::Prefer
    };
    let mode = value("sslmode").map_or(Ok(default_mode), SslMode::parse)?;
    if root_cert == Some(RootCert::System) && mode != SslMode::VerifyFull {
        return Err(PostgresError::Config(
            "sslrootcert=system needs sslmode=verify-full (the default with it): the \
             system's CAs vouch for host names, so a weaker mode would accept any \
             certificate a public CA issued"
                .into(),
        ));
    }
    let settings = TlsSettings {
        mode,
        root_cert,
        client_cert: value("sslcert").map(PathBuf::from),
        client_key: value("sslkey").map(PathBuf::from),
    };
    if settings.client_cert.is_some() != settings.client_key.is_some() {
        return Err(PostgresError::Config(
            "sslcert and sslkey go together: give both or neither".into(),
        ));
    }
    let driver = with_driver_mode(&rest, mode.driver_mode(), is_url);
    Ok((driver, settings))
}

/// A URL without its TLS query parameters, and those parameters (decoded). The query starts
/// at the first `?` after the credentials, which end at the first `@`, as tokio-postgres
/// reads the URL (a password may hold an unencoded `?`).
fn split_url(url: &str) -> (String, Vec<(String, String)>) {
    let Some(query_start) = query_start(url) else {
        return (url.to_string(), Vec::new());
    };
    let (base, query) = (&url[..query_start], &url[query_start + 1..]);
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8_lossy()
            .into_owned()
    };
    let mut kept = Vec::new();
    let mut taken = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = decode(key);
        if TLS_KEYS.contains(&key.as_str()) {
            taken.push((key, decode(value)));
        } else {
            kept.push(pair);
        }
    }
    let rest = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (rest, taken)
}

/// Where the query of `url` starts (its `?`), if it has one.
fn query_start(url: &str) -> Option<usize> {
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    let credentials_end = url[scheme_end..]
        .find('@')
        .map_or(scheme_end, |i| scheme_end + i + 1);
    url[credentials_end..]
        .find('?')
        .map(|i| credentials_end + i)
}

/// A `key=value …` string without its TLS settings, and those settings. Values may be
/// single-quoted, and a backslash escapes the next character, as libpq reads them.
fn split_key_values(text: &str) -> Result<(String, Vec<(String, String)>), PostgresError> {
    let bytes: Vec<char> = text.chars().collect();
    let mut i = 0;
    let mut kept: Vec<String> = Vec::new();
    let mut taken = Vec::new();
    let skip_space = |i: &mut usize| {
        while *i < bytes.len() && bytes[*i].is_whitespace() {
            *i += 1;
        }
    };
    loop {
        skip_space(&mut i);
        if i >= bytes.len() {
            break;
        }
        let start = i;
        while i < bytes.len() && bytes[i] != '=' && !bytes[i].is_whitespace() {
            i += 1;
        }
        let key: String = bytes[start..i].iter().collect();
        skip_space(&mut i);
        if i >= bytes.len() || bytes[i] != '=' {
            // Named by position, not by the word: an unquoted password with a space in it
            // would put its second half here.
            return Err(PostgresError::Config(format!(
                "invalid PostgreSQL connection string: the word at character {} has no \
                 `=value` (quote a value that holds spaces: key='a value')",
                start + 1
            )));
        }
        i += 1;
        skip_space(&mut i);
        let mut value = String::new();
        if i < bytes.len() && bytes[i] == '\'' {
            i += 1;
            loop {
                match bytes.get(i) {
                    None => {
                        return Err(PostgresError::Config(format!(
                            "invalid PostgreSQL connection string: the quoted value of \
                             `{key}` is not closed"
                        )))
                    }
                    Some('\'') => {
                        i += 1;
                        break;
                    }
                    Some('\\') if i + 1 < bytes.len() => {
                        value.push(bytes[i + 1]);
                        i += 2;
                    }
                    Some(&c) => {
                        value.push(c);
                        i += 1;
                    }
                }
            }
        } else {
            while i < bytes.len() && !bytes[i].is_whitespace() {
                if bytes[i] == '\\' && i + 1 < bytes.len() {
                    i += 1;
                }
                value.push(bytes[i]);
                i += 1;
            }
        }
        if TLS_KEYS.contains(&key.as_str()) {
            taken.push((key, value));
        } else {
            kept.push(bytes[start..i].iter().collect());
        }
    }
    Ok((kept.join(" "), taken))
}

fn with_driver_mode(rest: &str, mode: &str, url: bool) -> String {
    if url {
        let separator = if query_start(rest).is_some() {
            '&'
        } else {
            '?'
        };
        format!("{rest}{separator}sslmode={mode}")
    } else if rest.is_empty() {
        format!("sslmode={mode}")
    } else {
        format!("{rest} sslmode={mode}")
    }
}

impl TlsSettings {
    /// The TLS connector these settings make (`None`: plaintext only). Reads the PEM files
    /// now, so that a wrong path fails when the sink is built, naming the setting.
    pub fn connector(&self) -> Result<Option<MakeRustlsConnect>, PostgresError> {
        if self.mode == SslMode::Disable {
            return Ok(None);
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier: Arc<dyn ServerCertVerifier> = match self.checked_roots()? {
            None => Arc::new(EncryptOnly(provider.clone())),
            Some(roots) => {
                let webpki =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|e| tls_config("sslrootcert", format!("unusable: {e}")))?;
                if self.mode == SslMode::VerifyFull {
                    webpki
                } else {
                    Arc::new(ChainOnlyVerifier(webpki))
                }
            }
        };
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_config("sslmode", e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => {
                let chain = read_certificates("sslcert", cert)?;
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                    tls_config(
                        "sslkey",
                        format!("`{}`: no private key: {e}", key.display()),
                    )
                })?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| tls_config("sslcert", format!("unusable with sslkey: {e}")))?
            }
            _ => builder.with_no_client_auth(),
        };
        Ok(Some(MakeRustlsConnect::new(config)))
    }

    /// The CAs a server's certificate must chain to (`None`: it is not checked).
    fn checked_roots(&self) -> Result<Option<RootCertStore>, PostgresError> {
        let verify = matches!(self.mode, SslMode::VerifyCa | SslMode::VerifyFull);
        let root = match (&self.root_cert, verify) {
            (Some(root), _) => root.clone(),
            // libpq checks the chain in every mode when its default CA file exists.
            (None, false) => match default_root_cert() {
                Some(path) => RootCert::File(path),
                None => return Ok(None),
            },
            (None, true) => match default_root_cert() {
                Some(path) => RootCert::File(path),
                None => {
                    return Err(tls_config(
                        "sslrootcert",
                        format!(
                            "sslmode={} checks the server's certificate, so it needs the CAs \
                             to trust: set sslrootcert to a PEM file, or to `system`",
                            if self.mode == SslMode::VerifyFull {
                                "verify-full"
                            } else {
                                "verify-ca"
                            }
                        ),
                    ))
                }
            },
        };
        let mut store = RootCertStore::empty();
        match root {
            RootCert::File(path) => {
                let (added, _) =
                    store.add_parsable_certificates(read_certificates("sslrootcert", &path)?);
                if added == 0 {
                    return Err(tls_config(
                        "sslrootcert",
                        format!("`{}` holds no usable CA certificate", path.display()),
                    ));
                }
            }
            RootCert::System => {
                let found = rustls_native_certs::load_native_certs();
                let (added, _) = store.add_parsable_certificates(found.certs);
                if added == 0 {
                    return Err(tls_config(
                        "sslrootcert",
                        format!(
                            "`system`: the operating system's store has no CA certificate \
                             ({} errors)",
                            found.errors.len()
                        ),
                    ));
                }
            }
        }
        Ok(Some(store))
    }
}

/// libpq's default CA file, `~/.postgresql/root.crt`, if it exists.
fn default_root_cert() -> Option<PathBuf> {
    let path = Path::new(&std::env::var_os("HOME")?).join(".postgresql/root.crt");
    path.is_file().then_some(path)
}

fn tls_config(setting: &str, reason: String) -> PostgresError {
    PostgresError::Config(format!("TLS setting {setting}: {reason}"))
}

fn read_certificates(
    setting: &str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, PostgresError> {
    let certificates = CertificateDer::pem_file_iter(path)
        .and_then(|found| found.collect::<Result<Vec<_>, _>>())
        .map_err(|e| tls_config(setting, format!("`{}` cannot be read: {e}", path.display())))?;
    if certificates.is_empty() {
        return Err(tls_config(
            setting,
            format!("`{}` holds no PEM certificate", path.display()),
        ));
    }
    Ok(certificates)
}

/// `prefer` and `require` without `sslrootcert`: encrypted against eavesdroppers, the
/// certificate taken as it comes (libpq's behaviour). The handshake's signatures are still
/// checked, so the session is bound to the certificate presented.
#[derive(Debug)]
struct EncryptOnly(Arc<CryptoProvider>);

impl ServerCertVerifier for EncryptOnly {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpq_tls_settings_leave_a_url_and_the_driver_gets_its_mode() {
        let (rest, tls) = split(
            "postgresql://u:pw@db:5433/app?application_name=x&sslmode=verify-full&\
             sslrootcert=%2Fetc%2Fca.pem&connect_timeout=3",
        )
        .unwrap();
        assert_eq!(
            rest,
            "postgresql://u:pw@db:5433/app?application_name=x&connect_timeout=3&sslmode=require"
        );
        assert_eq!(tls.mode, SslMode::VerifyFull);
        assert_eq!(tls.root_cert, Some(RootCert::File("/etc/ca.pem".into())));
        let (rest, tls) = split("postgres://u@db/app").unwrap();
        assert_eq!(rest, "postgres://u@db/app?sslmode=prefer");
        assert_eq!(tls.mode, SslMode::Prefer);
        let (rest, tls) = split("postgres://u@db/app?sslmode=disable").unwrap();
        assert_eq!(rest, "postgres://u@db/app?sslmode=disable");
        assert!(tls.connector().unwrap().is_none());
    }

    #[test]
    fn key_value_strings_keep_their_quoting_and_lose_the_tls_settings() {
        let (rest, tls) = split(
            "host=db user=u password='it\\'s here' sslmode = verify-ca sslrootcert='/my certs/ca.pem'",
        )
        .unwrap();
        assert_eq!(
            rest,
            "host=db user=u password='it\\'s here' sslmode=require"
        );
        assert!(!rest.contains("sslrootcert"), "{rest}");
        assert_eq!(tls.mode, SslMode::VerifyCa);
        assert_eq!(
            tls.root_cert,
            Some(RootCert::File("/my certs/ca.pem".into()))
        );
        let (rest, tls) = split("host=db sslrootcert=system").unwrap();
        assert_eq!(rest, "host=db sslmode=require");
        assert_eq!(tls.root_cert, Some(RootCert::System));
        assert_eq!(
            tls.mode,
            SslMode::VerifyFull,
            "libpq 16's default with the system CAs"
        );
    }

    #[test]
    fn a_question_mark_in_a_password_does_not_start_the_query() {
        let (rest, tls) = split("postgres://u:pa?ss@db/app?sslmode=require").unwrap();
        assert_eq!(rest, "postgres://u:pa?ss@db/app?sslmode=require");
        assert_eq!(tls.mode, SslMode::Require);
        let (rest, tls) = split("postgres://u:p?w@db?sslmode=disable&connect_timeout=2").unwrap();
        assert_eq!(
            rest,
            "postgres://u:p?w@db?connect_timeout=2&sslmode=disable"
        );
        assert_eq!(tls.mode, SslMode::Disable);
    }

    #[test]
    fn a_malformed_string_never_shows_part_of_a_password() {
        let error = split("host=db password=my secret").unwrap_err().to_string();
        assert!(!error.contains("secret"), "{error}");
        assert!(error.contains("character 21"), "{error}");
    }

    #[test]
    fn the_system_store_takes_nothing_weaker_than_verify_full() {
        for mode in ["require", "verify-ca", "prefer"] {
            let error = split(&format!("host=db sslrootcert=system sslmode={mode}"))
                .unwrap_err()
                .to_string();
            assert!(error.contains("verify-full"), "{mode}: {error}");
        }
    }

    #[test]
    fn wrong_tls_settings_are_refused_naming_the_setting() {
        let error = split("postgres://db/app?sslmode=verify")
            .unwrap_err()
            .to_string();
        assert!(error.contains("sslmode `verify`"), "{error}");
        let error = split("host=db sslcert=/c.pem").unwrap_err().to_string();
        assert!(error.contains("sslcert and sslkey"), "{error}");
        let error = split("host=db sslmode='open").unwrap_err().to_string();
        assert!(error.contains("not closed"), "{error}");
        let (_, tls) =
            split("postgres://db/app?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem").unwrap();
        let error = tls.connector().err().unwrap().to_string();
        assert!(
            error.contains("sslrootcert") && error.contains("/nonexistent/ca.pem"),
            "{error}"
        );
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let (_, tls) = split(&format!(
            "postgres://db/app?sslmode=verify-ca&sslrootcert={}",
            empty.display()
        ))
        .unwrap();
        let error = tls.connector().err().unwrap().to_string();
        assert!(error.contains("no PEM certificate"), "{error}");
    }

    #[test]
    fn unverified_modes_build_a_connector_without_any_ca() {
        for mode in ["allow", "prefer", "require"] {
            let (_, tls) = split(&format!("postgres://db/app?sslmode={mode}")).unwrap();
            assert!(tls.connector().unwrap().is_some(), "{mode}");
        }
    }
}
