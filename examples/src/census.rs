//! The census job: average working hours per education and income class, exactly once.
//!
//! Census-style CSV rows are read by the file source, keyed by (education, income class),
//! aggregated with keyed `AggregatingState` (count and total hours), and written by the
//! transactional file sink: one line `education,income,count,total_hours` per input row — a
//! running aggregate — committed only when the checkpoint covering it completes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use weir::connectors::file_sink::{committed_files, FileSink, FileSinkCore, FileTransaction};
use weir::connectors::file_source::{list_files, FileSource};
use weir::connectors::held_end::HeldEnd;
use weir::connectors::malformed::{MalformedRecord, RecordOrigin};
use weir::connectors::two_phase_commit::{TwoPhaseCommit, TwoPhaseCommitSink};
use weir::connectors::write_ahead_log::{
    BatchCommitter, BatchId, FileBatchCommitter, WriteAheadLog,
};
use weir::WatermarkStrategy;
use weir::{
    AggregateFunction, AggregatingState, BoxError, CheckpointConfig, CheckpointStorageConfig,
    Collector, CorruptCheckpointPolicy, ExecutionConfig, JobExecutionResult, KeyedContext,
    KeyedProcessFunction, RestartStrategyConfig, RetentionOnCancel, RuntimeContext,
    StreamExecutionEnvironment,
};

/// One row of the data set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CensusRow {
    /// Age in years.
    pub age: u32,
    /// Employer kind.
    pub workclass: String,
    /// Highest education.
    pub education: String,
    /// Occupation.
    pub occupation: String,
    /// Usual weekly working hours.
    pub hours_per_week: u32,
    /// Income class, `<=50K` or `>50K`.
    pub income: String,
}

/// Count and total hours.
#[derive(Debug, Clone, Copy, Default)]
pub struct HoursAggregate;

impl AggregateFunction<u32, (u64, u64), (u64, u64)> for HoursAggregate {
    fn create_accumulator(&self) -> (u64, u64) {
        (0, 0)
    }
    fn add(&self, hours: u32, acc: &mut (u64, u64)) {
        acc.0 += 1;
        acc.1 += u64::from(hours);
    }
    fn get_result(&self, acc: &(u64, u64)) -> (u64, u64) {
        *acc
    }
    fn merge(&self, a: (u64, u64), b: (u64, u64)) -> (u64, u64) {
        (a.0 + b.0, a.1 + b.1)
    }
}

/// Emits `education,income,count,total_hours` for each row, from keyed aggregating state.
#[derive(Clone)]
pub struct HoursByClass {
    totals: AggregatingState<u32, (u64, u64), (u64, u64), HoursAggregate>,
    /// Panic on every row of this occupation (a poison record, for tests).
    poison: Option<String>,
}

impl Default for HoursByClass {
    fn default() -> Self {
        Self {
            totals: AggregatingState::new("hours", HoursAggregate),
            poison: None,
        }
    }
}

type ClassKey = (String, String);

impl KeyedProcessFunction<ClassKey, CensusRow, String> for HoursByClass {
    fn process_element(
        &mut self,
        row: CensusRow,
        ctx: &mut KeyedContext<'_, ClassKey>,
        out: &mut Collector<'_, String>,
    ) -> Result<(), BoxError> {
        if self.poison.as_ref() == Some(&row.occupation) {
            panic!("poison record: occupation {}", row.occupation);
        }
        self.totals.add(ctx, row.hours_per_week)?;
        let (count, hours) = self.totals.get(ctx)?.unwrap_or((0, 0));
        let (education, income) = ctx.current_key();
        out.collect(format!("{education},{income},{count},{hours}"));
        Ok(())
    }
}

/// A file sink that can pause before each commit, to let process-kill tests land in the
/// window between a checkpoint's completion and its commit.
#[derive(Clone)]
pub struct SlowCommitFileSink {
    inner: FileSinkCore<String>,
    delay: Duration,
}

impl TwoPhaseCommitSink<String> for SlowCommitFileSink {
    type Transaction = FileTransaction;
    fn find_committed_output(
        &mut self,
        context: &RuntimeContext,
    ) -> Result<Option<String>, BoxError> {
        self.inner.find_committed_output(context)
    }
    fn abort_lingering(
        &mut self,
        context: &RuntimeContext,
        known: &[FileTransaction],
    ) -> Result<(), BoxError> {
        self.inner.abort_lingering(context, known)
    }
    fn begin_transaction(&mut self, context: &RuntimeContext) -> Result<FileTransaction, BoxError> {
        self.inner.begin_transaction(context)
    }
    fn write(&mut self, transaction: &mut FileTransaction, record: String) -> Result<(), BoxError> {
        self.inner.write(transaction, record)
    }
    fn pre_commit(&mut self, transaction: &mut FileTransaction) -> Result<(), BoxError> {
        self.inner.pre_commit(transaction)
    }
    fn commit(&mut self, transaction: &FileTransaction) -> Result<(), BoxError> {
        if !transaction.parts.is_empty() && !self.delay.is_zero() {
            eprintln!("census: committing transaction {}", transaction.token);
            std::thread::sleep(self.delay);
        }
        self.inner.commit(transaction)
    }
    fn abort(&mut self, transaction: &FileTransaction) -> Result<(), BoxError> {
        self.inner.abort(transaction)
    }
}

/// Which exactly-once sink the job writes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkKind {
    /// The two-phase-commit file sink.
    TwoPhaseCommit,
    /// The write-ahead-log sink committing one file per checkpoint.
    WriteAheadLog,
}

/// A batch committer that can pause before each batch (for process-kill tests).
#[derive(Clone)]
pub struct SlowBatchCommitter {
    inner: FileBatchCommitter<String>,
    delay: Duration,
}

impl BatchCommitter<String> for SlowBatchCommitter {
    fn open(&mut self, context: &RuntimeContext) -> Result<(), BoxError> {
        self.inner.open(context)
    }
    fn close(&mut self) -> Result<(), BoxError> {
        self.inner.close()
    }
    fn find_committed_output(&mut self) -> Result<Option<String>, BoxError> {
        self.inner.find_committed_output()
    }
    fn commit_batch(&mut self, id: BatchId, records: &[String]) -> Result<(), BoxError> {
        if !self.delay.is_zero() {
            eprintln!(
                "census: committing batch {}/{}",
                id.subtask, id.checkpoint_id
            );
            std::thread::sleep(self.delay);
        }
        self.inner.commit_batch(id, records)
    }
}

/// How to run the census job.
#[derive(Debug, Clone)]
pub struct CensusOptions {
    /// The sink.
    pub sink: SinkKind,
    /// Directory of the CSV files.
    pub data: PathBuf,
    /// Output directory of the file sink.
    pub output: PathBuf,
    /// Checkpoint directory.
    pub checkpoints: PathBuf,
    /// Checkpoint storage at a URL (`s3://bucket/prefix`, …) instead of the directory.
    pub checkpoint_storage: Option<String>,
    /// Parallelism.
    pub parallelism: u32,
    /// Rows per second read (all files together).
    pub rate: f64,
    /// Fail once when this many rows have been read (`None`: no injected failure).
    pub fail_after_rows: Option<u64>,
    /// Resume from the latest retained checkpoint (after a crash of the process).
    pub resume: bool,
    /// Pause before each commit (for process-kill tests).
    pub commit_delay: Option<Duration>,
    /// Checkpoint interval.
    pub checkpoint_interval: Duration,
    /// Keep a second copy of every checkpoint file here (task-local recovery).
    pub local_recovery: Option<PathBuf>,
    /// Let recovery fall back past committed output (duplicating it) when the checkpoint
    /// it must restore is unusable.
    pub allow_duplicates: bool,
    /// Stop with a savepoint once this many rows were read in this run.
    pub stop_after_rows: Option<u64>,
    /// Unaligned checkpoints (`execution.checkpointing.unaligned.enabled`).
    pub unaligned: bool,
    /// A pause after every aggregated row (backpressure, for tests of checkpoints with
    /// records in flight).
    pub slow_aggregation: Option<Duration>,
    /// Pass rows that cannot be decoded on as dead letters, committed exactly once as JSON
    /// lines into this directory by a transactional file sink of their own (by default such a
    /// row fails the job).
    pub dead_letters: Option<PathBuf>,
    /// Panic on every row of this occupation, after the shuffle (a poison record, for tests
    /// of the restart strategy giving up and naming it).
    pub poison_occupation: Option<String>,
    /// Hold the end of the input until a file exists here: every row is read, but the job
    /// does not finish before (for tests that must kill or stop a running job).
    pub hold_end_until: Option<PathBuf>,
}

impl CensusOptions {
    /// Defaults: the shipped data, outputs under `target/`, 2 subtasks, one failure midway.
    pub fn new(data: PathBuf, work_dir: &Path) -> Self {
        Self {
            sink: SinkKind::TwoPhaseCommit,
            data,
            output: work_dir.join("output"),
            checkpoints: work_dir.join("checkpoints"),
            checkpoint_storage: None,
            parallelism: 2,
            rate: 8_000.0,
            fail_after_rows: Some(10_000),
            resume: false,
            commit_delay: None,
            checkpoint_interval: Duration::from_secs(1),
            local_recovery: Some(work_dir.join("local-recovery")),
            allow_duplicates: false,
            stop_after_rows: None,
            unaligned: false,
            slow_aggregation: None,
            dead_letters: None,
            poison_occupation: None,
            hold_end_until: None,
        }
    }
}

/// The CSV files of the data directory.
pub fn csv_glob(data: &Path) -> String {
    format!("{}/*.csv", data.display())
}

/// The job's name (and its checkpoint directory's).
pub const JOB_NAME: &str = "census";

/// Builds the census job in an environment configured from `options`.
pub fn build(options: &CensusOptions) -> Result<StreamExecutionEnvironment> {
    Ok(build_with_progress(options)?.0)
}

/// Builds the census job and returns, with its environment, the count of rows it has read
/// in this run so far.
pub fn build_with_progress(
    options: &CensusOptions,
) -> Result<(StreamExecutionEnvironment, Arc<AtomicU64>)> {
    let mut checkpointing = CheckpointConfig::default()
        .with_interval(options.checkpoint_interval)
        .with_unaligned(options.unaligned)
        .with_retained(2)
        .with_retention_on_cancel(RetentionOnCancel::Retain)
        .with_storage(match &options.checkpoint_storage {
            Some(url) => CheckpointStorageConfig::from_url(url),
            None => CheckpointStorageConfig::FileSystem(options.checkpoints.clone()),
        });
    if let Some(dir) = &options.local_recovery {
        checkpointing = checkpointing.with_local_recovery(dir);
    }
    if options.allow_duplicates {
        checkpointing =
            checkpointing.with_corrupt_checkpoint_policy(CorruptCheckpointPolicy::AllowDuplicates);
    }
    let config = ExecutionConfig::default()
        .with_parallelism(options.parallelism)
        .with_checkpointing(checkpointing)
        .with_restart_strategy(RestartStrategyConfig::FixedDelay {
            attempts: 3,
            delay: Duration::from_millis(200),
        })
        .with_resume_from_latest_checkpoint(options.resume);
    let env = StreamExecutionEnvironment::new(config).context("invalid configuration")?;
    let rows_read = Arc::new(AtomicU64::new(0));
    let progress = rows_read.clone();
    let failed = Arc::new(AtomicBool::new(false));
    let fail_after = options.fail_after_rows;
    let delay = options.commit_delay.unwrap_or(Duration::ZERO);
    let source =
        FileSource::<CensusRow>::csv(csv_glob(&options.data)).with_rate_limit(options.rate);
    // The end of the input waits for the file, if one is named (tests that must kill a
    // running job): every row is read, but the job does not finish before it exists.
    let hold = options.hold_end_until.clone();
    let release = move || hold.as_ref().is_none_or(|path| path.exists());
    let rows = match &options.dead_letters {
        None => env
            .from_source(
                HeldEnd::new(source, release),
                WatermarkStrategy::no_watermarks(),
                "census rows",
            )
            .uid("census-rows"),
        Some(dir) => {
            let (rows, dead_letters) = env
                .from_source(
                    HeldEnd::new(source.with_dead_letters(), release),
                    WatermarkStrategy::no_watermarks(),
                    "census rows",
                )
                .uid("census-rows")
                .split_dead_letters();
            dead_letters
                .sink_to(FileSink::json_lines(dir), "dead letters")
                .uid("dead-letters");
            rows.uid("split-dead-letters")
        }
    };
    let stream = rows
        .map(move |row: CensusRow| {
            let n = rows_read.fetch_add(1, Ordering::SeqCst) + 1;
            if fail_after == Some(n) && !failed.swap(true, Ordering::SeqCst) {
                panic!("injected failure after {n} rows, to show recovery");
            }
            row
        })
        .name("fault injector")
        .key_by(|row: &CensusRow| (row.education.clone(), row.income.clone()))
        .process(HoursByClass {
            poison: options.poison_occupation.clone(),
            ..HoursByClass::default()
        })
        .name("hours by class")
        .uid("hours-by-class");
    let stream = match options.slow_aggregation {
        Some(pause) => stream
            .map(move |line: String| {
                std::thread::sleep(pause);
                line
            })
            .name("slow aggregation")
            .uid("slow-aggregation"),
        None => stream,
    };
    match options.sink {
        SinkKind::TwoPhaseCommit => {
            let TwoPhaseCommit(inner) = FileSink::<String>::lines(&options.output)
                .with_suffix(".csv")
                .into_two_phase_commit_sink();
            stream
                .sink_to(
                    TwoPhaseCommit(SlowCommitFileSink { inner, delay }),
                    "committed files",
                )
                .uid("committed-files");
        }
        SinkKind::WriteAheadLog => {
            let inner = FileBatchCommitter::<String>::lines(&options.output).with_suffix(".csv");
            stream
                .sink_to(
                    WriteAheadLog(SlowBatchCommitter { inner, delay }),
                    "write-ahead log",
                )
                .uid("write-ahead-log");
        }
    }
    Ok((env, progress))
}

/// The in-flight records (unaligned checkpoints' channel state) that the census job's
/// checkpoints retained under `checkpoints` hold, in stored chunks: what the kill tests
/// check to know that they killed after checkpoints with records in flight.
pub fn in_flight_chunks(checkpoints: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(checkpoints.join(JOB_NAME)) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read(e.path().join("_metadata")).ok())
        .filter_map(|bytes| weir::checkpoint::metadata::CheckpointMetadata::decode(&bytes).ok())
        .flat_map(|m| m.operators)
        .flat_map(|o| o.subtasks)
        .flat_map(|s| s.lists)
        .filter(|l| weir::runtime::channel_state::is_channel_state(&l.name))
        .map(|l| l.items.len())
        .sum()
}

/// Runs the job to its end, or until it is stopped with a savepoint after
/// `options.stop_after_rows` rows.
pub fn run(options: &CensusOptions) -> Result<JobExecutionResult> {
    let (env, rows_read) = build_with_progress(options)?;
    execute(&env, options, &rows_read)
}

/// Executes a built census job: to its end, or — with `stop_after_rows` — until that many
/// rows were read, when it is stopped with a savepoint (its path is in the result).
pub fn execute(
    env: &StreamExecutionEnvironment,
    options: &CensusOptions,
    rows_read: &AtomicU64,
) -> Result<JobExecutionResult> {
    let Some(stop_after) = options.stop_after_rows else {
        return Ok(env.execute(JOB_NAME)?);
    };
    let client = env.execute_async(JOB_NAME)?;
    while rows_read.load(Ordering::SeqCst) < stop_after {
        if client.is_finished() {
            return Ok(client.wait()?);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let (_, result) = client.stop_with_savepoint()?;
    Ok(result)
}

/// What a sequential read of the CSV files gives: count and total hours per class, and the
/// rows that cannot be decoded as a [`CensusRow`].
#[derive(Debug, Clone, Default)]
pub struct ExpectedOutput {
    /// Count and total hours per class, over the rows that decode.
    pub totals: BTreeMap<ClassKey, (u64, u64)>,
    /// The rows that do not decode, as (file name, 1-based line).
    pub malformed: BTreeSet<(String, u64)>,
}

/// Reads the CSV files sequentially (with the csv crate, not Weir's reader).
pub fn expected_output(data: &Path) -> Result<ExpectedOutput> {
    let mut expected = ExpectedOutput::default();
    let files = list_files(csv_glob(data))?;
    if files.is_empty() {
        anyhow::bail!("no census files match `{}`", csv_glob(data));
    }
    for file in files {
        // Flexible, so that a row with a field too many or too few is a malformed row, as in
        // Weir's reader, rather than an error of the whole file.
        let mut reader = csv::ReaderBuilder::new()
            .flexible(true)
            .from_path(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        let headers = reader.headers()?.clone();
        for record in reader.records() {
            let record = record.with_context(|| format!("reading {}", file.display()))?;
            // A row of another length than the header's is malformed (the file source's
            // default, which serde's by-name decoding alone would not enforce).
            let decoded = match record.len() == headers.len() {
                true => record.deserialize::<CensusRow>(Some(&headers)).ok(),
                false => None,
            };
            match decoded {
                Some(row) => {
                    let t = expected
                        .totals
                        .entry((row.education, row.income))
                        .or_default();
                    t.0 += 1;
                    t.1 += u64::from(row.hours_per_week);
                }
                None => {
                    let line = record.position().map_or(0, |p| p.line());
                    expected.malformed.insert((file_name(&file), line));
                }
            }
        }
    }
    Ok(expected)
}

/// Count and total hours per class, computed sequentially from the CSV files.
pub fn expected_totals(data: &Path) -> Result<BTreeMap<ClassKey, (u64, u64)>> {
    Ok(expected_output(data)?.totals)
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Reads the dead letters committed as JSON lines under `dir` and checks that they are
/// exactly the rows of `data` that do not decode, each once. Returns how many there are.
pub fn verify_dead_letters(dir: &Path, data: &Path) -> Result<u64> {
    let expected = expected_output(data)?.malformed;
    let mut seen: BTreeMap<(String, u64), u64> = BTreeMap::new();
    for file in committed_files(dir).with_context(|| format!("listing {}", dir.display()))? {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        for line in text.lines() {
            let letter: MalformedRecord = serde_json::from_str(line)
                .with_context(|| format!("{}: not a dead letter: {line:?}", file.display()))?;
            let RecordOrigin::File { file: origin, line } = &letter.origin else {
                bail!(
                    "{}: dead letter from outside a file: {letter}",
                    file.display()
                );
            };
            *seen
                .entry((file_name(Path::new(origin)), *line))
                .or_default() += 1;
        }
    }
    let duplicated: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    if !duplicated.is_empty() {
        bail!("dead letters committed more than once (position, times): {duplicated:?}");
    }
    let committed: BTreeSet<(String, u64)> = seen.into_keys().collect();
    if committed != expected {
        let lost: Vec<_> = expected.difference(&committed).collect();
        let extra: Vec<_> = committed.difference(&expected).collect();
        bail!("dead letters differ from the rows that do not decode: lost {lost:?}, unexpected {extra:?}");
    }
    Ok(committed.len() as u64)
}

/// What the committed output holds, checked against a sequential computation.
#[derive(Debug, Clone)]
pub struct Verification {
    /// Committed lines (one per input row when exactly once).
    pub committed_lines: u64,
    /// Input rows that decode (malformed ones are not counted).
    pub input_rows: u64,
    /// Final count and total hours per class, from the committed output.
    pub finals: BTreeMap<ClassKey, (u64, u64)>,
}

/// Reads the committed output and checks that it is exactly what an uninterrupted run gives:
/// one line per input row; per class, running counts 1..=n each exactly once; and final
/// counts and total hours equal to a sequential computation.
pub fn verify(output: &Path, data: &Path) -> Result<Verification> {
    let expected = expected_totals(data)?;
    let mut counts: BTreeMap<ClassKey, Vec<u64>> = BTreeMap::new();
    let mut finals: BTreeMap<ClassKey, (u64, u64)> = BTreeMap::new();
    let mut lines = 0u64;
    for file in committed_files(output).with_context(|| format!("listing {}", output.display()))? {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        for line in text.lines() {
            lines += 1;
            let fields: Vec<&str> = line.split(',').collect();
            let [education, income, count, hours] = fields[..] else {
                bail!("{}: malformed output line {line:?}", file.display());
            };
            let key = (education.to_string(), income.to_string());
            let (count, hours): (u64, u64) = (count.parse()?, hours.parse()?);
            counts.entry(key.clone()).or_default().push(count);
            let f = finals.entry(key).or_default();
            if count > f.0 {
                *f = (count, hours);
            }
        }
    }
    let input_rows: u64 = expected.values().map(|t| t.0).sum();
    for (key, seen) in &mut counts {
        seen.sort_unstable();
        let n = expected.get(key).map_or(0, |t| t.0);
        if *seen != (1..=n).collect::<Vec<_>>() {
            let distinct: BTreeSet<u64> = seen.iter().copied().collect();
            bail!(
                "class {key:?}: {} updates committed for {n} rows ({} distinct): records were lost or duplicated",
                seen.len(),
                distinct.len()
            );
        }
    }
    if finals != expected {
        bail!("final totals differ from a sequential computation: got {finals:?}, expected {expected:?}");
    }
    if lines != input_rows {
        bail!("{lines} lines committed for {input_rows} input rows");
    }
    Ok(Verification {
        committed_lines: lines,
        input_rows,
        finals,
    })
}
