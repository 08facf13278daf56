//! Connecting to PostgreSQL: a connection string, checked up front (its TLS settings too),
//! and errors that name the server without its password.

use std::error::Error as _;
use std::str::FromStr;
use std::time::Duration;

use postgres::{Client, Config, NoTls};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::PostgresError;
use crate::tls::{self, SslMode, TlsSettings};

/// Where the database is, and how to reach it: the connection string as libpq reads it,
/// TLS included (see [`crate::tls`]); SCRAM-SHA-256 authentication is negotiated with the
/// server, bound to the TLS channel when there is one.
#[derive(Clone)]
pub struct PostgresConnection {
    config: Config,
    server: String,
    tls: TlsSettings,
    connector: Option<MakeRustlsConnect>,
}

impl std::fmt::Debug for PostgresConnection {
    // The password never reaches a log: only where the server is and how TLS is set.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresConnection")
            .field("server", &self.server)
            .field("user", &self.config.get_user())
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl PostgresConnection {
    /// Settings from a connection string (`postgresql://user@host:port/db?sslmode=…` or
    /// `host=… user=… sslmode=…`).
    pub fn new(url: &str) -> Result<Self, PostgresError> {
        let (driver, tls) = tls::split(url)?;
        let mut config = Config::from_str(&driver).map_err(|e| {
            PostgresError::Config(format!("invalid PostgreSQL connection string: {e}"))
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        let host = config
            .get_hosts()
            .first()
            .map(|h| match h {
                postgres::config::Host::Tcp(name) => name.clone(),
                postgres::config::Host::Unix(path) => path.display().to_string(),
            })
            .unwrap_or_else(|| "localhost".into());
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let database = config
            .get_dbname()
            .or(config.get_user())
            .unwrap_or("postgres");
        let server = format!("{host}:{port}/{database}");
        let connector = tls.connector()?;
        Ok(Self {
            config,
            server,
            tls,
            connector,
        })
    }

    /// `host:port/database`, for messages.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The connection's TLS settings.
    pub fn tls(&self) -> &TlsSettings {
        &self.tls
    }

    /// Opens a session, tagged with `application_name` (visible in `pg_stat_activity`).
    pub fn connect(&self, application_name: &str) -> Result<Client, PostgresError> {
        let mut config = self.config.clone();
        config.application_name(application_name);
        let connected = match &self.connector {
            None => config.connect(NoTls),
            Some(connector) => config.connect(connector.clone()),
        };
        connected.map_err(|source| PostgresError::Connect {
            server: self.server.clone(),
            reason: describe(&source),
            hint: self.hint(&source),
            source,
        })
    }

    /// What to check, when the error says what is wrong.
    fn hint(&self, error: &postgres::Error) -> String {
        let code = error.code().map(|c| c.code());
        if code == Some("28P01") {
            return " — check the user and password of the connection string".into();
        }
        if code == Some("28000") && self.tls.mode == SslMode::Disable {
            return " — the server may accept only TLS connections: set sslmode (for example \
                     sslmode=verify-full with sslrootcert)"
                .into();
        }
        let chain = describe(error);
        if chain.contains("certificate") || chain.contains("UnknownIssuer") {
            return match &self.tls.root_cert {
                Some(tls::RootCert::File(path)) => format!(
                    " — the server's certificate is checked against the CAs of sslrootcert \
                     `{}`: is its issuer among them (and, with sslmode=verify-full, is it \
                     issued for this host)?",
                    path.display()
                ),
                _ => " — the server's certificate is not trusted: set sslrootcert to the CA \
                      that signed it"
                    .into(),
            };
        }
        String::new()
    }
}

/// The whole of a driver error: the server's message and SQLSTATE, or each cause in turn
/// (the driver's own message is only its kind, such as "db error").
fn describe(error: &postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        return format!(
            "{}: {} (SQLSTATE {})",
            db.severity(),
            db.message(),
            db.code().code()
        );
    }
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_string_is_checked_and_named_without_password() {
        let c =
            PostgresConnection::new("postgresql://u:secret@db.example:6543/app?sslmode=require")
                .unwrap();
        assert_eq!(c.server(), "db.example:6543/app");
        let printed = format!("{c:?}");
        assert!(!printed.contains("secret"), "{printed}");
        assert!(printed.contains("Require"), "{printed}");
        let e = PostgresConnection::new("postgresql://u@host:notaport/db").unwrap_err();
        assert!(
            e.to_string()
                .contains("invalid PostgreSQL connection string"),
            "{e}"
        );
    }

    #[test]
    fn an_unreachable_server_is_named_with_the_cause_and_no_password() {
        // Port 1 on the loopback refuses at once.
        let c = PostgresConnection::new("postgresql://u:hunter2@127.0.0.1:1/app?sslmode=disable")
            .unwrap();
        let error = c.connect("weir-test").err().unwrap().to_string();
        assert!(error.contains("127.0.0.1:1/app"), "{error}");
        assert!(error.to_lowercase().contains("refused"), "{error}");
        assert!(!error.contains("hunter2"), "{error}");
    }
}
