//! Errors of the PostgreSQL sinks, each naming the server, table or row involved.

/// What went wrong talking to PostgreSQL.
#[derive(thiserror::Error)]
pub enum PostgresError {
    /// A configuration value is missing or wrong.
    #[error("invalid PostgreSQL sink configuration: {0}")]
    Config(String),
    /// The server could not be reached or refused the connection.
    #[error("cannot connect to PostgreSQL at {server}: {reason}{hint}")]
    Connect {
        /// `host:port/database` (no password).
        server: String,
        /// What failed: the server's message, or the driver's chain of causes.
        reason: String,
        /// What to check, when the cause says (a password, a CA), else empty.
        hint: String,
        /// The cause.
        #[source]
        source: postgres::Error,
    },
    /// The server has prepared transactions disabled, which the exactly-once sink needs.
    #[error("PostgreSQL at {server} has max_prepared_transactions = 0: the exactly-once sink needs prepared transactions; set max_prepared_transactions > 0 (for example to max_connections) in postgresql.conf and restart the server")]
    PreparedTransactionsDisabled {
        /// `host:port/database`.
        server: String,
    },
    /// A row broke a constraint of the table.
    #[error("a row violates constraint {constraint} of table {table}: {message}{detail}")]
    ConstraintViolation {
        /// The table.
        table: String,
        /// The constraint's name.
        constraint: String,
        /// The server's message.
        message: String,
        /// The server's detail, naming the row (e.g. `Failing row contains (...)`).
        detail: String,
    },
    /// A statement failed.
    #[error("PostgreSQL error while {action}: {message}{detail}")]
    Database {
        /// What the sink was doing.
        action: String,
        /// The server's SQLSTATE and message, or the driver's.
        message: String,
        /// The cause.
        #[source]
        source: postgres::Error,
        /// The server's detail, if any.
        detail: String,
    },
    /// The sink's fence row names another process: a newer process of the job took it over
    /// (or another job writes with the same transaction prefix), so this one commits nothing.
    #[error("sink {sink} on {server}: this process (epoch {epoch}) no longer owns the sink's transactions: its fence row in {table} names {found}. A newer process or attempt of the job took it over, or another job writes with the same transaction prefix; this task commits nothing more")]
    Fenced {
        /// `{prefix}:{operator uid}`.
        sink: String,
        /// `host:port/database`.
        server: String,
        /// The fence table.
        table: String,
        /// This process's epoch.
        epoch: u64,
        /// What the fence row says instead.
        found: String,
    },
    /// A record could not be turned into a row.
    #[error("cannot map a record to a row of {table}: {message}")]
    Mapping {
        /// The table.
        table: String,
        /// Why.
        message: String,
    },
}

impl PostgresError {
    /// Wraps a driver error with what the sink was doing, turning constraint violations
    /// (SQLSTATE class 23) into [`PostgresError::ConstraintViolation`].
    pub fn database(action: impl Into<String>, table: &str, source: postgres::Error) -> Self {
        if let Some(db) = source.as_db_error() {
            if db.code().code().starts_with("23") {
                return PostgresError::ConstraintViolation {
                    table: db.table().unwrap_or(table).to_string(),
                    constraint: db.constraint().unwrap_or("(unnamed)").to_string(),
                    message: db.message().to_string(),
                    detail: db.detail().map(|d| format!(" — {d}")).unwrap_or_default(),
                };
            }
        }
        let message = match source.as_db_error() {
            Some(db) => format!("{} ({})", db.message(), db.code().code()),
            None => source.to_string(),
        };
        if source.code().map(|c| c.code()) == Some("55P03") {
            return PostgresError::Database {
                action: action.into(),
                message,
                detail: " — a row is locked, most likely by this sink's prepared transaction of the previous checkpoint whose completion notice is late; recovery commits it".into(),
                source,
            };
        }
        let detail = source
            .as_db_error()
            .and_then(|db| db.detail())
            .map(|d| format!(" — {d}"))
            .unwrap_or_default();
        PostgresError::Database {
            action: action.into(),
            message,
            source,
            detail,
        }
    }
}

/// Its `Debug` form is its message, so that `fn main() -> Result<(), PostgresError>` prints what
/// went wrong rather than the enum's fields.
impl std::fmt::Debug for PostgresError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod debug_tests {
    use super::*;

    /// `fn main() -> Result<(), PostgresError>` prints `Error: ` and the `Debug` form.
    #[test]
    fn debug_prints_the_message() {
        let error = PostgresError::Config("no connection URL".into());
        assert_eq!(format!("{error:?}"), error.to_string());
    }
}
