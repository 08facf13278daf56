//! SASL authentication of a log-reader connection, as Kafka clients do it (KIP-43, KIP-152):
//! after ApiVersions, a SaslHandshake names the mechanism, then SaslAuthenticate requests
//! carry the mechanism's messages until it is done.
//!
//! The mechanisms themselves (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) come from `rsasl`, a
//! maintained SASL framework that also checks the server's final SCRAM signature, so that a
//! broker which does not know the password cannot pass for one that does.

use std::io::Cursor;

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
