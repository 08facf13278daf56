//! The workloads as Weir pipelines, run in this process, with their figures.
//!
//! Each reads the input directory with the file source (one part file per split), so a
//! parallelism of p reads p files at once, as Flink's filesystem source does, or (Nexmark
//! queries, `--source generator`) makes the same events in memory with a `GeneratorSource`.
//!
//! The window and join queries (q3–q12) are in `nexmark::weir_queries`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use weir::connectors::discard::DiscardingSink;
use weir::connectors::file_reader::RawRecord;
use weir::connectors::file_sink::FileSink;
use weir::connectors::file_source::{FileFormat, FileSource};
use weir::connectors::generator::GeneratorSource;
use weir::connectors::malformed::DecodeError;
use weir::WatermarkStrategy;
use weir::{
    AggregateFunction, CheckpointConfig, CheckpointStorageConfig, DataStream, ExecutionConfig,
    Record, StreamExecutionEnvironment,
};

use crate::error::BenchError;
use crate::nexmark::generator::{LeanBid, LeanEvent, NexmarkGenerator};
use crate::nexmark::queries::{q2_selects, AuctionPrice, BidEvent, BidRow, EuroBidRow};
use crate::nexmark::weir_queries::{q11, q12, q3, q4, q5, q6, q7, q8};
use crate::process_usage;
use crate::report::{Engine, RunFigures};
use crate::workload::Workload;

/// Name of every pipeline's sink, to read its record count back.
const SINK: &str = "sink";

/// SUM(value) and COUNT(*) per key, emitting `(key, (sum, count))` after each row, as
/// Flink's non-mini-batch group aggregation emits an update per row.
#[derive(Debug, Clone, Copy, Default)]
pub struct SumAndCount;

impl<K> AggregateFunction<(K, i64), (i64, i64), (i64, i64)> for SumAndCount {
    fn create_accumulator(&self) -> (i64, i64) {
        (0, 0)
    }
    fn add(&self, (_, value): (K, i64), acc: &mut (i64, i64)) {
        acc.0 += value;
        acc.1 += 1;
    }
    fn get_result(&self, acc: &(i64, i64)) -> (i64, i64) {
        *acc
    }
    fn merge(&self, a: (i64, i64), b: (i64, i64)) -> (i64, i64) {
        (a.0 + b.0, a.1 + b.1)
    }
}

/// `SUM(value), COUNT(*)` over string-keyed rows.
#[derive(Debug, Clone, Copy)]
pub struct SumAndCountByName;

impl AggregateFunction<(String, i64), (i64, i64), (i64, i64)> for SumAndCountByName {
    fn create_accumulator(&self) -> (i64, i64) {
        (0, 0)
    }
    fn add(&self, (_, value): (String, i64), acc: &mut (i64, i64)) {
        acc.0 += value;
        acc.1 += 1;
    }
    fn get_result(&self, acc: &(i64, i64)) -> (i64, i64) {
        *acc
    }
    fn merge(&self, a: (i64, i64), b: (i64, i64)) -> (i64, i64) {
        (a.0 + b.0, a.1 + b.1)
    }
}

/// JSON lines decoded into `T` by the file source.
fn json_lines<T: Record + serde::de::DeserializeOwned>(dir: &str) -> FileSource<T> {
    FileSource::with_decoder(
        dir,
        FileFormat::Lines,
        Arc::new(|raw, _location| match raw {
            RawRecord::Line(line) => std::str::from_utf8(line)
                .map_err(|e| DecodeError::new(e.to_string()))
                .and_then(|text| {
                    serde_json::from_str(text).map_err(|e| DecodeError::new(e.to_string()))
                }),
            RawRecord::Csv { .. } => Err(DecodeError::new("a JSON decoder was given a CSV row")),
        }),
    )
}

fn key_values(env: &StreamExecutionEnvironment, dir: &str) -> DataStream<(i64, i64)> {
    env.from_source(
        FileSource::<(i64, i64)>::csv(dir).has_header(false),
        WatermarkStrategy::no_watermarks(),
        "kv source",
    )
}

/// Where a pipeline's events come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventSource {
    /// The part files of a directory.
    Files(PathBuf),
    /// Nexmark events made in memory by [`NexmarkGenerator`]: `events` of `seed`.
    Generator {
        /// How many.
        events: u64,
        /// The seed.
        seed: u64,
    },
}

/// Where a pipeline's results go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Nowhere (the timed runs; Flink's are into a blackhole).
    Discard,
    /// JSON lines into part files of this directory, to compare with Flink's.
    JsonFiles(PathBuf),
}

fn sink<T: Record + Serialize>(stream: &DataStream<T>, output: &Output) {
    match output {
        Output::Discard => {
            stream.sink_to(DiscardingSink, SINK);
        }
        Output::JsonFiles(dir) => {
            let encoder = Arc::new(|record: &T, out: &mut Vec<u8>| {
                serde_json::to_writer(&mut *out, record)?;
                out.push(b'\n');
                Ok(())
            });
            stream.sink_to(FileSink::new(dir, encoder).with_suffix(".json"), SINK);
        }
    }
}

/// The watermark strategy of the Nexmark DDL: `dateTime`, 4 s out of order.
fn nexmark_watermarks() -> WatermarkStrategy<LeanEvent> {
    WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_secs(4)).with_timestamp_assigner(
        // An event without its part has no time; it is dropped by every view after this.
        |event: &LeanEvent, _| event.date_time_millis().unwrap_or(i64::MIN),
    )
}

/// The Nexmark events with event time, from the files or the generator.
fn nexmark_events(env: &StreamExecutionEnvironment, source: &EventSource) -> DataStream<LeanEvent> {
    match source {
        EventSource::Files(dir) => env.from_source(
            json_lines::<LeanEvent>(&dir.to_string_lossy()),
            nexmark_watermarks(),
            "nexmark source",
        ),
        EventSource::Generator { events, seed } => {
            let generator = NexmarkGenerator::new(*seed);
            env.from_source(
                GeneratorSource::new(*events, move |n| generator.lean_event(n)),
                nexmark_watermarks(),
                "nexmark generator",
            )
        }
    }
}

/// The bids of q0–q2 without event time: from the files, read for the fields the query
/// needs, or from the generator.
fn plain_bids<B: Record + serde::de::DeserializeOwned>(
    env: &StreamExecutionEnvironment,
    source: &EventSource,
    from_lean: fn(LeanBid) -> B,
) -> DataStream<B> {
    match source {
        EventSource::Files(dir) => env
            .from_source(
                json_lines::<BidEvent<B>>(&dir.to_string_lossy()),
                WatermarkStrategy::no_watermarks(),
                "nexmark source",
            )
            .flat_map_iter(BidEvent::into_bid),
        EventSource::Generator { events, seed } => {
            let generator = NexmarkGenerator::new(*seed);
            env.from_source(
                GeneratorSource::new(*events, move |n| generator.lean_event(n)),
                WatermarkStrategy::no_watermarks(),
                "nexmark generator",
            )
            .flat_map_iter(move |e: LeanEvent| e.into_bid().map(from_lean))
        }
    }
}

fn bid_row(bid: LeanBid) -> BidRow {
    BidRow {
        auction: bid.auction,
        bidder: bid.bidder,
        price: bid.price,
        date_time: bid.date_time,
        extra: bid.extra,
    }
}

fn auction_price(bid: LeanBid) -> AuctionPrice {
    AuctionPrice {
        auction: bid.auction,
        price: bid.price,
    }
}

/// Builds `workload`'s pipeline over the key,value input in `dir` or the Nexmark events of
/// `source`, with its results going to `output`.
pub fn build(
    env: &StreamExecutionEnvironment,
    workload: Workload,
    source: &EventSource,
    output: &Output,
) -> Result<(), BenchError> {
    let kv_dir = || match source {
        EventSource::Files(dir) => Ok(dir.to_string_lossy().into_owned()),
        EventSource::Generator { .. } => Err(BenchError::Run(format!(
            "{workload} reads the key,value files; it has no generator source"
        ))),
    };
    match workload {
        Workload::Stateless => sink(
            &key_values(env, &kv_dir()?)
                .filter(|(_, value)| value % 2 == 0)
                .map(|(key, value)| (key, value * 10)),
            output,
        ),
        Workload::Keyed => sink(
            &key_values(env, &kv_dir()?)
                .key_by(|(key, _): &(i64, i64)| *key)
                .aggregate(SumAndCount)
                .name("sum and count"),
            output,
        ),
        Workload::KeyedStrings => sink(
            &env.from_source(
                FileSource::<(String, i64)>::csv(kv_dir()?).has_header(false),
                WatermarkStrategy::no_watermarks(),
                "kv source",
            )
            .key_by_ref(|(key, _): &(String, i64)| key)
            .aggregate(SumAndCountByName)
            .name("sum and count"),
            output,
        ),
        Workload::Q0 => sink(&plain_bids(env, source, bid_row), output),
        Workload::Q1 => sink(
            &plain_bids(env, source, bid_row).map(EuroBidRow::from),
            output,
        ),
        Workload::Q2 => sink(
            &plain_bids(env, source, auction_price).filter(|bid| q2_selects(bid.auction)),
            output,
        ),
        Workload::Q3 => sink(&q3(&nexmark_events(env, source)), output),
        Workload::Q4 => sink(&q4(&nexmark_events(env, source)), output),
        Workload::Q5 => sink(&q5(&nexmark_events(env, source)), output),
        Workload::Q6 => sink(&q6(&nexmark_events(env, source)), output),
        Workload::Q7 => sink(&q7(&nexmark_events(env, source)), output),
        Workload::Q8 => sink(&q8(&nexmark_events(env, source)), output),
        Workload::Q11 => sink(&q11(&nexmark_events(env, source)), output),
        Workload::Q12 => sink(&q12(&nexmark_events(env, source)), output),
    }
    Ok(())
}

/// What a run did, besides its figures: records the windows dropped as late (none, when
/// the input is in order within each split and the watermark 4 s behind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunDetails {
    /// Records dropped as late by every operator together.
    pub late_records_dropped: u64,
}

/// Runs `workload` over `source` at `parallelism`, checkpointing every second to
/// `checkpoints` when given, writing its results to `output`, and measures it. Meant to run
/// alone in its process: the peak memory is the process's.
pub fn run(
    workload: Workload,
    source: &EventSource,
    parallelism: u32,
    checkpoints: Option<&Path>,
    output: &Output,
    trace_origins: bool,
) -> Result<(RunFigures, RunDetails), BenchError> {
    let mut config = ExecutionConfig::default().with_parallelism(parallelism);
    if trace_origins {
        config = config.with_record_origins(weir::RecordOriginTracing::Always);
    }
    if let Some(checkpoints) = checkpoints {
        config = config.with_checkpointing(
            CheckpointConfig::default()
                .with_interval(Duration::from_secs(1))
                .with_storage(CheckpointStorageConfig::FileSystem(
                    checkpoints.to_path_buf(),
                )),
        );
    }
    let env = StreamExecutionEnvironment::new(config).map_err(weir::WeirError::from)?;
    build(&env, workload, source, output)?;
    let before = process_usage::current();
    let result = env.execute(workload.name())?;
    let after = process_usage::current();
    let records = result
        .operators
        .first()
        .map(|source| source.records_out)
        .unwrap_or_default();
    let details = RunDetails {
        late_records_dropped: result
            .operators
            .iter()
            .map(|o| o.late_records_dropped)
            .sum(),
    };
    let figures = RunFigures {
        workload,
        engine: match (checkpoints.is_some(), trace_origins) {
            (true, true) => Engine::WeirTraced,
            (true, false) => Engine::Weir,
            (false, _) => Engine::WeirNoCheckpoints,
        },
        parallelism,
        records,
        records_out: result
            .operator(&format!("Sink: {SINK}"))
            .map(|sink| sink.records_in),
        seconds: result.wall_time.as_secs_f64(),
        cpu_seconds: after.cpu_seconds - before.cpu_seconds,
        cpu_seconds_with_setup: None,
        peak_rss_mib: after.peak_rss_mib,
        checkpoints: result.checkpoints.completed,
        checkpoint_mean_ms: result
            .checkpoints
            .mean_completed_duration()
            .map(|d| d.as_secs_f64() * 1e3),
        machine_busy_before: None,
    };
    Ok((figures, details))
}

#[cfg(test)]
mod tests {
    use weir::connectors::collection::CollectionSource;

    use super::*;
    use crate::nexmark::model::BID;
    use crate::nexmark::sql_timestamp::SqlTimestamp;

    fn bid(auction: i64, price: i64, millis: i64) -> LeanEvent {
        LeanEvent {
            event_type: BID,
            person: None,
            auction: None,
            bid: Some(LeanBid {
                auction,
                bidder: 1,
                price,
                date_time: SqlTimestamp(millis),
                extra: String::new(),
            }),
        }
    }

    #[test]
    fn q7_returns_a_bid_at_a_window_end_for_both_windows_as_the_sql_does() {
        let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))
            .unwrap();
        let events = vec![
            bid(1, 5, 0),
            bid(2, 9, 5_000),
            // At the first window's end: its highest price, and the second window's.
            bid(3, 9, 10_000),
            bid(4, 3, 12_000),
            // At the second window's end, above its highest price: only the third window's.
            bid(5, 20, 20_000),
        ];
        let rows =
            q7(&env.from_source(CollectionSource::new(events), nexmark_watermarks(), "bids"))
                .collect();
        env.execute("q7").unwrap();
        let mut got: Vec<(i64, i64)> = rows
            .take()
            .into_iter()
            .map(|r| (r.auction, r.date_time.0))
            .collect();
        got.sort_unstable();
        assert_eq!(got, vec![(2, 5_000), (3, 10_000), (3, 10_000), (5, 20_000)]);
    }
}
