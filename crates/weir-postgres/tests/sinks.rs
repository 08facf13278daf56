//! The PostgreSQL sinks in-process against a real server: exact results under injected
//! failures and lost connections, the refusal of a server without prepared transactions,
//! and constraint violations that name the row.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use weir::{ExecutionConfig, RestartStrategyConfig, StreamExecutionEnvironment};
use weir_postgres::word_count::{self, Delivery, WordCountOptions};
use weir_postgres::{PostgresConnection, PostgresSink};

fn options(delivery: Delivery) -> WordCountOptions {
    let table = common::unique("counts");
    word_count::create_table(
        &common::url(),
        &table,
        delivery != Delivery::ExactlyOnceAppend,
    )
    .expect("create table");
    let mut options = WordCountOptions::new(&common::url(), &table);
    options.delivery = delivery;
    options.rate = Some(20_000.0);
    options
}

fn check(options: &WordCountOptions) {
    let rows = word_count::table_rows(&options.url, &options.table).expect("read table");
    let expected = word_count::expected_totals(options.records, options.words);
    let verdict = match options.delivery {
        Delivery::ExactlyOnceAppend => word_count::verify_running_counts(&rows, &expected),
        _ => word_count::verify_totals(&rows, &expected),
    };
    if let Err(problems) = verdict {
        panic!("table {} is wrong: {problems}", options.table);
    }
}

fn prepared_transactions(prefix: &str) -> usize {
    let mut client = PostgresConnection::new(&common::url())
        .unwrap()
        .connect("weir-test")
        .unwrap();
    let rows = client
        .query("SELECT gid FROM pg_prepared_xacts", &[])
        .unwrap();
    rows.iter()
        .filter(|r| r.get::<_, String>(0).starts_with(prefix))
        .count()
}

/// Runs the pipeline with one failure injected after `fail_after` words, then checks the
/// table and that no prepared transaction is left.
fn survives_an_injected_failure(delivery: Delivery, fail_after: u64) {
    let mut options = options(delivery);
    options.fail_after = Some(fail_after);
    let result = word_count::build(&options)
        .unwrap()
        .execute(word_count::JOB_NAME)
        .unwrap();
    assert_eq!(result.restarts, 1);
    assert!(result.checkpoints.completed >= 1);
    check(&options);
    assert_eq!(
        prepared_transactions(&options.prefix),
        0,
        "prepared transactions left over"
    );
}

#[test]
fn exactly_once_append_is_exact_after_an_injected_failure() {
    survives_an_injected_failure(Delivery::ExactlyOnceAppend, 9_000);
}

#[test]
fn exactly_once_upsert_totals_are_exact_after_an_injected_failure() {
    survives_an_injected_failure(Delivery::ExactlyOnceUpsert, 12_000);
}

#[test]
fn upsert_totals_are_exact_despite_replays() {
    survives_an_injected_failure(Delivery::Upsert, 10_000);
}

#[test]
fn lost_connections_mid_transaction_recover_exactly_once() {
    let mut options = options(Delivery::ExactlyOnceAppend);
    options.records = 30_000;
    options.rate = Some(10_000.0);
    // Its own name, so that other tests running alongside keep their sessions.
    let application = common::unique("weir-sink-lost");
    options.application_name = application.clone();
    // The job's sink sessions are terminated by the server a few times while it runs.
    let stop = Arc::new(AtomicBool::new(false));
    let killer = {
        let stop = stop.clone();
        let application = application.clone();
        std::thread::spawn(move || {
            let mut admin = PostgresConnection::new(&common::url())
                .unwrap()
                .connect("weir-test-admin")
                .unwrap();
            let mut terminated = 0;
            // Only sessions inside a transaction: the connection is lost mid-transaction.
            while !stop.load(Ordering::SeqCst) && terminated < 3 {
                std::thread::sleep(Duration::from_millis(300));
                let rows = admin
                    .query(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND state IN ('idle in transaction', 'active', 'idle')",
                        &[&application],
                    )
                    .unwrap();
                terminated += rows.iter().filter(|r| r.get::<_, bool>(0)).count();
            }
            terminated
        })
    };
    let result = word_count::build(&options)
        .unwrap()
        .execute(word_count::JOB_NAME)
        .unwrap();
    stop.store(true, Ordering::SeqCst);
    let terminated = killer.join().unwrap();
    assert!(terminated > 0, "no session was terminated");
    assert!(result.restarts > 0, "the job did not notice");
    check(&options);
    assert_eq!(
        prepared_transactions(&options.prefix),
        0,
        "prepared transactions left over"
    );
}

#[test]
fn a_server_without_prepared_transactions_is_refused_when_the_job_starts() {
    let table = common::unique("no_2pc");
    word_count::create_table(&common::url_without_2pc(), &table, false).unwrap();
    let mut options = WordCountOptions::new(&common::url_without_2pc(), &table);
    options.checkpoint_interval = Duration::from_secs(3600);
    let error = word_count::build(&options)
        .unwrap()
        .execute(word_count::JOB_NAME)
        .unwrap_err()
        .to_string();
    assert!(error.contains("max_prepared_transactions = 0"), "{error}");
}

#[derive(Clone, Serialize, Deserialize)]
struct Reading {
    sensor: String,
    value: i64,
}

#[test]
fn a_constraint_violation_fails_the_job_naming_the_row() {
    let table = common::unique("readings");
    let mut client = PostgresConnection::new(&common::url())
        .unwrap()
        .connect("weir-test")
        .unwrap();
    client
        .batch_execute(&format!(
            "CREATE TABLE \"{table}\" (sensor text PRIMARY KEY, value bigint CHECK (value >= 0))"
        ))
        .unwrap();
    for exactly_once in [false, true] {
        let env = StreamExecutionEnvironment::new(
            ExecutionConfig::default()
                .with_parallelism(1)
                .with_restart_strategy(RestartStrategyConfig::None),
        )
        .unwrap();
        let builder = PostgresSink::builder(&common::url(), &table)
            .columns(["sensor", "value"])
            .key_columns(["sensor"]);
        let readings = env.generate(10, |i| Reading {
            sensor: format!("s{i}"),
            value: if i == 7 { -5 } else { i as i64 },
        });
        if exactly_once {
            readings.sink_to(builder.exactly_once(&common::unique("c")).unwrap(), "pg");
        } else {
            readings.sink_to(builder.upsert().unwrap(), "pg");
        }
        let error = env.execute("constraint").unwrap_err().to_string();
        assert!(
            error.contains(&format!("{table}_value_check")) && error.contains("(s7, -5)"),
            "{error}"
        );
    }
}
