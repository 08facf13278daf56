//! Kafka over mutual TLS, against the test script's broker that requires client certificates
//! (`WEIR_KAFKA_MTLS_BOOTSTRAP`: tansu started with `--cert`, `--key` and `--client-ca`, the
//! test CA; Kafka's `ssl.client.auth=required`). The client's certificate and key are
//! `WEIR_KAFKA_TLS_CLIENT_CERT` and `WEIR_KAFKA_TLS_CLIENT_KEY`; a "stranger" pair is signed by
//! a CA the broker does not trust.
//!
//! - The reference pipeline (source → count → exactly-once sink) runs with the client
//!   certificate (`ssl.certificate.location`, `ssl.key.location`), is SIGKILLed between a
//!   checkpoint and its commit, and resumes: the sink settles its transaction through the log
//!   reader, which presents the same certificate, and the committed output is exact.
//! - A resume without a client certificate, or with the stranger's, fails with an error that
//!   says which, and the committed output does not change.
//! - The log reader reads with the certificate and names the refusal without one.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use weir_kafka::client_config::KafkaConnection;
use weir_kafka::{word_count, LogReader};
use weir_testkit::wait_bounded;

const PARTITIONS: i32 = 2;
const RECORDS: u64 = 4_000;

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: these tests need the mutual-TLS broker of \
             `eval $(scripts/kafka-broker.sh start)` (scripts/test.sh starts it)"
        )
    })
}

/// A client certificate: `client` (signed by the test CA), `stranger` (signed by another
/// CA), or none.
#[derive(Clone, Copy)]
enum Identity {
    Client,
    Stranger,
    Anonymous,
}

/// The TLS properties of `identity`, as a user writes them.
fn properties(identity: Identity) -> Vec<(String, String)> {
    let mut properties = vec![
        ("security.protocol".to_string(), "SSL".to_string()),
        ("ssl.ca.location".to_string(), var("WEIR_KAFKA_TLS_CA")),
    ];
    let pair = match identity {
        Identity::Client => Some(("WEIR_KAFKA_TLS_CLIENT_CERT", "WEIR_KAFKA_TLS_CLIENT_KEY")),
        Identity::Stranger => Some((
            "WEIR_KAFKA_TLS_STRANGER_CERT",
            "WEIR_KAFKA_TLS_STRANGER_KEY",
        )),
        Identity::Anonymous => None,
    };
    if let Some((certificate, key)) = pair {
        properties.push(("ssl.certificate.location".into(), var(certificate)));
        properties.push(("ssl.key.location".into(), var(key)));
    }
    properties
}

fn connection(identity: Identity) -> KafkaConnection {
    let mut connection = KafkaConnection::new(var("WEIR_KAFKA_MTLS_BOOTSTRAP"));
    connection.properties.extend(properties(identity));
    connection
}

fn kafka_count(work: &Path, input: &str, output: &str, identity: Identity) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_weir-kafka-count"));
    command
        .args(["--bootstrap", &var("WEIR_KAFKA_MTLS_BOOTSTRAP")])
        .args(["--input", input, "--output", output])
        .args(["--rate", "4000", "--checkpoint-interval-ms", "200"])
        .args(["--operation-timeout-ms", "10000", "--parallelism", "2"])
        .arg("--work-dir")
        .arg(work);
    for (key, value) in properties(identity) {
        command
            .arg("--kafka-property")
            .arg(format!("{key}={value}"));
    }
    command
}

#[test]
fn the_exactly_once_pipeline_presents_its_client_certificate_and_survives_a_kill() {
    let client = connection(Identity::Client);
    let input = common::unique("mtls-words");
    let output = common::unique("mtls-counts");
    weir_kafka::admin::ensure_topic(&client, &output, PARTITIONS).expect("output topic");
    let expected = word_count::produce_words_over(&client, &input, PARTITIONS, RECORDS, 200)
        .expect("produce over mutual TLS");
    let work = tempfile::tempdir().expect("work dir");

    // 1. Killed between a checkpoint's completion and its transaction's commit.
    let mut first = kafka_count(work.path(), &input, &output, Identity::Client);
    first.arg("--kill-before-commit").stdout(Stdio::null());
    let mut child = first.spawn().expect("spawn");
    let status = wait_bounded(&mut child, Duration::from_secs(120), "run over mutual TLS");
    assert_eq!(
        status.signal(),
        Some(9),
        "not killed before a commit: {status}"
    );
    let before = word_count::committed_counts_over(&client, &output, PARTITIONS)
        .expect("read the output over mutual TLS");

    // 2. Resumed without a client certificate, then with one the broker does not trust:
    //    each fails naming the certificate, and the output does not change.
    for (identity, says) in [
        (Identity::Anonymous, "requires a client certificate"),
        (Identity::Stranger, "refused the client certificate"),
    ] {
        let mut refused = kafka_count(work.path(), &input, &output, identity);
        refused.arg("--resume");
        let refused = common::run_job(refused, says);
        assert!(!refused.status.success(), "a resume that should fail ran");
        let last = common::last_error_line(&refused);
        assert!(
            last.contains(says) && last.contains("ssl.certificate.location"),
            "the job's error does not say `{says}`: {last}"
        );
        let unchanged = word_count::committed_counts_over(&client, &output, PARTITIONS)
            .expect("read the output over mutual TLS");
        assert_eq!(unchanged, before, "a refused run changed the output");
    }

    // 3. Resumed with the client certificate: the pending transaction is settled and the
    //    output is exact.
    let mut good = kafka_count(work.path(), &input, &output, Identity::Client);
    good.arg("--resume");
    let finished = common::run_job(good, "resume over mutual TLS");
    assert!(finished.status.success(), "the resumed run failed");
    let committed = word_count::committed_counts_over(&client, &output, PARTITIONS)
        .expect("read the output over mutual TLS");
    if let Err(problems) = word_count::verify_counts(&committed, &expected, true) {
        panic!("output over mutual TLS is wrong: {problems}");
    }
}

#[test]
fn the_log_reader_presents_the_client_certificate_and_names_a_refusal() {
    let topic = common::unique("mtls-reader");
    let client = connection(Identity::Client);
    weir_kafka::admin::ensure_topic(&client, &topic, 1).expect("topic over mutual TLS");
    let words = word_count::produce_words_over(&client, &topic, 1, 50, 5).expect("produce");
    let mut reader = LogReader::for_connection(&client, Duration::from_secs(10)).expect("reader");
    let records = reader.committed_records(&topic, 0).expect("read");
    assert_eq!(records.len() as u64, words.values().sum::<u64>());

    for (identity, says) in [
        (Identity::Anonymous, "requires a client certificate"),
        (Identity::Stranger, "refused the client certificate"),
    ] {
        let mut reader = LogReader::for_connection(&connection(identity), Duration::from_secs(10))
            .expect("reader");
        let error = reader.committed_records(&topic, 0).unwrap_err().to_string();
        assert!(
            error.contains(says) && error.contains("ssl.key.location"),
            "{error}"
        );
    }
}

#[test]
fn a_client_certificate_without_its_key_is_a_configuration_error() {
    let mut connection = connection(Identity::Anonymous);
    connection.properties.insert(
        "ssl.certificate.location".into(),
        var("WEIR_KAFKA_TLS_CLIENT_CERT"),
    );
    let error = connection.validate().unwrap_err().to_string();
    assert!(
        error.contains("`ssl.certificate.location` is set without `ssl.key.location`"),
        "{error}"
    );
    // The key's contents never appear in the connection's printed form.
    let client = self::connection(Identity::Client);
    let key = std::fs::read_to_string(var("WEIR_KAFKA_TLS_CLIENT_KEY")).expect("key file");
    let body = key.lines().nth(1).expect("a PEM body line");
    assert!(!format!("{client:?}").contains(body));
}
