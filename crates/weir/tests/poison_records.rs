//! A poison record — one that makes a user function fail on every restart — does not loop
//! forever: the restart strategy gives up, and the error names where the record was read,
//! because every attempt after a failure of user code traces each record's origin, through
//! chains, shuffles and the operators' outputs.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use weir::prelude::*;

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Order {
    customer: String,
    amount: u32,
}

/// Two CSV files of orders; `poison` (file index, row index) holds the customer `poison`.
fn orders(dir: &Path, rows: usize, poison: Option<(usize, usize)>) {
    for file in 0..2 {
        let mut text = String::from("customer,amount\n");
        for row in 0..rows {
            let customer = match poison == Some((file, row)) {
                true => "poison".to_string(),
                false => format!("c{}", (row * 7 + file) % 13),
            };
            text.push_str(&format!("{customer},{}\n", row % 100));
        }
        std::fs::write(dir.join(format!("orders-{file}.csv")), text).unwrap();
    }
}

fn env_with_restarts(attempts: u32) -> StreamExecutionEnvironment {
    let config = ExecutionConfig::default()
        .with_parallelism(2)
        .with_restart_strategy(RestartStrategyConfig::FixedDelay {
            attempts,
            delay: Duration::from_millis(10),
        });
    StreamExecutionEnvironment::new(config).unwrap()
}

fn source(env: &StreamExecutionEnvironment, dir: &Path) -> DataStream<Order> {
    env.from_source(
        FileSource::<Order>::csv(dir),
        WatermarkStrategy::no_watermarks(),
        "orders",
    )
}

/// Totals per customer, failing on the customer `poison` (every time, or only the first
/// time when `once` is given).
fn totals(
    stream: &DataStream<Order>,
    once: Option<Arc<AtomicBool>>,
) -> CollectHandle<(String, u64)> {
    stream
        .map(|o: Order| (o.customer, u64::from(o.amount)))
        .name("to pairs")
        .key_by(|p: &(String, u64)| p.0.clone())
        .reduce(|a, b| (a.0, a.1 + b.1))
        .map(move |total: (String, u64)| {
            if total.0 == "poison"
                && once
                    .as_ref()
                    .is_none_or(|f| !f.swap(true, Ordering::SeqCst))
            {
                panic!("cannot bill customer {}", total.0);
            }
            total
        })
        .name("billing")
        .collect()
}

fn expect_origin(error: &WeirError, dir: &Path, file: &str, line: u64) {
    let origin = error
        .record_origin()
        .unwrap_or_else(|| panic!("the error names no record: {error}"));
    let RecordOrigin::File {
        file: path,
        line: at,
    } = origin
    else {
        panic!("not a file origin: {origin}");
    };
    assert_eq!(
        (Path::new(path).file_name().and_then(|n| n.to_str()), *at),
        (Some(file), line),
        "{error}"
    );
    assert!(Path::new(path).starts_with(dir), "{path}");
    let text = error.to_string();
    assert!(
        text.contains(&format!("the record was read at {path}:{line}")),
        "the message names the record: {text}"
    );
    assert!(text.contains("cannot bill customer poison"), "{text}");
}

#[test]
fn a_poison_record_after_a_shuffle_is_named_when_the_restart_strategy_gives_up() {
    let dir = tempfile::tempdir().unwrap();
    // Row 1234 of the second file: line 1236 (after the header, 1-based).
    orders(dir.path(), 3_000, Some((1, 1234)));
    let env = env_with_restarts(2);
    let _totals = totals(&source(&env, dir.path()), None);
    let error = env.execute("poisoned").unwrap_err();
    expect_origin(&error, dir.path(), "orders-1.csv", 1236);
    assert!(
        matches!(&error, WeirError::JobFailed { failure, .. } if failure.operator == "billing"),
        "{error}"
    );
}

#[test]
fn a_poison_record_after_blank_lines_is_named_at_the_line_it_is_on() {
    let dir = tempfile::tempdir().unwrap();
    // The poisoned row is one of those the blank lines come right before: the csv crate
    // reports it from where it began parsing, at the first blank line.
    orders(dir.path(), 3_000, Some((1, 1199)));
    // Two blank lines (one LF, one CRLF) before every hundredth row: the CSV reader skips
    // them, and the origin counts them as an editor numbers lines.
    let path = dir.path().join("orders-1.csv");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut spaced = String::new();
    for (i, line) in text.lines().enumerate() {
        if i > 0 && i % 100 == 0 {
            spaced.push_str("\n\r\n");
        }
        spaced.push_str(line);
        spaced.push('\n');
    }
    std::fs::write(&path, spaced).unwrap();
    let env = env_with_restarts(2);
    let _totals = totals(&source(&env, dir.path()), None);
    let error = env.execute("poisoned after blank lines").unwrap_err();
    // Line 1201 as written, after 12 pairs of blank lines.
    expect_origin(&error, dir.path(), "orders-1.csv", 1201 + 24);
}

#[test]
fn a_poison_record_in_the_source_chain_is_named_too() {
    let dir = tempfile::tempdir().unwrap();
    orders(dir.path(), 500, Some((0, 0)));
    let env = env_with_restarts(1);
    source(&env, dir.path())
        .filter(|o: &Order| o.amount < 1_000)
        .map(|o: Order| {
            if o.customer == "poison" {
                panic!("cannot bill customer {}", o.customer);
            }
            o
        })
        .name("billing")
        .print();
    let error = env.execute("poisoned early").unwrap_err();
    expect_origin(&error, dir.path(), "orders-0.csv", 2);
}

#[test]
fn the_first_attempt_traces_nothing() {
    let dir = tempfile::tempdir().unwrap();
    orders(dir.path(), 200, Some((0, 10)));
    let env = env_with_restarts(0);
    let _totals = totals(&source(&env, dir.path()), None);
    let error = env.execute("no restarts").unwrap_err();
    assert_eq!(
        error.record_origin(),
        None,
        "without a failure before it, an attempt carries no origins: {error}"
    );
    assert!(
        error.to_string().contains("cannot bill customer poison"),
        "{error}"
    );
}

#[test]
fn record_origins_can_be_traced_always_or_never() {
    let dir = tempfile::tempdir().unwrap();
    orders(dir.path(), 200, Some((1, 10)));
    let run = |tracing: RecordOriginTracing, attempts: u32| {
        let config = ExecutionConfig::default()
            .with_parallelism(2)
            .with_record_origins(tracing)
            .with_restart_strategy(RestartStrategyConfig::FixedDelay {
                attempts,
                delay: Duration::from_millis(10),
            });
        let env = StreamExecutionEnvironment::new(config).unwrap();
        let _totals = totals(&source(&env, dir.path()), None);
        env.execute("tracing").unwrap_err()
    };
    expect_origin(
        &run(RecordOriginTracing::Always, 0),
        dir.path(),
        "orders-1.csv",
        12,
    );
    let error = run(RecordOriginTracing::Never, 2);
    assert_eq!(error.record_origin(), None, "{error}");
    // The configuration key says the same.
    let mut config = ExecutionConfig::default();
    weir::configuration::Configuration::from_yaml_str(
        "execution.record-origins: never\n",
        "weir.yaml",
    )
    .and_then(|c| c.apply(&mut config))
    .unwrap();
    assert_eq!(config.record_origins, RecordOriginTracing::Never);
}

#[test]
fn a_traced_attempt_computes_the_same_results() {
    let dir = tempfile::tempdir().unwrap();
    orders(dir.path(), 2_000, Some((1, 1_500)));
    // Fails once, on the poison record; the attempt after it traces origins and must give
    // the same totals as a computation without Weir.
    let env = env_with_restarts(1);
    let totals = totals(
        &source(&env, dir.path()),
        Some(Arc::new(AtomicBool::new(false))),
    );
    let result = env.execute("fails once").unwrap();
    assert_eq!(result.restarts, 1);
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for file in 0..2 {
        let text = std::fs::read_to_string(dir.path().join(format!("orders-{file}.csv"))).unwrap();
        for line in text.lines().skip(1) {
            let (customer, amount) = line.split_once(',').unwrap();
            *expected.entry(customer.to_string()).or_default() += amount.parse::<u64>().unwrap();
        }
    }
    // The collected running totals hold both attempts' (this job has no checkpoints); the
    // largest per customer is the final one.
    let mut finals: BTreeMap<String, u64> = BTreeMap::new();
    for (customer, total) in totals.take() {
        let f = finals.entry(customer).or_default();
        *f = (*f).max(total);
    }
    assert_eq!(finals, expected);
}

#[test]
fn a_key_selector_failing_on_a_poison_record_names_it() {
    let dir = tempfile::tempdir().unwrap();
    // Row 700 of the second file: line 702. The key selector runs where the source chain
    // hands records to the shuffle, outside any operator.
    orders(dir.path(), 1_000, Some((1, 700)));
    let env = env_with_restarts(1);
    source(&env, dir.path())
        .key_by(|o: &Order| {
            if o.customer == "poison" {
                panic!("cannot bill customer {}", o.customer);
            }
            o.customer.clone()
        })
        .reduce(|a, b| Order {
            customer: a.customer,
            amount: a.amount + b.amount,
        })
        .print();
    let error = env.execute("poisoned key").unwrap_err();
    expect_origin(&error, dir.path(), "orders-1.csv", 702);
    let text = error.to_string();
    assert!(text.contains("operator `key selector of "), "{text}");
}

/// A key whose serialization fails for the customer `poison` (user code that runs when the
/// record's key group is computed, in the shuffle).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct BillingKey(String);

impl serde::Serialize for BillingKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.0 == "poison" {
            return Err(serde::ser::Error::custom(format!(
                "cannot bill customer {}",
                self.0
            )));
        }
        serializer.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for BillingKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(BillingKey)
    }
}

#[test]
fn a_key_that_cannot_be_serialized_names_its_record_and_the_key_selector() {
    let dir = tempfile::tempdir().unwrap();
    orders(dir.path(), 1_000, Some((0, 321)));
    let env = env_with_restarts(1);
    source(&env, dir.path())
        .key_by(|o: &Order| BillingKey(o.customer.clone()))
        .reduce(|a, b| Order {
            customer: a.customer,
            amount: a.amount + b.amount,
        })
        .name("bill")
        .print();
    let error = env.execute("unserializable key").unwrap_err();
    // Key encoding failed in the first attempt too: the restart traced origins and the
    // record is named, with the key selector it failed in.
    expect_origin(&error, dir.path(), "orders-0.csv", 323);
    let text = error.to_string();
    assert!(
        text.contains("operator `key selector of `bill``") && text.contains("cannot encode a key"),
        "{text}"
    );
}

/// Sends the customer `poison`, and every tenth amount, to a side output for review.
#[derive(Clone)]
struct Review {
    tag: OutputTag<Order>,
}

impl ProcessFunction<Order, Order> for Review {
    fn process_element(
        &mut self,
        order: Order,
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_, Order>,
    ) -> Result<(), BoxError> {
        if order.customer == "poison" || order.amount.is_multiple_of(10) {
            ctx.output(&self.tag, order)?;
        } else {
            out.collect(order);
        }
        Ok(())
    }
}

#[test]
fn a_side_output_consumer_failing_on_a_poison_record_names_it() {
    let dir = tempfile::tempdir().unwrap();
    orders(dir.path(), 3_000, Some((0, 2_345)));
    let env = env_with_restarts(1);
    let tag = OutputTag::<Order>::new("review");
    let reviewed = source(&env, dir.path()).process(Review { tag: tag.clone() });
    // Chained to the process function: its side records reach it when the main output's
    // batch is handed over, while another record (or none) is being processed.
    reviewed
        .side_output(&tag)
        .map(|o: Order| {
            if o.customer == "poison" {
                panic!("cannot bill customer {}", o.customer);
            }
            o
        })
        .name("billing")
        .print();
    let _rest = reviewed.collect();
    let error = env.execute("poisoned side output").unwrap_err();
    expect_origin(&error, dir.path(), "orders-0.csv", 2_347);
}
