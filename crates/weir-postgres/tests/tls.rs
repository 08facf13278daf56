//! PostgreSQL over TLS with SCRAM-SHA-256, against a server (started by
//! `scripts/postgres.sh`) that rejects plaintext and checks passwords: every session of the
//! sinks is encrypted and the certificate verified as `sslmode` asks; a wrong password, an
//! untrusted CA or a certificate for another host are refused with an error that says so
//! and never shows a password; and an exactly-once job killed mid-run and then resumed with
//! wrong credentials loses nothing and commits nothing twice once resumed with the right ones.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use weir_postgres::word_count::{self, Delivery, WordCountOptions};
use weir_postgres::PostgresConnection;
use weir_testkit::{kill_after_checkpoint, wait_bounded};

const RECORDS: u64 = 20_000;
const WORDS: u64 = 200;

fn connect(url: &str) -> Result<postgres::Client, String> {
    PostgresConnection::new(url)
        .and_then(|c| c.connect("weir-tls-test"))
        .map_err(|e| e.to_string())
}

/// Whether the session runs over TLS, and whether its user's password is stored as SCRAM
/// (so that the `scram-sha-256` line of pg_hba.conf is what admitted it).
fn session_is_tls_and_scram(client: &mut postgres::Client) -> (bool, bool) {
    let row = client
        .query_one(
            "SELECT s.ssl, a.rolpassword LIKE 'SCRAM-SHA-256$%' \
             FROM pg_stat_ssl s, pg_authid a \
             WHERE s.pid = pg_backend_pid() AND a.rolname = current_user",
            &[],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

fn assert_no_secret(text: &str, what: &str) {
    let password = common::tls_password();
    assert!(
        !text.contains(&password),
        "{what} shows the password: {text}"
    );
    assert!(
        !text.contains("wrong-pass-1"),
        "{what} shows a password: {text}"
    );
}

#[test]
fn sessions_are_encrypted_verified_and_scram_authenticated_and_bad_credentials_are_refused() {
    let mut client = connect(&common::tls_url()).unwrap();
    assert_eq!(session_is_tls_and_scram(&mut client), (true, true));
    // `prefer`, libpq's default, encrypts with a server that offers TLS.
    let mut client = connect(&common::tls_url_with(
        "prefer",
        None,
        &common::tls_password(),
    ))
    .unwrap();
    assert!(session_is_tls_and_scram(&mut client).0);
    // `localhost` is in the certificate too.
    let by_name = common::tls_url().replacen("@127.0.0.1:", "@localhost:", 1);
    connect(&by_name).unwrap();

    let refused = |url: &str, expected: &[&str]| {
        let error = connect(url).err().expect("a refused connection");
        for part in expected {
            assert!(error.contains(part), "`{part}` not in: {error}");
        }
        assert_no_secret(&error, "the error");
    };
    refused(
        &common::tls_url_with("disable", None, &common::tls_password()),
        &["no encryption", "sslmode"],
    );
    refused(
        &common::tls_url_with("verify-full", Some(&common::tls_ca()), "wrong-pass-1"),
        &[
            "password authentication failed",
            "check the user and password",
        ],
    );
    for mode in ["verify-full", "verify-ca", "require"] {
        refused(
            &common::tls_url_with(
                mode,
                Some(&common::tls_untrusted_ca()),
                &common::tls_password(),
            ),
            &["TLS handshake", "certificate", "sslrootcert"],
        );
    }
    // A certificate not issued for the host: refused by verify-full, fine for verify-ca.
    let port = common::tls_url()
        .split("@127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap()
        .to_string();
    let elsewhere = |mode: &str| {
        format!(
            "host=db.elsewhere.example hostaddr=127.0.0.1 port={port} user=weir password={} \
             dbname=postgres sslmode={mode} sslrootcert={}",
            common::tls_password(),
            common::tls_ca()
        )
    };
    refused(
        &elsewhere("verify-full"),
        &["certificate not valid for name"],
    );
    let mut client = connect(&elsewhere("verify-ca")).unwrap();
    assert!(session_is_tls_and_scram(&mut client).0);
}

fn options(url: &str, table: &str, work: &std::path::Path) -> WordCountOptions {
    // As weir-pg-count sets them, so that in-process runs resume its checkpoints.
    let mut options = WordCountOptions::new(url, table);
    options.delivery = Delivery::ExactlyOnceAppend;
    options.records = RECORDS;
    options.words = WORDS;
    options.parallelism = 2;
    options.checkpoint_interval = Duration::from_millis(200);
    options.checkpoint_dir = Some(work.join("checkpoints"));
    options.local_recovery = Some(work.join("local-recovery"));
    options.resume = true;
    options
}

#[test]
fn an_exactly_once_job_over_tls_survives_a_kill_and_bad_credentials_lose_nothing() {
    let table = common::unique("tls_counts");
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    // The log goes to a file: a pipe nobody reads while the test waits would stall the job.
    let log_file = work.join("job.log");
    let read_log = || std::fs::read_to_string(&log_file).unwrap_or_default();
    let run = |resume: bool| {
        let log = std::fs::File::create(&log_file).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_weir-pg-count"));
        command
            .args(["--url", &common::tls_url(), "--table", &table])
            .args([
                "--records",
                &RECORDS.to_string(),
                "--words",
                &WORDS.to_string(),
            ])
            .args(["--rate", "8000", "--checkpoint-interval-ms", "200"])
            .arg("--work-dir")
            .arg(work)
            // Everything the sink logs, to check that no password is among it.
            .env("RUST_LOG", "weir=info,weir_postgres=debug")
            .stdout(Stdio::null())
            .stderr(log);
        if resume {
            command.arg("--resume");
        }
        command
    };
    let mut child = run(false).spawn().unwrap();
    let killed = kill_after_checkpoint(
        &mut child,
        &work.join("checkpoints"),
        word_count::JOB_NAME,
        2,
        Duration::from_millis(50),
        Duration::from_secs(60),
    );
    assert!(
        killed,
        "the first run ended before its kill: {}",
        read_log()
    );
    assert_no_secret(&read_log(), "the job's log");
    let committed = word_count::table_rows(&common::tls_url(), &table).unwrap();
    assert!(
        !committed.is_empty(),
        "nothing was committed before the kill"
    );

    // Resumed with a wrong password, then with a CA that did not sign the server's
    // certificate: the job fails, saying why, and the table keeps what it had.
    for (url, expected) in [
        (
            common::tls_url_with("verify-full", Some(&common::tls_ca()), "wrong-pass-1"),
            "password authentication failed",
        ),
        (
            common::tls_url_with(
                "verify-full",
                Some(&common::tls_untrusted_ca()),
                &common::tls_password(),
            ),
            "certificate",
        ),
    ] {
        let error = word_count::build(&options(&url, &table, work))
            .and_then(|env| {
                env.execute(word_count::JOB_NAME)
                    .map_err(|e| weir_postgres::PostgresError::Config(e.to_string()))
            })
            .expect_err("the job with bad credentials failed")
            .to_string();
        assert!(error.contains(expected), "`{expected}` not in: {error}");
        assert_no_secret(&error, "the job's error");
        let now = word_count::table_rows(&common::tls_url(), &table).unwrap();
        assert_eq!(
            now.len(),
            committed.len(),
            "the failed run changed the table"
        );
    }

    // Resumed with the right ones, it finishes exactly once.
    let mut child = run(true).spawn().unwrap();
    let status = wait_bounded(&mut child, Duration::from_secs(120), "the resumed run");
    let log = read_log();
    assert!(status.success(), "the resumed run failed: {log}");
    assert_no_secret(&log, "the job's log");
    let rows = word_count::table_rows(&common::tls_url(), &table).unwrap();
    if let Err(problems) =
        word_count::verify_running_counts(&rows, &word_count::expected_totals(RECORDS, WORDS))
    {
        panic!("table {table} is wrong: {problems}");
    }
    let left = common::prepared_transactions(&common::tls_url(), &format!("weir-count-{table}:%"));
    assert_eq!(left, 0, "prepared transactions left over");
}
