//! Kafka with SASL authentication, against the test script's SASL brokers (tansu with the
//! other Kafka tests' memory storage, patched to take SCRAM and PLAIN credentials, started
//! with `--authentication`; the user `WEIR_KAFKA_SASL_USERNAME` has PLAIN, SCRAM-SHA-256 and
//! SCRAM-SHA-512 credentials): one over plaintext
//! (`WEIR_KAFKA_SASL_BOOTSTRAP`), one also started with `--cert` and `--key`, serving TLS
//! itself (`WEIR_KAFKA_SASL_SSL_BOOTSTRAP`, certificate signed by `WEIR_KAFKA_SASL_CA`).
//!
//! - The reference pipeline (source → count → exactly-once sink) authenticates with
//!   SCRAM-SHA-512 over TLS, is SIGKILLed between a checkpoint and its commit, and resumes;
//!   a resume with a wrong password fails naming the authentication and changes nothing;
//!   the committed output, read back by the log reader over SASL_SSL, is exact.
//! - The source and all three sink guarantees authenticate with PLAIN over TLS, and a job
//!   with a wrong PLAIN password fails naming the refused login and writes nothing.
//! - The source and the at-least-once and no-guarantee sinks authenticate with
//!   SCRAM-SHA-256 over plaintext.
//! - The log reader speaks all three mechanisms over both brokers and names a refused login
//!   (SCRAM and PLAIN), and no password ever appears in an error or a job's output. (A
//!   mechanism the broker does not offer, error 58 and a forged SCRAM signature are tested
//!   against scripted brokers in `log_reader::sasl`.)

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use weir_kafka::client_config::KafkaConnection;
use weir_kafka::{word_count, KafkaError, LogReader};
use weir_testkit::wait_bounded;

const PARTITIONS: i32 = 2;
const RECORDS: u64 = 6_000;
const WRONG_PASSWORD: &str = "not-the-password-3b9e";
/// As the other Kafka tests: the SASL broker keeps its log in memory as theirs does.
const OPERATION_TIMEOUT_MS: u64 = 10_000;
/// A refused login fails each restart after this long (librdkafka waits for the
/// transactional producer's initialization until then).
const WRONG_LOGIN_TIMEOUT_MS: u64 = 5_000;

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: these tests need the SASL brokers of \
             `eval $(scripts/kafka-broker.sh start)` (scripts/test.sh starts them)"
        )
    })
}

fn password() -> String {
    var("WEIR_KAFKA_SASL_PASSWORD")
}

/// The client properties of a SASL login (`tls`: SASL_SSL with the test CA).
fn sasl_properties(tls: bool, mechanism: &str, password: &str) -> Vec<(String, String)> {
    let mut properties = vec![
        (
            "security.protocol".to_string(),
            if tls { "SASL_SSL" } else { "SASL_PLAINTEXT" }.to_string(),
        ),
        ("sasl.mechanism".into(), mechanism.into()),
        ("sasl.username".into(), var("WEIR_KAFKA_SASL_USERNAME")),
        ("sasl.password".into(), password.into()),
    ];
    if tls {
        properties.push(("ssl.ca.location".into(), var("WEIR_KAFKA_SASL_CA")));
    }
    properties
}

fn bootstrap(tls: bool) -> String {
    var(if tls {
        "WEIR_KAFKA_SASL_SSL_BOOTSTRAP"
    } else {
        "WEIR_KAFKA_SASL_BOOTSTRAP"
    })
}

fn connection(tls: bool, mechanism: &str, password: &str) -> KafkaConnection {
    let mut connection = KafkaConnection::new(bootstrap(tls));
    connection
        .properties
        .extend(sasl_properties(tls, mechanism, password));
    connection
}

fn kafka_count(
    work: &Path,
    input: &str,
    output: &str,
    tls: bool,
    mechanism: &str,
    password: &str,
    operation_timeout_ms: u64,
) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_weir-kafka-count"));
    command
        .args(["--bootstrap", &bootstrap(tls)])
        .args(["--input", input, "--output", output])
        .args(["--checkpoint-interval-ms", "200"])
        .args(["--operation-timeout-ms", &operation_timeout_ms.to_string()])
        .args(["--parallelism", "2"])
        .arg("--work-dir")
        .arg(work);
    for (key, value) in sasl_properties(tls, mechanism, password) {
        command
            .arg("--kafka-property")
            .arg(format!("{key}={value}"));
    }
    command
}

/// Asserts that neither password appears in a process's output.
fn assert_no_secret(output: &Output, what: &str) {
    for stream in [&output.stdout, &output.stderr] {
        let text = String::from_utf8_lossy(stream);
        for secret in [password(), WRONG_PASSWORD.to_string()] {
            assert!(!text.contains(&secret), "{what} printed a password");
        }
    }
}

/// Runs `command`, a job whose `mechanism` login the broker refuses, and asserts that it
/// fails naming the refused login and the setting to check, with no password in its output.
fn assert_refused_login(command: Command, what: &str, mechanism: &str) {
    let refused = common::run_job(command, what);
    assert!(!refused.status.success(), "{what}: the job ran");
    assert_no_secret(&refused, what);
    let last = common::last_error_line(&refused);
    assert!(
        last.contains(&format!("SASL {mechanism} authentication"))
            && last.contains("sasl.password")
            && last.contains(&var("WEIR_KAFKA_SASL_USERNAME")),
        "{what}: the job's error does not say the login was refused: {last}"
    );
}

#[test]
fn the_exactly_once_pipeline_authenticates_with_scram_over_tls_survives_a_kill_and_refuses_a_wrong_password(
) {
    let good = connection(true, "SCRAM-SHA-512", &password());
    let input = common::unique("sasl-words");
    let output = common::unique("sasl-counts");
    weir_kafka::admin::ensure_topic(&good, &output, PARTITIONS).expect("output topic");
    let expected = word_count::produce_words_over(&good, &input, PARTITIONS, RECORDS, 200)
        .expect("produce over SASL_SSL");
    let work = tempfile::tempdir().expect("work dir");

    // 1. Killed between a checkpoint's completion and its transaction's commit.
    let mut first = kafka_count(
        work.path(),
        &input,
        &output,
        true,
        "SCRAM-SHA-512",
        &password(),
        OPERATION_TIMEOUT_MS,
    );
    first
        .args(["--rate", "4000", "--kill-before-commit"])
        .stdout(Stdio::null());
    let mut child = first.spawn().expect("spawn");
    let status = wait_bounded(&mut child, Duration::from_secs(120), "run over SASL_SSL");
    assert_eq!(
        status.signal(),
        Some(9),
        "not killed before a commit: {status}"
    );
    let before = word_count::committed_counts_over(&good, &output, PARTITIONS)
        .expect("read the output over SASL_SSL");

    // 2. Resumed with a wrong password: fails, naming the refused login; nothing changes.
    let mut wrong = kafka_count(
        work.path(),
        &input,
        &output,
        true,
        "SCRAM-SHA-512",
        WRONG_PASSWORD,
        WRONG_LOGIN_TIMEOUT_MS,
    );
    wrong.arg("--resume");
    assert_refused_login(wrong, "resume with a wrong password", "SCRAM-SHA-512");
    let unchanged = word_count::committed_counts_over(&good, &output, PARTITIONS)
        .expect("read the output over SASL_SSL");
    assert_eq!(unchanged, before, "a refused run changed the output");

    // 3. Resumed with the right password: the pending transaction is settled, output exact.
    let mut resumed = kafka_count(
        work.path(),
        &input,
        &output,
        true,
        "SCRAM-SHA-512",
        &password(),
        OPERATION_TIMEOUT_MS,
    );
    resumed.arg("--resume");
    let finished = common::run_job(resumed, "resume over SASL_SSL");
    assert!(finished.status.success(), "the resumed run failed");
    assert_no_secret(&finished, "the resumed run");
    let committed = word_count::committed_counts_over(&good, &output, PARTITIONS)
        .expect("read the output over SASL_SSL");
    if let Err(problems) = word_count::verify_counts(&committed, &expected, true) {
        panic!("output over SASL_SSL is wrong: {problems}");
    }
}

/// Produces words over a `mechanism` login (`tls`: SASL_SSL) and runs the pipeline once with
/// each of `guarantees` (name, whether its output must be exact), checking each output.
/// Returns the connection and the input topic.
fn run_each_guarantee(
    tls: bool,
    mechanism: &str,
    guarantees: &[(&str, bool)],
) -> (KafkaConnection, String) {
    let good = connection(tls, mechanism, &password());
    let input = common::unique(&format!("sasl-words-{mechanism}"));
    let expected =
        word_count::produce_words_over(&good, &input, PARTITIONS, 2_000, 50).expect("produce");
    for &(guarantee, exactly) in guarantees {
        let output = common::unique(&format!("sasl-counts-{mechanism}-{guarantee}"));
        weir_kafka::admin::ensure_topic(&good, &output, PARTITIONS).expect("output topic");
        let work = tempfile::tempdir().expect("work dir");
        let mut command = kafka_count(
            work.path(),
            &input,
            &output,
            tls,
            mechanism,
            &password(),
            OPERATION_TIMEOUT_MS,
        );
        command.args(["--guarantee", guarantee]);
        let what = format!("{mechanism} {guarantee}");
        let finished = common::run_job(command, &what);
        assert!(finished.status.success(), "the {what} run failed");
        assert_no_secret(&finished, &what);
        let committed = word_count::committed_counts_over(&good, &output, PARTITIONS)
            .expect("read the output over SASL");
        if let Err(problems) = word_count::verify_counts(&committed, &expected, exactly) {
            panic!("{what} output over SASL is wrong: {problems}");
        }
    }
    (good, input)
}

#[test]
fn plain_over_tls_serves_the_source_and_every_sink_guarantee_and_names_a_wrong_password() {
    let (good, input) = run_each_guarantee(
        true,
        "PLAIN",
        &[
            ("exactly_once", true),
            ("at_least_once", false),
            ("none", false),
        ],
    );

    // A wrong PLAIN password: the job fails naming the refused login, and writes nothing.
    let output = common::unique("sasl-plain-refused");
    weir_kafka::admin::ensure_topic(&good, &output, PARTITIONS).expect("output topic");
    let work = tempfile::tempdir().expect("work dir");
    let wrong = kafka_count(
        work.path(),
        &input,
        &output,
        true,
        "PLAIN",
        WRONG_PASSWORD,
        WRONG_LOGIN_TIMEOUT_MS,
    );
    assert_refused_login(wrong, "PLAIN with a wrong password", "PLAIN");
    let written = word_count::committed_counts_over(&good, &output, PARTITIONS)
        .expect("read the output over SASL_SSL with PLAIN");
    assert!(
        written.is_empty(),
        "a refused job wrote {} counts",
        written.len()
    );
}

#[test]
fn the_source_and_the_other_sink_guarantees_authenticate_with_scram_sha_256() {
    run_each_guarantee(
        false,
        "SCRAM-SHA-256",
        &[("at_least_once", false), ("none", false)],
    );
}

#[test]
fn the_log_reader_speaks_plain_and_both_scram_mechanisms_and_names_a_refused_login() {
    let mut topic = String::new();
    for tls in [false, true] {
        // The two brokers keep separate logs: each gets the topic.
        topic = common::unique("sasl-reader");
        let words = word_count::produce_words_over(
            &connection(tls, "SCRAM-SHA-256", &password()),
            &topic,
            1,
            50,
            5,
        )
        .expect("produce");
        let total = words.values().sum::<u64>() as usize;
        for mechanism in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
            let mut reader = LogReader::for_connection(
                &connection(tls, mechanism, &password()),
                Duration::from_secs(10),
            )
            .expect("reader");
            let records = reader
                .committed_records(&topic, 0)
                .unwrap_or_else(|e| panic!("read with {mechanism} (tls: {tls}): {e}"));
            assert_eq!(records.len(), total, "{mechanism} (tls: {tls})");
        }
    }

    // A wrong password, with each kind of mechanism: an authentication error naming the
    // mechanism, the user and what to check (SCRAM fails in the exchange's proof; PLAIN by
    // the broker's SaslAuthenticationFailed).
    for mechanism in ["SCRAM-SHA-512", "PLAIN"] {
        let mut reader = LogReader::for_connection(
            &connection(true, mechanism, WRONG_PASSWORD),
            Duration::from_secs(10),
        )
        .expect("reader");
        let error = reader.committed_records(&topic, 0).unwrap_err();
        assert!(
            matches!(error, KafkaError::Authentication { .. }),
            "{mechanism}: {error:?}"
        );
        let message = error.to_string();
        assert!(
            message.contains(mechanism)
                && message.contains(&var("WEIR_KAFKA_SASL_USERNAME"))
                && message.contains("sasl.password")
                && !message.contains(WRONG_PASSWORD)
                && !message.contains(&password()),
            "{message}"
        );
    }

    // Without a login the broker serves nothing.
    let mut no_login = KafkaConnection::new(bootstrap(true));
    no_login
        .properties
        .insert("security.protocol".into(), "ssl".into());
    no_login
        .properties
        .insert("ssl.ca.location".into(), var("WEIR_KAFKA_SASL_CA"));
    let mut reader = LogReader::for_connection(&no_login, Duration::from_secs(5)).expect("reader");
    assert!(
        reader.committed_records(&topic, 0).is_err(),
        "an unauthenticated read succeeded"
    );
}
