//! Kafka over TLS, against the test script's TLS broker (`WEIR_KAFKA_TLS_BOOTSTRAP`: tansu
//! started with `--cert` and `--key`, serving TLS on its only listener, with a certificate
//! for 127.0.0.1 signed by the test CA `WEIR_KAFKA_TLS_CA`).
//!
//! - The reference pipeline (source → count → exactly-once sink) runs over TLS, is SIGKILLed
//!   between a checkpoint and its commit, and resumes: the committed output, read back over
//!   TLS with the transaction markers by the log reader (the same reader the sink recovers
//!   with), is exact.
//! - A resume that trusts the wrong CA fails with an error that says so, before touching
//!   the output; a plaintext read of the TLS port fails; the log reader
//!   refuses the untrusted certificate naming `ssl.ca.location`.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use weir_kafka::client_config::KafkaConnection;
use weir_kafka::{word_count, LogReader};
use weir_testkit::wait_bounded;

const PARTITIONS: i32 = 2;
const RECORDS: u64 = 6_000;

fn tls_bootstrap() -> String {
    std::env::var("WEIR_KAFKA_TLS_BOOTSTRAP").unwrap_or_else(|_| {
        panic!(
            "WEIR_KAFKA_TLS_BOOTSTRAP is not set: these tests need the TLS broker of \
             `eval $(scripts/kafka-broker.sh start)` (scripts/test.sh starts it)"
        )
    })
}

fn ca(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set (scripts/kafka-broker.sh)"))
}

fn tls_connection(ca_file: &str) -> KafkaConnection {
    let mut connection = KafkaConnection::new(tls_bootstrap());
    connection
        .properties
        .insert("security.protocol".into(), "ssl".into());
    connection
        .properties
        .insert("ssl.ca.location".into(), ca_file.into());
    connection
}

fn kafka_count(work: &Path, input: &str, output: &str, ca_file: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_weir-kafka-count"));
    command
        .args(["--bootstrap", &tls_bootstrap()])
        .args(["--input", input, "--output", output])
        .args(["--rate", "4000", "--checkpoint-interval-ms", "200"])
        .args(["--operation-timeout-ms", "10000", "--parallelism", "2"])
        .args(["--kafka-property", "security.protocol=SSL"])
        .arg("--kafka-property")
        .arg(format!("ssl.ca.location={ca_file}"))
        .arg("--work-dir")
        .arg(work);
    command
}

#[test]
fn the_exactly_once_pipeline_runs_over_tls_survives_a_kill_and_refuses_an_untrusted_ca() {
    let good_ca = ca("WEIR_KAFKA_TLS_CA");
    let wrong_ca = ca("WEIR_KAFKA_TLS_UNTRUSTED_CA");
    let connection = tls_connection(&good_ca);
    let input = common::unique("tls-words");
    let output = common::unique("tls-counts");
    weir_kafka::admin::ensure_topic(&connection, &output, PARTITIONS).expect("output topic");
    let expected = word_count::produce_words_over(&connection, &input, PARTITIONS, RECORDS, 200)
        .expect("produce over TLS");
    let work = tempfile::tempdir().expect("work dir");

    // 1. Killed between a checkpoint's completion and its transaction's commit.
    let mut first = kafka_count(work.path(), &input, &output, &good_ca);
    first.arg("--kill-before-commit").stdout(Stdio::null());
    let mut child = first.spawn().expect("spawn");
    let status = wait_bounded(&mut child, Duration::from_secs(120), "run over TLS");
    assert_eq!(
        status.signal(),
        Some(9),
        "not killed before a commit: {status}"
    );
    let before = word_count::committed_counts_over(&connection, &output, PARTITIONS)
        .expect("read the output over TLS");

    // 2. Resumed trusting another CA: fails, naming the certificate problem; nothing changes.
    let mut wrong = kafka_count(work.path(), &input, &output, &wrong_ca);
    wrong.arg("--resume");
    let refused = common::run_job(wrong, "resume with an untrusted CA");
    assert!(!refused.status.success(), "a resume with the wrong CA ran");
    let last = common::last_error_line(&refused);
    assert!(
        last.contains("TLS handshake with")
            && last.contains("certificate")
            && last.contains("ssl.ca.location"),
        "the job's error does not say the certificate was refused: {last}"
    );
    let unchanged = word_count::committed_counts_over(&connection, &output, PARTITIONS)
        .expect("read the output over TLS");
    assert_eq!(unchanged, before, "a refused run changed the output");

    // 3. Resumed with the right CA: the pending transaction is settled and the output exact.
    let mut good = kafka_count(work.path(), &input, &output, &good_ca);
    good.arg("--resume");
    let finished = common::run_job(good, "resume over TLS");
    assert!(finished.status.success(), "the resumed run failed");
    let committed = word_count::committed_counts_over(&connection, &output, PARTITIONS)
        .expect("read the output over TLS");
    if let Err(problems) = word_count::verify_counts(&committed, &expected, true) {
        panic!("output over TLS is wrong: {problems}");
    }
}

#[test]
fn the_log_reader_verifies_the_broker_certificate_and_plaintext_does_not_reach_tls() {
    let topic = common::unique("tls-reader");
    let good = tls_connection(&ca("WEIR_KAFKA_TLS_CA"));
    weir_kafka::admin::ensure_topic(&good, &topic, 1).expect("topic over TLS");
    let words = word_count::produce_words_over(&good, &topic, 1, 50, 5).expect("produce");
    let mut reader = LogReader::for_connection(&good, Duration::from_secs(10)).expect("reader");
    let records = reader.committed_records(&topic, 0).expect("read over TLS");
    assert_eq!(records.len() as u64, words.values().sum::<u64>());

    let untrusted = tls_connection(&ca("WEIR_KAFKA_TLS_UNTRUSTED_CA"));
    let mut reader =
        LogReader::for_connection(&untrusted, Duration::from_secs(10)).expect("reader");
    let error = reader.committed_records(&topic, 0).unwrap_err().to_string();
    assert!(
        error.contains("TLS handshake failed") && error.contains("ssl.ca.location"),
        "{error}"
    );

    // A certificate for 127.0.0.1 does not do for another name, unless host names are not
    // checked (`ssl.endpoint.identification.algorithm=none`, as librdkafka's option).
    let port = tls_bootstrap()
        .rsplit_once(':')
        .expect("host:port")
        .1
        .to_string();
    let mut other_name = good.clone();
    other_name.bootstrap_servers = format!("localhost:{port}");
    let mut reader =
        LogReader::for_connection(&other_name, Duration::from_secs(10)).expect("reader");
    // localhost is in the certificate too: this one verifies.
    reader
        .committed_records(&topic, 0)
        .expect("localhost is named");

    let plaintext = KafkaConnection::new(tls_bootstrap());
    let mut reader = LogReader::new(&plaintext.bootstrap_servers, Duration::from_secs(3));
    assert!(
        reader.committed_records(&topic, 0).is_err(),
        "a plaintext read of the TLS port succeeded"
    );
}

#[test]
fn secrets_never_appear_in_debug_output_or_errors() {
    let mut connection = KafkaConnection::new(tls_bootstrap());
    for (k, v) in [
        ("security.protocol", "sasl_ssl"),
        ("sasl.mechanism", "SCRAM-SHA-512"),
        ("sasl.username", "alice"),
        ("sasl.password", "correct-horse-battery"),
        ("ssl.ca.location", "/nonexistent/ca.pem"),
    ] {
        connection.properties.insert(k.into(), v.into());
    }
    let shown = format!("{connection:?}");
    assert!(
        !shown.contains("correct-horse-battery") && shown.contains("alice"),
        "{shown}"
    );
    let error = connection.validate().unwrap_err().to_string();
    assert!(error.contains("/nonexistent/ca.pem"), "{error}");
    assert!(!error.contains("correct-horse-battery"), "{error}");
}
