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
use crate::connectors::malformed::{
    DecodeError, MalformedRecord, MalformedRecordHandler, MalformedRecordPolicy,
};
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
    Arc<dyn Fn(RawRecord<'_>, &RecordLocation<'_>) -> Result<T, DecodeError> + Send + Sync>;

/// Reads files as records of type `T` (Flink's `FileSource`): one file, every file of a
/// directory, or the files a glob matches. A path that matches no file is an error, unless
/// the source monitors it for new files.
///
/// Rows that cannot be decoded fail the job by default, naming the file, the line and the
/// column; [`on_malformed`](Self::on_malformed) skips and counts them instead, and
/// [`with_dead_letters`](Self::with_dead_letters) passes them on as `Err`.
///
/// ```
/// use weir::prelude::*;
///
/// #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
/// struct Person { name: String, age: u32 }
///
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("people.csv"), "name,age\nada,36\nbob,x\n")?;
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// let rows = env
///     .from_source(FileSource::<Person>::csv(dir.path()).with_dead_letters(), WatermarkStrategy::no_watermarks(), "people")
///     .collect();
/// let result = env.execute("read people")?;
/// let rows = rows.take();
/// assert_eq!(rows[0], Ok(Person { name: "ada".into(), age: 36 }));
/// let bad = rows[1].clone().unwrap_err();
/// assert_eq!(bad.error.column.as_deref(), Some("age"));
/// assert_eq!(result.operator("Source: people").unwrap().records_dead_lettered, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct FileSource<T> {
    path: String,
    format: FileFormat,
    policy: MalformedRecordPolicy,
    dead_letter: Option<fn(MalformedRecord) -> T>,
    flexible: bool,
    monitor: Option<Duration>,
    records_per_second: Option<f64>,
    max_record_bytes: usize,
    decoder: Decoder<T>,
    _record: PhantomData<fn() -> T>,
}

/// The longest line a file source takes by default (16 MiB); a longer one is malformed.
pub const DEFAULT_MAX_RECORD_BYTES: usize = 16 << 20;

impl<T> Clone for FileSource<T> {
    fn clone(&self) -> Self {
        Self {
            path: self.path.clone(),
            format: self.format.clone(),
            policy: self.policy,
            dead_letter: self.dead_letter,
            flexible: self.flexible,
            monitor: self.monitor,
            records_per_second: self.records_per_second,
            max_record_bytes: self.max_record_bytes,
            decoder: self.decoder.clone(),
            _record: PhantomData,
        }
    }
}

fn decode_csv<T: DeserializeOwned>(
    raw: RawRecord<'_>,
    _location: &RecordLocation<'_>,
) -> Result<T, DecodeError> {
    match raw {
        RawRecord::Csv { record, headers } => {
            crate::connectors::csv_fields::decode_record(record, headers)
                .map_err(|e| crate::connectors::csv_fields::decode_error(&e, record, headers))
        }
        RawRecord::Line(_) => Err(DecodeError::new("a CSV decoder was given a line")),
    }
}

fn path_text(path: impl AsRef<Path>) -> String {
    path.as_ref().to_string_lossy().into_owned()
}

impl FileSource<String> {
    /// Reads the lines of `path` (a file, a directory, or a glob such as `logs/*.txt`).
    pub fn lines(path: impl AsRef<Path>) -> Self {
        Self::with_decoder(
            path,
            FileFormat::Lines,
            Arc::new(|raw, _| match raw {
                RawRecord::Line(bytes) => String::from_utf8(bytes.to_vec())
                    .map_err(|e| DecodeError::new(format!("invalid UTF-8: {e}"))),
                RawRecord::Csv { .. } => {
                    Err(DecodeError::new("a line decoder was given a CSV row"))
                }
            }),
        )
    }
}

impl<T: Record> FileSource<T> {
    /// Reads CSV rows of `path` (a file, a directory, or a glob) into `T` by column name;
    /// the files have a header row and comma delimiters unless configured otherwise, and
    /// every row has as many fields as the header (see [`flexible`](Self::flexible)).
    pub fn csv(path: impl AsRef<Path>) -> Self {
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
    pub fn with_decoder(path: impl AsRef<Path>, format: FileFormat, decoder: Decoder<T>) -> Self {
        Self {
            path: path_text(path),
            format,
            policy: MalformedRecordPolicy::Fail,
            dead_letter: None,
            flexible: false,
            monitor: None,
            records_per_second: None,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
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

    /// Accepts CSV rows whose number of fields differs from the header's (or, without a
    /// header, from the file's first row's). By default such rows are malformed.
    pub fn flexible(mut self) -> Self {
        self.flexible = true;
        self
    }

    /// Sets what happens to rows that cannot be decoded (default: fail the job).
    pub fn on_malformed(mut self, policy: MalformedRecordPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Passes rows that cannot be decoded on as `Err` dead letters instead of failing or
    /// skipping, so that they can be routed to a sink of their own:
    /// `stream.flat_map_iter(Result::err).sink_to(..)`.
    pub fn with_dead_letters(self) -> FileSource<Result<T, MalformedRecord>> {
        let decoder = self.decoder;
        FileSource {
            path: self.path,
            format: self.format,
            policy: self.policy,
            dead_letter: Some(Err),
            flexible: self.flexible,
            monitor: self.monitor,
            records_per_second: self.records_per_second,
            max_record_bytes: self.max_record_bytes,
            decoder: Arc::new(move |raw, location| decoder(raw, location).map(Ok)),
            _record: PhantomData,
        }
    }

    /// Keeps watching the paths, reading new files as they appear (an unbounded source).
    pub fn monitor(mut self, interval: Duration) -> Self {
        self.monitor = Some(interval);
        self
    }

    /// The longest line (without its line break) the source takes, in bytes (default
    /// [`DEFAULT_MAX_RECORD_BYTES`]): a longer one is a malformed record, handled by the
    /// malformed-record policy, and is read past without being held in memory. Applies to
    /// line-based files (lines, JSON lines, custom line decoders).
    pub fn with_max_record_bytes(mut self, bytes: usize) -> Self {
        self.max_record_bytes = bytes.max(1);
        self
    }

    /// Limits the total read rate to `records_per_second` (for demos and tests): shared among
    /// the readers that hold files, so that it holds with fewer files than readers.
    pub fn with_rate_limit(mut self, records_per_second: f64) -> Self {
        self.records_per_second = Some(records_per_second);
        self
    }
}

/// Why the file source cannot list its input.
#[derive(Debug, thiserror::Error)]
pub enum FileSourceError {
    /// Nothing is at the path.
    #[error("file source: path `{path}` does not exist")]
    NotFound {
        /// The path as given.
        path: String,
    },
    /// The path exists or is a glob, but names no file: reading it would silently read
    /// nothing.
    #[error(
        "file source: `{path}` matches no file (a source that monitors its path for new files \
         may start empty)"
    )]
    NoMatch {
        /// The path as given.
        path: String,
    },
    /// The glob is not valid.
    #[error("file source: invalid glob `{pattern}`: {reason}")]
    InvalidGlob {
        /// The pattern.
        pattern: String,
        /// Why.
        reason: String,
    },
    /// Listing failed.
    #[error("file source: cannot list `{path}`: {source}")]
    List {
        /// The directory or pattern.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Lists the files `pattern` names, sorted: a file, every file of a directory (not
/// recursively, skipping hidden files), or the files matching a glob. Naming no file is not
/// an error here (a monitoring source waits for files); [`FileSource`] refuses it for a
/// bounded read.
pub fn list_files(pattern: impl AsRef<Path>) -> Result<Vec<PathBuf>, FileSourceError> {
    let path = pattern.as_ref();
    let text = path_text(path);
    let list_error = |source| FileSourceError::List {
        path: text.clone(),
        source,
    };
    let mut files = Vec::new();
    if path.is_file() {
        files.push(path.to_path_buf());
    } else if path.is_dir() {
        for entry in std::fs::read_dir(path).map_err(list_error)? {
            let entry = entry.map_err(list_error)?;
            let hidden = entry.file_name().to_string_lossy().starts_with('.');
            if entry.path().is_file() && !hidden {
                files.push(entry.path());
            }
        }
    } else if text.contains(['*', '?', '[']) {
        let matches = glob::glob(&text).map_err(|e| FileSourceError::InvalidGlob {
            pattern: text.clone(),
            reason: e.to_string(),
        })?;
        for m in matches {
            let m = m.map_err(|e| list_error(e.into()))?;
            if m.is_file() {
                files.push(m);
            }
        }
    } else {
        return Err(FileSourceError::NotFound { path: text });
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
        let files = list_files(&self.pattern)?;
        if files.is_empty() && self.monitor.is_none() && self.seen.is_empty() {
            return Err(FileSourceError::NoMatch {
                path: self.pattern.clone(),
            }
            .into());
        }
        for file in files {
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

    fn validate(&self) -> Result<(), String> {
        crate::connectors::rate_limiter::check_rate(self.records_per_second)
    }

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
        let malformed = MalformedRecordHandler::new(
            self.policy,
            self.dead_letter,
            context.malformed_record_counters(),
        );
        Ok(FileReader::new(
            context,
            self.format.clone(),
            !self.flexible,
            malformed,
            self.decoder.clone(),
            self.records_per_second,
            self.max_record_bytes,
        ))
    }
}
