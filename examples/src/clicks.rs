//! The event-time example job: clicks per page and minute of event time, exactly once.
//!
//! Click rows (`time_ms,user,page`, out of order by up to four seconds) are read by the file
//! source with a bounded-out-of-orderness watermark strategy, keyed by page, counted in
//! tumbling one-minute event-time windows, and written by the transactional file sink: one
//! line `page,window_start,count` per window, committed when the checkpoint covering it
//! completes. Window contents and timers are in every checkpoint, so a killed and resumed run
//! commits exactly the windows of an uninterrupted one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use weir::connectors::file_sink::{committed_files, FileSink};
use weir::connectors::file_source::{list_files, FileSource};
use weir::prelude::*;
use weir::windowing::{TimeWindow, TumblingEventTimeWindows, WindowContext};

/// One click.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Click {
    /// Event time, milliseconds.
    pub time_ms: i64,
    /// Who clicked.
    pub user: String,
    /// What.
    pub page: String,
}

/// How far out of order clicks may arrive.
pub const OUT_OF_ORDERNESS: Duration = Duration::from_secs(4);
/// The window size.
pub const WINDOW: Duration = Duration::from_secs(60);

/// Counts the clicks of a window.
#[derive(Debug, Clone, Copy, Default)]
pub struct CountClicks;

impl AggregateFunction<Click, u64, u64> for CountClicks {
    fn create_accumulator(&self) -> u64 {
        0
    }
    fn add(&self, _click: Click, count: &mut u64) {
        *count += 1;
    }
    fn get_result(&self, count: &u64) -> u64 {
        *count
    }
    fn merge(&self, a: u64, b: u64) -> u64 {
        a + b
    }
}

/// What a run needs.
#[derive(Debug, Clone)]
pub struct ClicksOptions {
    /// Directory of the click CSV files.
    pub data: PathBuf,
    /// Where committed output goes.
    pub output: PathBuf,
    /// Where checkpoints go.
    pub checkpoints: PathBuf,
    /// Parallelism.
    pub parallelism: u32,
    /// Rows per second (a throttle, so that checkpoints and kills land mid-run).
    pub rate: f64,
    /// Checkpoint interval.
    pub checkpoint_interval: Duration,
    /// Resume from the latest retained checkpoint.
    pub resume: bool,
}

impl ClicksOptions {
    /// Options reading `data`, writing under `work_dir`.
    pub fn new(data: PathBuf, work_dir: &Path) -> Self {
        Self {
            data,
            output: work_dir.join("output"),
            checkpoints: work_dir.join("checkpoints"),
            parallelism: 2,
            rate: 4_000.0,
            checkpoint_interval: Duration::from_millis(200),
            resume: false,
        }
    }
}

/// The job's name (checkpoints are kept under it).
pub const JOB_NAME: &str = "clicks per minute";

/// Builds the job.
pub fn build(options: &ClicksOptions) -> Result<StreamExecutionEnvironment> {
    let config = ExecutionConfig::default()
        .with_parallelism(options.parallelism)
        .with_checkpointing(
            CheckpointConfig::default()
                .with_interval(options.checkpoint_interval)
                .with_retained(2)
                .with_retention_on_cancel(RetentionOnCancel::Retain)
                .with_storage(CheckpointStorageConfig::directory(&options.checkpoints)),
        )
        .with_resume_from_latest_checkpoint(options.resume);
    let env = StreamExecutionEnvironment::new(config).context("invalid configuration")?;
    let strategy = WatermarkStrategy::for_bounded_out_of_orderness(OUT_OF_ORDERNESS)
        .with_timestamp_assigner(|click: &Click, _| click.time_ms);
    env.from_source(
        FileSource::<Click>::csv(format!("{}/*.csv", options.data.display()))
            .with_rate_limit(options.rate),
        strategy,
        "clicks",
    )
    .uid("clicks")
    .key_by(|click: &Click| click.page.clone())
    .window(TumblingEventTimeWindows::of(WINDOW))
    .aggregate_with(
        CountClicks,
        |page: &String,
         ctx: &WindowContext<'_, TimeWindow>,
         counts: &[u64],
         out: &mut Collector<'_, String>| {
            for count in counts {
                out.collect(format!("{page},{},{count}", ctx.window().start));
            }
            Ok(())
        },
    )
    .uid("clicks-per-minute")
    .sink_to(
        FileSink::<String>::lines(&options.output).with_suffix(".csv"),
        "committed files",
    )
    .uid("committed-files");
    Ok(env)
}

/// Reads every click of the data set.
pub fn read_clicks(data: &Path) -> Result<Vec<Click>> {
    let mut clicks = Vec::new();
    for file in list_files(format!("{}/*.csv", data.display()))? {
        let mut reader = csv::Reader::from_path(&file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        for row in reader.deserialize() {
            clicks.push(row.with_context(|| format!("bad row in {}", file.display()))?);
        }
    }
    Ok(clicks)
}

/// The job's exact result, computed in one pass: `page,window_start,count` per window.
pub fn expected(data: &Path) -> Result<BTreeMap<String, usize>> {
    let size = i64::try_from(WINDOW.as_millis())?;
    let mut counts: BTreeMap<(String, i64), u64> = BTreeMap::new();
    for click in read_clicks(data)? {
        *counts
            .entry((click.page, click.time_ms.div_euclid(size) * size))
            .or_insert(0) += 1;
    }
    let mut lines = BTreeMap::new();
    for ((page, start), count) in counts {
        *lines.entry(format!("{page},{start},{count}")).or_insert(0) += 1;
    }
    Ok(lines)
}

/// Checks the committed output against [`expected`]: every window exactly once.
pub fn verify(output: &Path, data: &Path) -> Result<usize> {
    let mut got: BTreeMap<String, usize> = BTreeMap::new();
    for file in committed_files(output)? {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        for line in text.lines() {
            *got.entry(line.to_string()).or_insert(0) += 1;
        }
    }
    let expected = expected(data)?;
    if got != expected {
        let missing: Vec<_> = expected
            .keys()
            .filter(|k| !got.contains_key(*k))
            .take(5)
            .collect();
        let extra: Vec<_> = got
            .iter()
            .filter(|(k, n)| expected.get(*k) != Some(n))
            .take(5)
            .collect();
        bail!(
            "committed windows differ from an uninterrupted run: {} expected, {} committed; \
             missing e.g. {missing:?}; extra or repeated e.g. {extra:?}",
            expected.values().sum::<usize>(),
            got.values().sum::<usize>()
        );
    }
    Ok(expected.len())
}
