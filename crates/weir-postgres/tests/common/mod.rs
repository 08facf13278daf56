//! What the PostgreSQL tests share: the servers' addresses, unique names, and `psql` as the
//! oracle that reads what the sinks committed without Weir's code.

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

/// The server that takes only TLS connections with SCRAM passwords: its URL, with
/// `sslmode=verify-full` and the test CA as `sslrootcert`.
pub fn tls_url() -> String {
    env("WEIR_POSTGRES_TLS_URL")
}

/// The TLS server's password (to check it never shows, and to make wrong ones).
pub fn tls_password() -> String {
    env("WEIR_POSTGRES_TLS_PASSWORD")
}

/// A CA that did not sign the TLS server's certificate.
pub fn tls_untrusted_ca() -> String {
    env("WEIR_POSTGRES_TLS_UNTRUSTED_CA")
}

/// The TLS server's URL with `sslmode`, `sslrootcert` and the password as given.
pub fn tls_url_with(sslmode: &str, root_cert: Option<&str>, password: &str) -> String {
    let url = tls_url();
    let base = url.split_once('?').map_or(url.as_str(), |(b, _)| b);
    let base = base.replacen(
        &format!(":{}@", tls_password()),
        &format!(":{password}@"),
        1,
    );
    match root_cert {
        Some(ca) => format!("{base}?sslmode={sslmode}&sslrootcert={ca}"),
        None => format!("{base}?sslmode={sslmode}"),
    }
}

/// The TLS server's CA file (from its URL).
pub fn tls_ca() -> String {
    env("WEIR_POSTGRES_TLS_CA")
}

/// `psql`: on the PATH, or in the newest PostgreSQL installed by Debian's packages.
fn psql() -> std::path::PathBuf {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("psql"))
        .find(|p| p.is_file());
    on_path.unwrap_or_else(|| {
        let mut versions: Vec<std::path::PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .map(|dir| dir.filter_map(|e| e.ok()).map(|e| e.path()).collect())
            .unwrap_or_default();
        versions.sort();
        versions
            .last()
            .map(|v| v.join("bin/psql"))
            .unwrap_or_else(|| std::path::PathBuf::from("psql"))
    })
}

/// Runs one query with `psql`, returning its unaligned, comma-separated rows.
pub fn psql_query(sql: &str) -> Result<Vec<String>, String> {
    let output = std::process::Command::new(psql())
        .arg(url())
        .args([
            "-X",
            "-A",
            "-t",
            "-F",
            ",",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            sql,
        ])
        .output()
        .map_err(|e| format!("cannot run psql: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "psql failed on `{sql}`: {} — {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

/// The table's rows, as `psql` prints them.
pub fn psql_rows(table: &str) -> Result<Vec<weir_postgres::word_count::WordCount>, String> {
    psql_query(&format!("SELECT word, count FROM \"{table}\""))?
        .iter()
        .map(|line| {
            let (word, count) = line
                .rsplit_once(',')
                .ok_or_else(|| format!("a row psql printed without a comma: {line}"))?;
            Ok(weir_postgres::word_count::WordCount {
                word: word.to_string(),
                count: count
                    .parse()
                    .map_err(|e| format!("a count psql printed: {line}: {e}"))?,
            })
        })
        .collect()
}

/// The sink's prepared transactions, by `psql`.
pub fn psql_prepared(table: &str) -> Result<Vec<String>, String> {
    psql_query(&format!(
        "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'weir-count-{table}:%'"
    ))
}
