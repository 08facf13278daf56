//! What the PostgreSQL tests share: the servers' addresses and unique names.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

fn env(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!(
            "{var} is not set: these tests need PostgreSQL. Run them through scripts/test.sh, \
             or start the servers with `eval \"$(scripts/postgres.sh start)\"`"
        )
    })
}

/// The server with prepared transactions enabled.
pub fn url() -> String {
    env("WEIR_POSTGRES_URL")
}

/// A server with `max_prepared_transactions = 0`.
pub fn url_without_2pc() -> String {
    env("WEIR_POSTGRES_NO_2PC_URL")
}

/// How many prepared transactions whose id is LIKE `pattern` the server at `url` holds.
pub fn prepared_transactions(url: &str, pattern: &str) -> i64 {
    let mut client = weir_postgres::PostgresConnection::new(url)
        .expect("a PostgreSQL URL")
        .connect("weir-test")
        .expect("a connection to PostgreSQL");
    client
        .query_one(
            "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE $1",
            &[&pattern],
        )
        .expect("the prepared transactions")
        .get(0)
}

/// A table name no other test (or earlier run) uses.
pub fn unique(name: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    format!(
        "{name}_{}_{micros}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}
