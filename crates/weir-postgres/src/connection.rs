//! Connecting to PostgreSQL: a connection string, checked up front, and errors that name the
//! server without its password.

use std::str::FromStr;
use std::time::Duration;

use postgres::{Client, Config, NoTls};

use crate::error::PostgresError;

/// Where the database is.
#[derive(Debug, Clone)]
pub struct PostgresConnection {
    config: Config,
    server: String,
}

impl PostgresConnection {
    /// Settings from a connection string (`postgresql://user@host:port/db` or
    /// `host=… user=…`).
    pub fn new(url: &str) -> Result<Self, PostgresError> {
        let mut config = Config::from_str(url).map_err(|e| {
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
        Ok(Self { config, server })
    }

    /// `host:port/database`, for messages.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Opens a session, tagged with `application_name` (visible in `pg_stat_activity`).
    pub fn connect(&self, application_name: &str) -> Result<Client, PostgresError> {
        let mut config = self.config.clone();
        config.application_name(application_name);
        config
            .connect(NoTls)
            .map_err(|source| PostgresError::Connect {
                server: self.server.clone(),
                source,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_string_is_checked_and_named_without_password() {
        let c = PostgresConnection::new("postgresql://u:secret@db.example:6543/app").unwrap();
        assert_eq!(c.server(), "db.example:6543/app");
        assert!(!format!("{c:?}").contains("db.example:6543/app/secret"));
        let e = PostgresConnection::new("postgresql://u@host:notaport/db").unwrap_err();
        assert!(
            e.to_string()
                .contains("invalid PostgreSQL connection string"),
            "{e}"
        );
    }
}
