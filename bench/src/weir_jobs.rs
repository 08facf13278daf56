//! The workloads as Weir pipelines, run in this process, with their figures.
//!
//! Each reads the input directory with the file source (one part file per split), so a
//! parallelism of p reads p files at once, as Flink's filesystem source does.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use weir::connectors::discard::DiscardingSink;
use weir::connectors::file_reader::RawRecord;
use weir::connectors::file_source::{FileFormat, FileSource};
use weir::connectors::malformed::DecodeError;
use weir::WatermarkStrategy;
use weir::{
    AggregateFunction, CheckpointConfig, CheckpointStorageConfig, DataStream, ExecutionConfig,
    Record, StreamExecutionEnvironment,
};

use crate::error::BenchError;
use crate::nexmark::queries::{q2_selects, AuctionPrice, BidEvent, BidRow, EuroBidRow};
use crate::process_usage;
use crate::report::{Engine, RunFigures};
use crate::workload::Workload;

/// Name of every pipeline's sink, to read its record count back.
const SINK: &str = "sink";

/// SUM(value) and COUNT(*) per key, emitting `(key, (sum, count))` after each row, as
/// Flink's non-mini-batch group aggregation emits an update per row.
#[derive(Debug, Clone, Copy, Default)]
pub struct SumAndCount;

impl AggregateFunction<(i64, i64), (i64, i64), (i64, i64)> for SumAndCount {
    fn create_accumulator(&self) -> (i64, i64) {
        (0, 0)
    }
    fn add(&self, (_, value): (i64, i64), acc: &mut (i64, i64)) {
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

/// Builds `workload`'s pipeline over the input in `dir`.
pub fn build(env: &StreamExecutionEnvironment, workload: Workload, dir: &str) {
    match workload {
        Workload::Stateless => {
            key_values(env, dir)
                .filter(|(_, value)| value % 2 == 0)
                .map(|(key, value)| (key, value * 10))
                .sink_to(DiscardingSink, SINK);
        }
        Workload::Keyed => {
            key_values(env, dir)
                .key_by(|(key, _): &(i64, i64)| *key)
                .aggregate(SumAndCount)
                .name("sum and count")
                .sink_to(DiscardingSink, SINK);
        }
        Workload::Q0 => {
            env.from_source(
                json_lines::<BidEvent<BidRow>>(dir),
                WatermarkStrategy::no_watermarks(),
                "nexmark source",
            )
            .flat_map_iter(BidEvent::into_bid)
            .sink_to(DiscardingSink, SINK);
        }
        Workload::Q1 => {
            env.from_source(
                json_lines::<BidEvent<BidRow>>(dir),
                WatermarkStrategy::no_watermarks(),
                "nexmark source",
            )
            .flat_map_iter(BidEvent::into_bid)
            .map(EuroBidRow::from)
            .sink_to(DiscardingSink, SINK);
        }
        Workload::Q2 => {
            env.from_source(
                json_lines::<BidEvent<AuctionPrice>>(dir),
                WatermarkStrategy::no_watermarks(),
                "nexmark source",
            )
            .flat_map_iter(BidEvent::into_bid)
            .filter(|bid| q2_selects(bid.auction))
            .sink_to(DiscardingSink, SINK);
        }
    }
}

/// Runs `workload` over `dir` at `parallelism`, checkpointing every second to
/// `checkpoints` when given, and measures it. Meant to run alone in its process: the peak
/// memory is the process's.
pub fn run(
    workload: Workload,
    dir: &Path,
    parallelism: u32,
    checkpoints: Option<&Path>,
) -> Result<RunFigures, BenchError> {
    let mut config = ExecutionConfig::default().with_parallelism(parallelism);
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
    build(&env, workload, &dir.to_string_lossy());
    let before = process_usage::current();
    let result = env.execute(workload.name())?;
    let after = process_usage::current();
    let records = result
        .operators
        .first()
        .map(|source| source.records_out)
        .unwrap_or_default();
    Ok(RunFigures {
        workload,
        engine: if checkpoints.is_some() {
            Engine::Weir
        } else {
            Engine::WeirNoCheckpoints
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
    })
}
