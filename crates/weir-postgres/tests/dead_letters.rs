//! Dead letters given to the exactly-once PostgreSQL sink are committed once each, with the
//! checkpoint that covers the source's position past them, also when the job fails after
//! some of them were committed and replays from its last checkpoint.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use weir::connectors::discard::DiscardingSink;
use weir::connectors::malformed::{MalformedRecord, RecordOrigin};
use weir::prelude::*;
use weir_postgres::{PostgresConnection, PostgresSink};

const ROWS: u64 = 1_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Order {
    id: u64,
    amount: u32,
}

/// A dead letter as a row: the file's name, the line and the text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct DeadLetter {
    file: String,
    line: i64,
    raw: String,
}

#[test]
fn dead_letters_reach_the_exactly_once_postgres_sink_once_each_across_a_failure() {
    let input = tempfile::tempdir().unwrap();
    let mut expected = Vec::new();
    for file in 0..2u64 {
        let name = format!("orders-{file}.csv");
        let mut text = String::from("id,amount\n");
        for row in 0..ROWS {
            let id = file * ROWS + row;
            // Every 25th row's amount is not a number: a dead letter at its line.
            let line = if id.is_multiple_of(25) {
                let raw = format!("{id},lots");
                expected.push((name.clone(), row as i64 + 2, raw.clone()));
                raw
            } else {
                format!("{id},{}", id % 100)
            };
            text.push_str(&line);
            text.push('\n');
        }
        std::fs::write(input.path().join(&name), text).unwrap();
    }
    expected.sort();

    let table = common::unique("dead_letters");
    let mut client = PostgresConnection::new(&common::url())
        .unwrap()
        .connect("weir-test")
        .unwrap();
    client
        .batch_execute(&format!(
            "CREATE TABLE \"{table}\" (file text, line bigint, raw text)"
        ))
        .unwrap();

    let config = ExecutionConfig::default()
        .with_parallelism(2)
        .with_buffer_timeout(Duration::from_millis(5))
        .with_checkpointing(CheckpointConfig::default().with_interval(Duration::from_millis(100)))
        .with_restart_strategy(RestartStrategyConfig::FixedDelay {
            attempts: 1,
            delay: Duration::from_millis(10),
        });
    let env = StreamExecutionEnvironment::new(config).unwrap();
    let source = FileSource::<Order>::csv(input.path())
        // Slow enough that checkpoints complete (and commit dead letters) before the failure.
        .with_rate_limit(1_000.0)
        .with_dead_letters();
    let (orders, dead_letters) = env
        .from_source(source, WatermarkStrategy::no_watermarks(), "orders")
        .split_dead_letters();
    let failed = Arc::new(AtomicBool::new(false));
    let once = failed.clone();
    orders
        .map(move |order: Order| {
            if order.id == ROWS + 701 && !once.swap(true, Ordering::SeqCst) {
                panic!("failing once at order {}", order.id);
            }
            order
        })
        .sink_to(DiscardingSink, "orders");
    let prefix = common::unique("dl");
    dead_letters
        .map(|letter: MalformedRecord| {
            let RecordOrigin::File { file, line } = letter.origin else {
                panic!("not a file origin: {}", letter.origin);
            };
            let file = std::path::Path::new(&file)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or(file);
            DeadLetter {
                file,
                line: line as i64,
                raw: letter.raw,
            }
        })
        .sink_to(
            PostgresSink::builder(&common::url(), &table)
                .columns(["file", "line", "raw"])
                .exactly_once(&prefix)
                .unwrap(),
            "dead letters",
        );
    let result = env.execute("dead letters to postgres").unwrap();
    assert!(failed.load(Ordering::SeqCst), "the job did not fail");
    assert_eq!(result.restarts, 1, "{result}");

    let mut rows: Vec<(String, i64, String)> = client
        .query(&format!("SELECT file, line, raw FROM \"{table}\""), &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    rows.sort();
    assert_eq!(rows, expected);
    assert_eq!(
        common::prepared_transactions(&common::url(), &format!("{prefix}%")),
        0,
        "prepared transactions left over"
    );
}
