//! The reference pipeline into PostgreSQL — generated words → key_by → running count →
//! table — shared by the `weir-pg-count` command, the process-kill tests and the benchmark,
//! and the checks of what the table holds.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use weir::connectors::generator::GeneratorSource;
use weir::connectors::held_end::HeldEnd;
use weir::WatermarkStrategy;
use weir::{
    CheckpointConfig, CheckpointStorageConfig, ExecutionConfig, RestartStrategyConfig,
    RetentionOnCancel, StreamExecutionEnvironment,
};

use crate::connection::PostgresConnection;
use crate::error::PostgresError;
use crate::settings::{BeforeCommitHook, PostgresSink};

/// A row of the output: a word and its count so far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WordCount {
    /// The word.
    pub word: String,
    /// Its count so far.
    pub count: i64,
}

/// How the counts reach the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Exactly-once, every running count appended as a row (duplicates would show).
    ExactlyOnceAppend,
    /// Exactly-once, upserted by word.
    ExactlyOnceUpsert,
    /// At-least-once upserts by word.
    Upsert,
}

impl std::str::FromStr for Delivery {
    type Err = PostgresError;
    fn from_str(s: &str) -> Result<Self, PostgresError> {
        match s {
            "exactly-once-append" => Ok(Self::ExactlyOnceAppend),
            "exactly-once-upsert" => Ok(Self::ExactlyOnceUpsert),
            "upsert" => Ok(Self::Upsert),
            other => Err(PostgresError::Config(format!(
                "unknown delivery `{other}` (exactly-once-append, exactly-once-upsert, upsert)"
            ))),
        }
    }
}

/// How to run the pipeline.
#[derive(Clone)]
pub struct WordCountOptions {
    /// Connection string.
    pub url: String,
    /// Output table.
    pub table: String,
    /// Delivery.
    pub delivery: Delivery,
    /// Prepared transaction id prefix.
    pub prefix: String,
    /// Words to generate.
    pub records: u64,
    /// Distinct words.
    pub words: u64,
    /// Words per second over all subtasks.
    pub rate: Option<f64>,
    /// Parallelism.
    pub parallelism: u32,
    /// Checkpoint interval.
    pub checkpoint_interval: Duration,
    /// Checkpoint directory (`None`: in memory).
    pub checkpoint_dir: Option<PathBuf>,
    /// Resume from the latest retained checkpoint.
    pub resume: bool,
    /// Rows per statement.
    pub batch_size: usize,
    /// Called right before each `COMMIT PREPARED`.
    pub before_commit: Option<BeforeCommitHook>,
    /// Called right before each `PREPARE TRANSACTION`.
    pub before_prepare: Option<BeforeCommitHook>,
    /// Fails the job once after this many words (in-process fault injection).
    pub fail_after: Option<u64>,
    /// `application_name` of the sink's sessions.
    pub application_name: String,
    /// A second copy of every checkpoint file here (task-local recovery).
    pub local_recovery: Option<PathBuf>,
    /// Hold the end of the input until a file exists here: every record is read, but the
    /// job does not finish before (for tests that must kill or stop a running job).
    pub hold_end_until: Option<PathBuf>,
}

impl WordCountOptions {
    /// Defaults: exactly-once append, 20 000 words over 300 distinct ones, parallelism 2,
    /// checkpoints every 200 ms in memory.
    pub fn new(url: &str, table: &str) -> Self {
        Self {
            url: url.into(),
            table: table.into(),
            delivery: Delivery::ExactlyOnceAppend,
            prefix: format!("weir-count-{table}"),
            records: 20_000,
            words: 300,
            rate: None,
            parallelism: 2,
            checkpoint_interval: Duration::from_millis(200),
            checkpoint_dir: None,
            resume: false,
            batch_size: 1000,
            before_commit: None,
            before_prepare: None,
            fail_after: None,
            application_name: "weir-sink".into(),
            local_recovery: None,
            hold_end_until: None,
        }
    }
}

/// The job's name (and its checkpoint directory's).
pub const JOB_NAME: &str = "pg-word-count";

/// Word `i` of a deterministic input of `words` distinct words.
pub fn word(i: u64, words: u64) -> String {
    let w = (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) % words.max(1);
    format!("w{w}")
}

/// Each word's frequency in the first `records` words.
pub fn expected_totals(records: u64, words: u64) -> HashMap<String, i64> {
    let mut totals = HashMap::new();
    for i in 0..records {
        *totals.entry(word(i, words)).or_default() += 1;
    }
    totals
}

/// Creates the output table unless it exists: `(word, count)` rows, keyed by word for
/// upserts.
pub fn create_table(url: &str, table: &str, keyed: bool) -> Result<(), PostgresError> {
    let mut client = PostgresConnection::new(url)?.connect("weir-setup")?;
    let key = if keyed { " PRIMARY KEY" } else { "" };
    let quoted = quoted_table(table);
    client
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {quoted} (word text NOT NULL{key}, count bigint NOT NULL CHECK (count > 0))"
        ))
        .map_err(|e| PostgresError::database(format!("creating table {table}"), table, e))
}

/// `table` (optionally `schema.table`) quoted the way the sink quotes it.
fn quoted_table(table: &str) -> String {
    crate::statements::TableSpec {
        table: table.to_string(),
        columns: Vec::new(),
        key_columns: Vec::new(),
    }
    .quoted_table()
}

/// The table's rows.
pub fn table_rows(url: &str, table: &str) -> Result<Vec<WordCount>, PostgresError> {
    let mut client = PostgresConnection::new(url)?.connect("weir-check")?;
    let quoted = quoted_table(table);
    let rows = client
        .query(&format!("SELECT word, count FROM {quoted}"), &[])
        .map_err(|e| PostgresError::database(format!("reading {table}"), table, e))?;
    Ok(rows
        .iter()
        .map(|r| WordCount {
            word: r.get(0),
            count: r.get(1),
        })
        .collect())
}

/// Checks an append table: every `(word, i)` for `i` in `1..=n(word)` exactly once, nothing
/// else.
pub fn verify_running_counts(
    rows: &[WordCount],
    expected: &HashMap<String, i64>,
) -> Result<(), String> {
    let mut seen: BTreeMap<(&str, i64), usize> = BTreeMap::new();
    for r in rows {
        *seen.entry((r.word.as_str(), r.count)).or_default() += 1;
    }
    let mut problems = Vec::new();
    for (word, n) in expected {
        for i in 1..=*n {
            match seen.get(&(word.as_str(), i)).copied().unwrap_or(0) {
                1 => {}
                0 => problems.push(format!("missing ({word}, {i})")),
                k => problems.push(format!("({word}, {i}) appears {k} times")),
            }
        }
    }
    for (word, count) in seen.keys() {
        if expected.get(*word).is_none_or(|n| *count < 1 || count > n) {
            problems.push(format!("unexpected ({word}, {count})"));
        }
    }
    report(problems)
}

/// Checks a keyed table: one row per word, holding its total.
pub fn verify_totals(rows: &[WordCount], expected: &HashMap<String, i64>) -> Result<(), String> {
    let mut problems = Vec::new();
    let got: HashMap<&str, i64> = rows.iter().map(|r| (r.word.as_str(), r.count)).collect();
    if got.len() != rows.len() {
        problems.push("a word has several rows".to_string());
    }
    for (word, n) in expected {
        match got.get(word.as_str()) {
            Some(c) if c == n => {}
            Some(c) => problems.push(format!("{word}: {c} instead of {n}")),
            None => problems.push(format!("{word}: missing")),
        }
    }
    for word in got.keys() {
        if !expected.contains_key(*word) {
            problems.push(format!("unexpected word {word}"));
        }
    }
    report(problems)
}

fn report(mut problems: Vec<String>) -> Result<(), String> {
    if problems.is_empty() {
        return Ok(());
    }
    let total = problems.len();
    problems.truncate(10);
    Err(format!("{total} problems, first: {}", problems.join("; ")))
}

/// Builds the pipeline in a new environment.
pub fn build(options: &WordCountOptions) -> Result<StreamExecutionEnvironment, PostgresError> {
    let storage = CheckpointStorageConfig::directory_or_memory(options.checkpoint_dir.clone());
    let mut checkpointing = CheckpointConfig::default()
        .with_interval(options.checkpoint_interval)
        .with_retained(2)
        .with_retention_on_cancel(RetentionOnCancel::Retain)
        .with_storage(storage);
    if let Some(dir) = &options.local_recovery {
        checkpointing = checkpointing.with_local_recovery(dir);
    }
    let config = ExecutionConfig::default()
        .with_parallelism(options.parallelism)
        .with_checkpointing(checkpointing)
        .with_restart_strategy(RestartStrategyConfig::FixedDelay {
            attempts: 5,
            delay: Duration::from_millis(200),
        })
        .with_resume_from_latest_checkpoint(options.resume);
    let env = StreamExecutionEnvironment::new(config)
        .map_err(|e| PostgresError::Config(e.to_string()))?;
    let words = options.words;
    let mut source = GeneratorSource::new(options.records, move |i| word(i, words));
    if let Some(rate) = options.rate {
        source = source.with_rate_limit(rate);
    }
    let fail_after = options.fail_after;
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let failed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hold = options.hold_end_until.clone();
    let source = HeldEnd::new(source, move || {
        hold.as_ref().is_none_or(|path| path.exists())
    });
    let counts = env
        .from_source(source, WatermarkStrategy::no_watermarks(), "words")
        .uid("generated-words")
        .map(move |w: String| {
            use std::sync::atomic::Ordering;
            let n = seen.fetch_add(1, Ordering::SeqCst) + 1;
            if fail_after == Some(n) && !failed.swap(true, Ordering::SeqCst) {
                panic!("injected failure after {n} words");
            }
            w
        })
        .name("fault injector")
        .key_by(|w: &String| w.clone())
        .count()
        .name("count per word")
        .uid("count-per-word")
        .map(|(word, count): (String, u64)| WordCount {
            word,
            count: i64::try_from(count).unwrap_or(i64::MAX),
        });
    let mut builder = PostgresSink::builder(&options.url, &options.table)
        .columns(["word", "count"])
        .batch_size(options.batch_size)
        .application_name(options.application_name.clone());
    if options.delivery != Delivery::ExactlyOnceAppend {
        builder = builder.key_columns(["word"]);
    }
    if let Some(hook) = options.before_commit.clone() {
        builder = builder.before_commit(move |gid| hook(gid));
    }
    if let Some(hook) = options.before_prepare.clone() {
        builder = builder.before_prepare(move |gid| hook(gid));
    }
    match options.delivery {
        Delivery::Upsert => {
            counts
                .sink_to(builder.upsert()?, "postgres")
                .uid("postgres");
        }
        Delivery::ExactlyOnceAppend | Delivery::ExactlyOnceUpsert => {
            counts
                .sink_to(builder.exactly_once(&options.prefix)?, "postgres")
                .uid("postgres");
        }
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(items: &[(&str, i64)]) -> Vec<WordCount> {
        items
            .iter()
            .map(|(w, c)| WordCount {
                word: w.to_string(),
                count: *c,
            })
            .collect()
    }

    #[test]
    fn running_counts_must_be_exact() {
        let expected: HashMap<String, i64> = [("a".to_string(), 2)].into();
        assert_eq!(
            verify_running_counts(&rows(&[("a", 1), ("a", 2)]), &expected),
            Ok(())
        );
        assert!(verify_running_counts(&rows(&[("a", 1)]), &expected)
            .unwrap_err()
            .contains("missing (a, 2)"));
        assert!(
            verify_running_counts(&rows(&[("a", 1), ("a", 2), ("a", 2)]), &expected)
                .unwrap_err()
                .contains("appears 2 times")
        );
        assert!(verify_totals(&rows(&[("a", 3)]), &expected)
            .unwrap_err()
            .contains("3 instead of 2"));
        assert_eq!(verify_totals(&rows(&[("a", 2)]), &expected), Ok(()));
    }
}
