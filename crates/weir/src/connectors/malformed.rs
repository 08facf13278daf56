//! Records that cannot be decoded, the same way in every connector: one policy
//! ([`MalformedRecordPolicy`]), one error a decoder returns ([`DecodeError`]), one description
//! of a bad record with where it came from ([`MalformedRecord`]), and one place that applies
//! the policy and counts ([`MalformedRecordHandler`]).
//!
//! A source fails on the first malformed record by default, naming where it is. It can skip
//! such records instead (`.on_malformed(MalformedRecordPolicy::Skip)`), counting them in the
//! job's result, or pass them on as dead letters (`.with_dead_letters()`): the source then
//! emits `Result<T, MalformedRecord>`, and the `Err`s can be routed to a sink of their own.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::metrics::{Counter, MetricGroup};

/// What a source does with a record it cannot decode.
///
/// ```
/// use weir::prelude::*;
/// # #[derive(Clone, serde::Serialize, serde::Deserialize)] struct Row { a: u32 }
/// let source = FileSource::<Row>::csv("data/*.csv").on_malformed(MalformedRecordPolicy::Skip);
/// # let _ = source;
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MalformedRecordPolicy {
    /// Fail the job with a [`MalformedRecordError`] naming the record (the default).
    #[default]
    Fail,
    /// Skip the record and count it (the job's result shows the count per source).
    Skip,
}

/// Why one record could not be decoded: the column (or field) at fault, when known, and the
/// reason.
///
/// ```
/// use weir::prelude::*;
/// let e = DecodeError::in_column("age", "invalid digit found in string \"x\"");
/// assert_eq!(e.to_string(), "column age: invalid digit found in string \"x\"");
/// assert_eq!(DecodeError::new("not UTF-8").to_string(), "not UTF-8");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecodeError {
    /// The column or field name, when the error is about one.
    pub column: Option<String>,
    /// What is wrong.
    pub reason: String,
}

impl DecodeError {
    /// An error about the record as a whole.
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            column: None,
            reason: reason.into(),
        }
    }
    /// An error about one column.
    pub fn in_column(column: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            column: Some(column.into()),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.column {
            Some(column) => write!(f, "column {column}: {}", self.reason),
            None => f.write_str(&self.reason),
        }
    }
}

impl std::error::Error for DecodeError {}

impl From<String> for DecodeError {
    fn from(reason: String) -> Self {
        Self::new(reason)
    }
}

impl From<&str> for DecodeError {
    fn from(reason: &str) -> Self {
        Self::new(reason)
    }
}

/// Where a record was read.
///
/// ```
/// use weir::prelude::*;
/// let file = RecordOrigin::File { file: "people.csv".into(), line: 3 };
/// let kafka = RecordOrigin::Kafka { topic: "events".into(), partition: 2, offset: 41 };
/// assert_eq!(file.to_string(), "people.csv:3");
/// assert_eq!(kafka.to_string(), "topic events, partition 2, offset 41");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordOrigin {
    /// A line of a file (1-based; for a CSV row, the line it starts on).
    File {
        /// The file's path.
        file: String,
        /// Its 1-based line number.
        line: u64,
    },
    /// A record of a Kafka partition.
    Kafka {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The record's offset.
        offset: i64,
    },
}

impl fmt::Display for RecordOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordOrigin::File { file, line } => write!(f, "{file}:{line}"),
            RecordOrigin::Kafka {
                topic,
                partition,
                offset,
            } => write!(f, "topic {topic}, partition {partition}, offset {offset}"),
        }
    }
}

/// A record that could not be decoded: where it is, why, and its raw bytes as text. The
/// dead letter of [`with_dead_letters`](crate::connectors::file_source::FileSource::with_dead_letters).
///
/// ```
/// use weir::prelude::*;
/// let bad = MalformedRecord {
///     origin: RecordOrigin::File { file: "census-0.csv".into(), line: 5002 },
///     error: DecodeError::in_column("hours_per_week", "invalid digit found in string \"x\""),
///     raw: "39,x".into(),
/// };
/// assert_eq!(
///     bad.to_string(),
///     "census-0.csv:5002, column hours_per_week: invalid digit found in string \"x\""
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MalformedRecord {
    /// Where it was read.
    pub origin: RecordOrigin,
    /// Why it could not be decoded.
    pub error: DecodeError,
    /// The record as read (invalid UTF-8 replaced).
    pub raw: String,
}

impl fmt::Display for MalformedRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, {}", self.origin, self.error)
    }
}

/// The error a source fails with on a malformed record under [`MalformedRecordPolicy::Fail`].
/// The job's error carries it as
/// [`TaskError::MalformedRecord`](crate::error::TaskError::MalformedRecord); find it with
/// [`WeirError::malformed_record`](crate::WeirError::malformed_record).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed record at {record} (record: {raw:?})", raw = record.raw)]
pub struct MalformedRecordError {
    /// The record.
    pub record: MalformedRecord,
}

/// Counts of malformed records of one source subtask, shared between its reader (which
/// counts) and its task (which reports the counts with the subtask's metrics).
/// They are also the source's live metrics `numRecordsMalformedSkipped` and
/// `numRecordsMalformedDeadLettered`.
#[derive(Debug, Clone, Default)]
pub struct MalformedRecordCounters {
    skipped: Counter,
    dead_lettered: Counter,
}

impl MalformedRecordCounters {
    /// Counters registered in `group`, so that they are reported live.
    pub fn registered_in(group: &MetricGroup) -> Self {
        Self {
            skipped: group.counter("numRecordsMalformedSkipped"),
            dead_lettered: group.counter("numRecordsMalformedDeadLettered"),
        }
    }
    /// Records skipped so far.
    pub fn skipped(&self) -> u64 {
        self.skipped.get()
    }
    /// Records passed on as dead letters so far.
    pub fn dead_lettered(&self) -> u64 {
        self.dead_lettered.get()
    }
}

/// How many skipped records are logged per subtask; all of them are counted.
const LOGGED_SKIPS: u64 = 10;

/// Applies a source's malformed-record policy: the one place where a bad record fails the
/// job, is skipped and counted, or becomes a dead letter. Connectors make one per reader.
pub struct MalformedRecordHandler<T> {
    policy: MalformedRecordPolicy,
    dead_letter: Option<fn(MalformedRecord) -> T>,
    counters: MalformedRecordCounters,
}

impl<T> MalformedRecordHandler<T> {
    /// A handler applying `policy`, or turning every malformed record into a record of the
    /// stream with `dead_letter` when one is given, counting into `counters`.
    pub fn new(
        policy: MalformedRecordPolicy,
        dead_letter: Option<fn(MalformedRecord) -> T>,
        counters: MalformedRecordCounters,
    ) -> Self {
        Self {
            policy,
            dead_letter,
            counters,
        }
    }

    /// Handles one malformed record: the dead letter to emit, nothing (skipped), or the error
    /// that fails the job.
    pub fn handle(&mut self, record: MalformedRecord) -> Result<Option<T>, MalformedRecordError> {
        if let Some(dead_letter) = self.dead_letter {
            self.counters.dead_lettered.inc();
            return Ok(Some(dead_letter(record)));
        }
        match self.policy {
            MalformedRecordPolicy::Fail => Err(MalformedRecordError { record }),
            MalformedRecordPolicy::Skip => {
                self.counters.skipped.inc();
                let skipped = self.counters.skipped.get();
                if skipped <= LOGGED_SKIPS {
                    tracing::warn!(%record, skipped, "skipping malformed record");
                } else if skipped == LOGGED_SKIPS + 1 {
                    tracing::warn!(
                        "more malformed records skipped; the job's result counts them all"
                    );
                }
                Ok(None)
            }
        }
    }

    /// The counters this handler counts into.
    pub fn counters(&self) -> &MalformedRecordCounters {
        &self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad(line: u64) -> MalformedRecord {
        MalformedRecord {
            origin: RecordOrigin::File {
                file: "f.csv".into(),
                line,
            },
            error: DecodeError::in_column("age", "invalid digit"),
            raw: "x".into(),
        }
    }

    #[test]
    fn fail_names_the_record_once() {
        let mut handler =
            MalformedRecordHandler::<u32>::new(MalformedRecordPolicy::Fail, None, <_>::default());
        let e = handler.handle(bad(7)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "malformed record at f.csv:7, column age: invalid digit (record: \"x\")"
        );
        assert_eq!(handler.counters().skipped(), 0);
    }

    #[test]
    fn skip_counts_every_record_and_dead_letters_are_counted_apart() {
        let counters = MalformedRecordCounters::default();
        let mut skip =
            MalformedRecordHandler::<u32>::new(MalformedRecordPolicy::Skip, None, counters.clone());
        for line in 0..25 {
            assert_eq!(skip.handle(bad(line)).unwrap(), None);
        }
        assert_eq!(counters.skipped(), 25);
        let mut dead = MalformedRecordHandler::<Result<u32, MalformedRecord>>::new(
            MalformedRecordPolicy::Fail,
            Some(Err),
            counters.clone(),
        );
        assert_eq!(dead.handle(bad(3)).unwrap(), Some(Err(bad(3))));
        assert_eq!((counters.skipped(), counters.dead_lettered()), (25, 1));
    }

    #[test]
    fn kafka_origins_read_as_such() {
        let origin = RecordOrigin::Kafka {
            topic: "events".into(),
            partition: 2,
            offset: 41,
        };
        assert_eq!(origin.to_string(), "topic events, partition 2, offset 41");
    }
}
