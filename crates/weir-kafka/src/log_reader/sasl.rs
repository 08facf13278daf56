//! SASL authentication of a log-reader connection, as Kafka clients do it (KIP-43, KIP-152):
//! after ApiVersions, a SaslHandshake names the mechanism, then SaslAuthenticate requests
//! carry the mechanism's messages until it is done.
//!
//! The mechanisms themselves (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) come from `rsasl`, a
//! maintained SASL framework that also checks the server's final SCRAM signature, so that a
//! broker which does not know the password cannot pass for one that does.

use std::io::Cursor;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use rsasl::prelude::{Mechname, SASLClient, SASLConfig, SessionError};

use super::BrokerConnection;
use crate::error::KafkaError;
use crate::security::{ConnectionSecurity, SaslMechanism};

/// Kafka's error codes for the handshake and the exchange.
const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
const ILLEGAL_SASL_STATE: i16 = 34;
const SASL_AUTHENTICATION_FAILED: i16 = 58;

/// SaslAuthenticate v1 is the last non-flexible version (v2 only changes the encoding).
const AUTHENTICATE_VERSION: i16 = 1;

/// Who the reader authenticates as. Its `Debug` form shows no password.
#[derive(Clone)]
pub(crate) struct SaslLogin {
    mechanism: SaslMechanism,
    username: String,
    password: String,
}

impl std::fmt::Debug for SaslLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslLogin")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl SaslLogin {
    /// The login `security` asks for, if its protocol uses SASL; an error for a mechanism
    /// this reader cannot speak.
    pub(crate) fn from_security(security: &ConnectionSecurity) -> Result<Option<Self>, KafkaError> {
        let Some(mechanism) = security
            .sasl_mechanism
            .filter(|_| security.protocol.uses_sasl())
        else {
            return Ok(None);
        };
        if !matches!(
            mechanism,
            SaslMechanism::Plain | SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512
        ) {
            return Err(KafkaError::Config(format!(
                "the Kafka log reader authenticates with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, not {}",
                mechanism_name(mechanism)
            )));
        }
        // `from_properties` has checked that both are set for these mechanisms.
        let (Some(username), Some(password)) =
            (security.sasl_username.clone(), security.sasl_password())
        else {
            return Err(KafkaError::Config(format!(
                "`sasl.mechanism` {} needs `sasl.username` and `sasl.password`",
                mechanism_name(mechanism)
            )));
        };
        Ok(Some(Self {
            mechanism,
            username,
            password: password.to_string(),
        }))
    }
}

/// The mechanism's name on the wire.
pub(crate) fn mechanism_name(mechanism: SaslMechanism) -> &'static str {
    match mechanism {
        SaslMechanism::Plain => "PLAIN",
        SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
        SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        SaslMechanism::Gssapi => "GSSAPI",
        SaslMechanism::OAuthBearer => "OAUTHBEARER",
    }
}

impl BrokerConnection {
    /// Authenticates this fresh connection as `login`.
    pub(super) fn authenticate(&mut self, login: &SaslLogin) -> Result<(), KafkaError> {
        let name = mechanism_name(login.mechanism);
        let failed = |broker: &str, message: String| KafkaError::Authentication {
            broker: broker.to_string(),
            mechanism: name.to_string(),
            username: login.username.clone(),
            message,
        };
        let version = self.version(ApiKey::SaslHandshake, 1, 1)?;
        // Some brokers (tansu) answer a mechanism they do not offer by closing the connection
        // instead of with error 33: name that as the likely cause.
        let handshake: SaslHandshakeResponse = self
            .send(
                ApiKey::SaslHandshake,
                version,
                &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(name)),
            )
            .map_err(|e| match e {
                KafkaError::BrokerIo { source, .. } => failed(
                    &self.address,
                    format!("the broker ended the connection when asked for {name} ({source}), as a broker that does not offer it may; check `sasl.mechanism`"),
                ),
                other => other,
            })?;
        match handshake.error_code {
            0 => {}
            UNSUPPORTED_SASL_MECHANISM => {
                // Some brokers echo the mechanism asked for: that one is not offered.
                let offered: Vec<&str> = handshake
                    .mechanisms
                    .iter()
                    .map(|m| &**m)
                    .filter(|m| *m != name)
                    .collect();
                return Err(failed(
                    &self.address,
                    format!(
                        "the broker does not offer {name} (it offers {}); set `sasl.mechanism` to one of those",
                        if offered.is_empty() { "none".to_string() } else { offered.join(", ") }
                    ),
                ));
            }
            ILLEGAL_SASL_STATE => {
                return Err(failed(
                    &self.address,
                    "the broker is not expecting a SASL handshake on this connection; check that its listener uses SASL (`security.protocol`)".into(),
                ))
            }
            code => {
                return Err(failed(
                    &self.address,
                    format!("the SASL handshake failed with error code {code}"),
                ))
            }
        }

        let config =
            SASLConfig::with_credentials(None, login.username.clone(), login.password.clone())
                .map_err(|e| failed(&self.address, format!("SASL setup: {e}")))?;
        let mechname = Mechname::parse(name.as_bytes())
            .map_err(|e| failed(&self.address, format!("SASL setup: {e}")))?;
        let mut session = SASLClient::new(config)
            .start_suggested(&[mechname])
            .map_err(|e| failed(&self.address, format!("SASL setup: {e}")))?;
        let mut input: Option<Bytes> = None;
        loop {
            let mut out = Cursor::new(Vec::new());
            let state = session
                .step(input.as_deref(), &mut out)
                .map_err(|e| failed(&self.address, step_failure(&e, input.is_some())))?;
            if state.has_sent_message() {
                let response: SaslAuthenticateResponse = self.send(
                    ApiKey::SaslAuthenticate,
                    self.version(ApiKey::SaslAuthenticate, AUTHENTICATE_VERSION, 0)?,
                    &SaslAuthenticateRequest::default()
                        .with_auth_bytes(Bytes::from(out.into_inner())),
                )?;
                if response.error_code != 0 {
                    let reason = response
                        .error_message
                        .as_deref()
                        .filter(|m| !m.is_empty())
                        .map_or_else(
                            || format!("error code {}", response.error_code),
                            str::to_string,
                        );
                    let hint = if response.error_code == SASL_AUTHENTICATION_FAILED {
                        "; check `sasl.username` and `sasl.password`"
                    } else {
                        ""
                    };
                    return Err(failed(
                        &self.address,
                        format!("the broker refused it: {reason}{hint}"),
                    ));
                }
                // Renewed at 85% of the lifetime the broker grants, as Kafka's Java client
                // does at the earliest (it picks 85–95%).
                self.session_renewal = u64::try_from(response.session_lifetime_ms)
                    .ok()
                    .filter(|ms| *ms > 0)
                    .and_then(|ms| {
                        // (Computed so as not to overflow; a lifetime beyond what an
                        // `Instant` holds is no limit.)
                        let renewal = Duration::from_millis(ms / 100 * 85 + ms % 100 * 85 / 100);
                        Instant::now().checked_add(renewal)
                    });
                input = Some(response.auth_bytes);
            }
            // Finished: for SCRAM, the server's signature has been checked in this step.
            if state.is_finished() {
                return Ok(());
            }
        }
    }
}

/// What a failed mechanism step means to the user. Once the broker has answered, a failure
/// is usually its verdict: SCRAM brokers refuse a wrong password with a server-final
/// `e=invalid-proof` message rather than a Kafka error code, and some answer an unknown user
/// with an `e=` message where the server-first message belongs. (rsasl names the rarer
/// protocol faults, such as a nonce that does not extend ours, in the quoted reason.) A
/// broker whose own signature does not verify does not know the password, or is not the
/// broker it claims to be.
fn step_failure(error: &SessionError, after_broker_input: bool) -> String {
    match error {
        SessionError::MutualAuthenticationFailed => {
            "the broker's SCRAM signature does not match the password, so it cannot be trusted; check `sasl.password` and that `bootstrap.servers` names the right cluster".to_string()
        }
        _ if after_broker_input => {
            format!("the login did not succeed ({error}); check `sasl.username` and `sasl.password`")
        }
        _ => format!("SASL client: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use bytes::BytesMut;
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::{ApiVersionsResponse, RequestHeader, ResponseHeader};
    use kafka_protocol::protocol::{Decodable, Encodable};

    use crate::log_reader::LogReader;

    const PASSWORD: &str = "tr0ub4dor-scripted";

    /// What a scripted broker does with one SASL request (key, version, body): answer with an
    /// encoded response body, or close the connection (`None`).
    type Script = Box<dyn FnMut(ApiKey, i16, Bytes) -> Option<BytesMut> + Send>;

    /// Encodes `response` at `version`.
    fn body(response: &impl Encodable, version: i16) -> Option<BytesMut> {
        let mut out = BytesMut::new();
        response.encode(&mut out, version).ok()?;
        Some(out)
    }

    /// A broker on 127.0.0.1 serving any number of connections, one thread each:
    /// ApiVersions (offering the two SASL requests at versions 0 to 1), then `script` for
    /// every other request. Also returns the count of connections accepted.
    fn scripted_broker(script: Script) -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(AtomicUsize::new(0));
        let script = Arc::new(Mutex::new(script));
        let counter = accepted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                counter.fetch_add(1, Ordering::SeqCst);
                let script = script.clone();
                std::thread::spawn(move || serve(stream, &script));
            }
        });
        (address, accepted)
    }

    /// Answers one connection's requests until `script` closes it or the client leaves.
    fn serve(mut stream: std::net::TcpStream, script: &Mutex<Script>) {
        loop {
            let mut length = [0u8; 4];
            if stream.read_exact(&mut length).is_err() {
                return;
            }
            let mut request = vec![0u8; i32::from_be_bytes(length).max(0) as usize];
            if request.len() < 4 || stream.read_exact(&mut request).is_err() {
                return;
            }
            let Ok(key) = ApiKey::try_from(i16::from_be_bytes([request[0], request[1]])) else {
                return;
            };
            let version = i16::from_be_bytes([request[2], request[3]]);
            let mut request = Bytes::from(request);
            let Ok(header) =
                RequestHeader::decode(&mut request, key.request_header_version(version))
            else {
                return;
            };
            let answer = if key == ApiKey::ApiVersions {
                let offered = [ApiKey::SaslHandshake, ApiKey::SaslAuthenticate]
                    .map(|k| {
                        ApiVersion::default()
                            .with_api_key(k as i16)
                            .with_min_version(0)
                            .with_max_version(1)
                    })
                    .to_vec();
                body(
                    &ApiVersionsResponse::default().with_api_keys(offered),
                    version,
                )
            } else {
                let Ok(mut script) = script.lock() else {
                    return;
                };
                script(key, version, request)
            };
            let Some(answer) = answer else {
                return;
            };
            let mut frame = BytesMut::new();
            if ResponseHeader::default()
                .with_correlation_id(header.correlation_id)
                .encode(&mut frame, key.response_header_version(version))
                .is_err()
            {
                return;
            }
            frame.extend_from_slice(&answer);
            let length = (frame.len() as i32).to_be_bytes();
            if stream.write_all(&length).is_err() || stream.write_all(&frame).is_err() {
                return;
            }
        }
    }

    /// A PLAIN login as `alice`.
    fn plain_security() -> ConnectionSecurity {
        security(&[
            ("security.protocol", "sasl_plaintext"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", "alice"),
            ("sasl.password", PASSWORD),
        ])
    }

    /// The error of logging in to a scripted broker as `alice` with `mechanism`.
    fn login_error(mechanism: &str, script: Script) -> KafkaError {
        let (address, _) = scripted_broker(script);
        let login = SaslLogin::from_security(&security(&[
            ("security.protocol", "sasl_plaintext"),
            ("sasl.mechanism", mechanism),
            ("sasl.username", "alice"),
            ("sasl.password", PASSWORD),
        ]))
        .unwrap()
        .unwrap();
        match BrokerConnection::connect(&address, Duration::from_secs(5), None, Some(&login)) {
            Ok(_) => panic!("the scripted broker accepted the login"),
            Err(error) => {
                let message = error.to_string();
                assert!(
                    matches!(error, KafkaError::Authentication { .. })
                        && message.contains(mechanism)
                        && message.contains("alice")
                        && message.contains(&address)
                        && !message.contains(PASSWORD),
                    "{message}"
                );
                error
            }
        }
    }

    /// A handshake answered with `mechanism` accepted.
    fn handshake_accepted(version: i16) -> Option<BytesMut> {
        body(&SaslHandshakeResponse::default(), version)
    }

    #[test]
    fn a_mechanism_the_broker_does_not_offer_is_named_with_the_ones_it_offers() {
        let error = login_error(
            "SCRAM-SHA-256",
            Box::new(|key, version, _| {
                assert_eq!(key, ApiKey::SaslHandshake);
                body(
                    &SaslHandshakeResponse::default()
                        .with_error_code(UNSUPPORTED_SASL_MECHANISM)
                        .with_mechanisms(vec![
                            StrBytes::from_static_str("PLAIN"),
                            StrBytes::from_static_str("SCRAM-SHA-512"),
                        ]),
                    version,
                )
            }),
        );
        let message = error.to_string();
        assert!(
            message.contains("does not offer SCRAM-SHA-256 (it offers PLAIN, SCRAM-SHA-512)")
                && message.contains("sasl.mechanism"),
            "{message}"
        );

        // A broker that closes the connection instead (as tansu does) is named as one that
        // may not offer it.
        let message = login_error("PLAIN", Box::new(|_, _, _| None)).to_string();
        assert!(
            message.contains("ended the connection when asked for PLAIN")
                && message.contains("sasl.mechanism"),
            "{message}"
        );
    }

    #[test]
    fn a_refused_login_error_58_names_the_broker_reason_and_what_to_check() {
        let mut authenticate = 0;
        let error = login_error(
            "PLAIN",
            Box::new(move |key, version, mut request| match key {
                ApiKey::SaslHandshake => handshake_accepted(version),
                ApiKey::SaslAuthenticate => {
                    authenticate += 1;
                    assert_eq!(authenticate, 1, "PLAIN takes one message");
                    // The PLAIN message: authzid NUL authcid NUL password.
                    let message = SaslAuthenticateRequest::decode(&mut request, version)
                        .ok()?
                        .auth_bytes;
                    assert_eq!(&message[..], format!("\0alice\0{PASSWORD}").as_bytes());
                    body(
                        &SaslAuthenticateResponse::default()
                            .with_error_code(SASL_AUTHENTICATION_FAILED)
                            .with_error_message(Some(StrBytes::from_static_str(
                                "Authentication failed: Invalid username or password",
                            ))),
                        version,
                    )
                }
                _ => None,
            }),
        );
        let message = error.to_string();
        assert!(
            message.contains("refused it: Authentication failed: Invalid username or password")
                && message.contains("check `sasl.username` and `sasl.password`"),
            "{message}"
        );
    }

    /// A broker accepting every PLAIN login, granting sessions of `lifetime_ms`.
    fn plain_broker(lifetime_ms: i64) -> (String, Arc<AtomicUsize>) {
        scripted_broker(Box::new(move |key, version, _| match key {
            ApiKey::SaslHandshake => handshake_accepted(version),
            ApiKey::SaslAuthenticate => body(
                &SaslAuthenticateResponse::default().with_session_lifetime_ms(lifetime_ms),
                version,
            ),
            _ => None,
        }))
    }

    #[test]
    fn a_session_the_broker_limits_is_renewed_by_a_new_connection_before_it_ends() {
        let login = SaslLogin::from_security(&plain_security()).unwrap();
        for (lifetime_ms, connections) in [(0, 1), (i64::MAX, 1), (1, 3)] {
            let (address, accepted) = plain_broker(lifetime_ms);
            let mut reader = LogReader::new(&address, Duration::from_secs(5));
            reader.sasl = login.clone();
            for _ in 0..3 {
                reader.connection(&address).unwrap();
                // Past a 1 ms session's renewal point; far from the longest one's.
                std::thread::sleep(Duration::from_millis(5));
            }
            assert_eq!(
                accepted.load(Ordering::SeqCst),
                connections,
                "a session of {lifetime_ms} ms"
            );
        }
    }

    #[test]
    fn a_forged_scram_server_signature_fails_the_login() {
        let mut client_nonce = String::new();
        let error = login_error(
            "SCRAM-SHA-256",
            Box::new(move |key, version, mut request| {
                if key == ApiKey::SaslHandshake {
                    return handshake_accepted(version);
                }
                let message = SaslAuthenticateRequest::decode(&mut request, version)
                    .ok()?
                    .auth_bytes;
                let message = String::from_utf8(message.to_vec()).ok()?;
                let answer = if client_nonce.is_empty() {
                    // client-first `n,,n=alice,r=<nonce>`: a well-formed server-first.
                    client_nonce = message.split(",r=").nth(1)?.to_string();
                    format!("r={client_nonce}forged,s=c2FsdHNhbHQ=,i=4096")
                } else {
                    // client-final: a signature of the right length that the broker, not
                    // knowing the password, could not compute.
                    format!("v={}=", "A".repeat(43))
                };
                body(
                    &SaslAuthenticateResponse::default()
                        .with_auth_bytes(Bytes::from(answer.into_bytes())),
                    version,
                )
            }),
        );
        let message = error.to_string();
        assert!(
            message.contains("SCRAM signature does not match")
                && message.contains("bootstrap.servers"),
            "{message}"
        );
    }

    fn security(pairs: &[(&str, &str)]) -> ConnectionSecurity {
        let properties: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ConnectionSecurity::from_properties(&properties).unwrap()
    }

    #[test]
    fn a_login_is_made_only_when_the_protocol_uses_sasl_and_hides_its_password() {
        assert!(
            SaslLogin::from_security(&security(&[("security.protocol", "ssl")]))
                .unwrap()
                .is_none()
        );
        let login = SaslLogin::from_security(&security(&[
            ("security.protocol", "sasl_plaintext"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "alice"),
            ("sasl.password", "tr0ub4dor"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(login.mechanism, SaslMechanism::ScramSha512);
        let shown = format!("{login:?}");
        assert!(
            shown.contains("alice") && !shown.contains("tr0ub4dor"),
            "{shown}"
        );
    }

    #[test]
    fn the_reader_refuses_mechanisms_it_cannot_speak() {
        let error = SaslLogin::from_security(&security(&[
            ("security.protocol", "sasl_ssl"),
            ("sasl.mechanism", "OAUTHBEARER"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(
            error.contains("OAUTHBEARER") && error.contains("SCRAM-SHA-256"),
            "{error}"
        );
    }
}
