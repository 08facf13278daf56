//! The file source (Flink's `FileSource`): one file, a directory or a glob, read as lines or
//! CSV rows decoded into user types. Each file is a split whose position is the byte offset
//! and line number of the next record, so a restore replays exactly the records after the
//! checkpoint. Optionally the paths are watched and new files picked up.

use std::collections::{BTreeSet, VecDeque};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::connectors::file_reader::{FileReader, RawRecord, RecordLocation};
use crate::connectors::source::{
    Boundedness, Source, SourceReaderContext, SourceSplit, SplitEnumerator, SplitEnumeratorContext,
};
use crate::error::BoxError;
use crate::record::Record;

/// How a file's bytes become records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileFormat {
    /// One record per line (`\n`, a trailing `\r` is dropped).
    Lines,
    /// CSV rows.
    Csv {
        /// Whether the first row names the columns (rows are then decoded by column name).
        has_header: bool,
        /// Field delimiter.
        delimiter: u8,
    },
}

/// What to do with a row that cannot be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MalformedPolicy {
    /// Fail the job with the file, line and reason.
    Fail,
    /// Skip the row, count it and log it.
    Skip,
}

/// A row that could not be decoded: where it is and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MalformedRecord {
    /// The file.
    pub file: String,
    /// Its 1-based line number.
    pub line: u64,
    /// Why decoding failed.
    pub reason: String,
    /// The raw row (lossily decoded as UTF-8).
    pub raw: String,
}

impl std::fmt::Display for MalformedRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: {} (row: {:?})",
            self.file, self.line, self.reason, self.raw
        )
    }
}

/// One file and how far it has been read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSplit {
    /// The file.
    pub path: String,
    /// Byte offset of the next record.
    pub offset: u64,
    /// 1-based line number of the next record.
    pub line: u64,
}

impl SourceSplit for FileSplit {
    fn split_id(&self) -> String {
        self.path.clone()
    }
}

/// Decodes a raw record found at a location into `T`, or says why it cannot.
pub type Decoder<T> =
    Arc<dyn Fn(RawRecord<'_>, &RecordLocation<'_>) -> Result<T, String> + Send + Sync>;

/// Reads files as records of type `T`.
///
/// ```no_run
/// use weir::connectors::file_source::FileSource;
/// #[derive(serde::Deserialize, serde::Serialize, Clone)]
/// struct Row { age: u32, education: String }
/// let rows = FileSource::<Row>::csv("data/census/*.csv");
/// let lines = FileSource::lines("logs/").monitor(std::time::Duration::from_secs(1));
/// # let _ = (rows, lines);
/// ```
pub struct FileSource<T> {
    path: String,
    format: FileFormat,
    policy: MalformedPolicy,
    monitor: Option<Duration>,
    records_per_second: Option<f64>,
    decoder: Decoder<T>,
    _record: PhantomData<fn() -> T>,
}

impl<T> Clone for FileSource<T> {
    fn clone(&self) -> Self {
        Self {
            path: self.path.clone(),
            format: self.format.clone(),
            policy: self.policy,
            monitor: self.monitor,
            records_per_second: self.records_per_second,
            decoder: self.decoder.clone(),
            _record: PhantomData,
        }
    }
}

fn decode_csv<T: DeserializeOwned>(
    raw: RawRecord<'_>,
    _location: &RecordLocation<'_>,
) -> Result<T, String> {
    match raw {
        RawRecord::Csv { record, headers } => {
            crate::connectors::csv_fields::decode_record(record, headers).map_err(|e| e.to_string())
        }
        RawRecord::Line(_) => Err("a CSV decoder was given a line".into()),
    }
}

impl FileSource<String> {
    /// Reads the lines of `path` (a file, a directory, or a glob such as `logs/*.txt`).
    pub fn lines(path: impl Into<String>) -> Self {
        Self::with_decoder(
            path,
            FileFormat::Lines,
            Arc::new(|raw, _| match raw {
                RawRecord::Line(bytes) => {
                    String::from_utf8(bytes.to_vec()).map_err(|e| format!("invalid UTF-8: {e}"))
                }
                RawRecord::Csv { .. } => Err("a line decoder was given a CSV row".into()),
            }),
        )
    }
}

impl<T: Record> FileSource<T> {
    /// Reads CSV rows of `path` (a file, a directory, or a glob) into `T` by column name;
    /// the files have a header row and comma delimiters unless configured otherwise.
    pub fn csv(path: impl Into<String>) -> Self {
        Self::with_decoder(
            path,
            FileFormat::Csv {
                has_header: true,
                delimiter: b',',
            },
            Arc::new(decode_csv::<T>),
        )
    }

    /// Reads `path` with a custom decoder.
    pub fn with_decoder(path: impl Into<String>, format: FileFormat, decoder: Decoder<T>) -> Self {
        Self {
            path: path.into(),
            format,
            policy: MalformedPolicy::Fail,
            monitor: None,
            records_per_second: None,
            decoder,
            _record: PhantomData,
        }
    }

    /// Sets whether CSV files have a header row (without one, rows decode by position).
    pub fn has_header(mut self, has_header: bool) -> Self {
        if let FileFormat::Csv { delimiter, .. } = self.format {
            self.format = FileFormat::Csv {
                has_header,
                delimiter,
            };
        }
        self
    }

    /// Sets the CSV field delimiter.
    pub fn delimiter(mut self, delimiter: u8) -> Self {
        if let FileFormat::Csv { has_header, .. } = self.format {
            self.format = FileFormat::Csv {
                has_header,
                delimiter,
            };
        }
        self
    }

    /// Sets what happens to rows that cannot be decoded.
    pub fn on_malformed(mut self, policy: MalformedPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Keeps watching the paths, reading new files as they appear (an unbounded source).
    pub fn monitor(mut self, interval: Duration) -> Self {
        self.monitor = Some(interval);
        self
    }

    /// Limits the total read rate to `records_per_second` (for demos and tests).
    pub fn with_rate_limit(mut self, records_per_second: f64) -> Self {
        self.records_per_second = Some(records_per_second);
        self
    }
}

impl<T: Record> FileSource<Result<T, MalformedRecord>> {
    /// Reads CSV rows into `T`, passing rows that do not decode on as `Err`, so that they can
    /// be routed to a dead-letter sink: `stream.flat_map(Result::err).sink_to(..)`.
    pub fn csv_with_dead_letters(path: impl Into<String>) -> Self {
        Self::with_decoder(
            path,
            FileFormat::Csv {
                has_header: true,
                delimiter: b',',
            },
            Arc::new(|raw, location| {
                Ok(
                    decode_csv::<T>(raw, location).map_err(|reason| MalformedRecord {
                        file: location.file.to_string(),
                        line: location.line,
                        reason,
                        raw: raw.to_text(),
                    }),
                )
            }),
        )
    }
}

/// Lists the files `pattern` names, sorted: a file, every file of a directory (not
/// recursively, skipping hidden files), or the files matching a glob.
pub fn list_files(pattern: &str) -> Result<Vec<PathBuf>, BoxError> {
    let path = Path::new(pattern);
    let mut files = Vec::new();
    if path.is_file() {
        files.push(path.to_path_buf());
    } else if path.is_dir() {
        let entries = std::fs::read_dir(path)
            .map_err(|e| format!("file source: cannot list directory `{pattern}`: {e}"))?;
        for entry in entries {
            let entry = entry
                .map_err(|e| format!("file source: cannot list directory `{pattern}`: {e}"))?;
            let hidden = entry.file_name().to_string_lossy().starts_with('.');
            if entry.path().is_file() && !hidden {
                files.push(entry.path());
            }
        }
    } else if pattern.contains(['*', '?', '[']) {
        let matches = glob::glob(pattern)
            .map_err(|e| format!("file source: invalid glob `{pattern}`: {e}"))?;
        for m in matches {
            let m = m.map_err(|e| format!("file source: cannot read `{pattern}`: {e}"))?;
            if m.is_file() {
                files.push(m);
            }
        }
    } else {
        return Err(format!("file source: path `{pattern}` does not exist").into());
    }
    files.sort();
    Ok(files)
}

/// Hands out files on request; in monitoring mode it finds new files on each tick and
/// never runs out.
pub struct FileEnumerator {
    pattern: String,
    monitor: Option<Duration>,
    pending: VecDeque<FileSplit>,
    seen: BTreeSet<String>,
    waiting: BTreeSet<u32>,
}

/// What a checkpoint keeps of the enumerator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEnumeratorState {
    /// Files not handed out yet.
    pub pending: Vec<FileSplit>,
    /// Every file ever discovered (so none is read twice).
    pub seen: Vec<String>,
}

impl FileEnumerator {
    fn discover(&mut self) -> Result<(), BoxError> {
        for file in list_files(&self.pattern)? {
            let path = file.display().to_string();
            if self.seen.insert(path.clone()) {
                self.pending.push_back(FileSplit {
                    path,
                    offset: 0,
                    line: 1,
                });
            }
        }
        Ok(())
    }

    fn serve_waiting(&mut self, context: &mut SplitEnumeratorContext<FileSplit>) {
        while let Some(&reader) = self.waiting.iter().next() {
            let Some(split) = self.pending.pop_front() else {
                break;
            };
            self.waiting.remove(&reader);
            context.assign_split(split, reader);
        }
    }
}

impl SplitEnumerator for FileEnumerator {
    type Split = FileSplit;
    type Checkpoint = FileEnumeratorState;

    fn handle_split_request(
        &mut self,
        subtask: u32,
        context: &mut SplitEnumeratorContext<FileSplit>,
    ) -> Result<(), BoxError> {
        match self.pending.pop_front() {
            Some(split) => context.assign_split(split, subtask),
            None if self.monitor.is_some() => {
                self.waiting.insert(subtask);
            }
            None => context.signal_no_more_splits(subtask),
        }
        Ok(())
    }

    fn add_splits_back(&mut self, splits: Vec<FileSplit>, _subtask: u32) -> Result<(), BoxError> {
        self.pending.extend(splits);
        Ok(())
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<FileEnumeratorState, BoxError> {
        Ok(FileEnumeratorState {
            pending: self.pending.iter().cloned().collect(),
            seen: self.seen.iter().cloned().collect(),
        })
    }

    fn tick_interval(&self) -> Option<Duration> {
        self.monitor
    }

    fn on_tick(&mut self, context: &mut SplitEnumeratorContext<FileSplit>) -> Result<(), BoxError> {
        self.discover()?;
        self.serve_waiting(context);
        Ok(())
    }
}

impl<T: Record> Source for FileSource<T> {
    type Output = T;
    type Split = FileSplit;
    type Enumerator = FileEnumerator;
    type Reader = FileReader<T>;

    fn boundedness(&self) -> Boundedness {
        match self.monitor {
            Some(_) => Boundedness::ContinuousUnbounded,
            None => Boundedness::Bounded,
        }
    }

    fn create_enumerator(&self, _parallelism: u32) -> Result<FileEnumerator, BoxError> {
        let mut enumerator = FileEnumerator {
            pattern: self.path.clone(),
            monitor: self.monitor,
            pending: VecDeque::new(),
            seen: BTreeSet::new(),
            waiting: BTreeSet::new(),
        };
        enumerator.discover()?;
        Ok(enumerator)
    }

    fn restore_enumerator(
        &self,
        _parallelism: u32,
        checkpoint: FileEnumeratorState,
    ) -> Result<FileEnumerator, BoxError> {
        Ok(FileEnumerator {
            pattern: self.path.clone(),
            monitor: self.monitor,
            pending: checkpoint.pending.into(),
            seen: checkpoint.seen.into_iter().collect(),
            waiting: BTreeSet::new(),
        })
    }

    fn create_reader(&self, context: SourceReaderContext) -> Result<FileReader<T>, BoxError> {
        Ok(FileReader::new(
            context,
            self.format.clone(),
            self.policy,
            self.decoder.clone(),
            self.records_per_second,
        ))
    }
}
