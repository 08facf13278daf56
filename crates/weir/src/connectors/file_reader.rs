//! Reads the files assigned to one file-source subtask, record by record, keeping the exact
//! byte offset and line number of the next record as the split's position.

use crate::connectors::line_limit::LineLimitedReader;
use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::time::Duration;

use csv::ByteRecord;

use crate::connectors::file_source::{Decoder, FileFormat, FileSplit};
use crate::connectors::malformed::{
    DecodeError, MalformedRecord, MalformedRecordHandler, RecordOrigin,
};
use crate::connectors::origin::{OriginPlace, TracedOrigin};
use crate::connectors::rate_limiter::RateLimiter;
use crate::connectors::source::{InputStatus, SourceReader, SourceReaderContext, SourceSplit};
use crate::connectors::split_queue::SplitQueue;
use crate::error::BoxError;
use crate::record::Record;
use crate::runtime::output::Collector;

const RECORDS_PER_POLL: u64 = 1024;

/// A record as read, before decoding.
#[derive(Debug, Clone, Copy)]
pub enum RawRecord<'a> {
    /// A line, without its line ending.
    Line(&'a [u8]),
    /// A CSV row, with the header row if the file has one.
    Csv {
        /// The row.
        record: &'a ByteRecord,
        /// The header row.
        headers: Option<&'a ByteRecord>,
    },
}

impl RawRecord<'_> {
    /// The record as text (invalid UTF-8 replaced), for error messages and dead letters.
    pub fn to_text(&self) -> String {
        match self {
            RawRecord::Line(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            RawRecord::Csv { record, .. } => record
                .iter()
                .map(|f| String::from_utf8_lossy(f).into_owned())
                .collect::<Vec<_>>()
                .join(","),
        }
    }
}

/// Where a record was found.
#[derive(Debug, Clone, Copy)]
pub struct RecordLocation<'a> {
    /// The file.
    pub file: &'a str,
    /// 1-based line number.
    pub line: u64,
}

enum OpenFile {
    Lines(BufReader<File>),
    Csv {
        /// Boxed: the cutting reader's log makes it far larger than a line reader.
        reader: Box<csv::Reader<LineLimitedReader<BufReader<File>>>>,
        headers: Option<ByteRecord>,
        /// Fields every row must have: the header's, or the file's first row's. `None`
        /// until known, and always with flexible rows.
        fields: Option<usize>,
        base_offset: u64,
        base_line: u64,
    },
}

/// Reads the files assigned to one subtask.
pub struct FileReader<T> {
    context: SourceReaderContext,
    format: FileFormat,
    strict_columns: bool,
    malformed: MalformedRecordHandler<T>,
    decoder: Decoder<T>,
    limiter: RateLimiter,
    /// Assigned splits; the front one is being read and its position is kept current.
    splits: SplitQueue<FileSplit>,
    open: Option<OpenFile>,
    line_buffer: Vec<u8>,
    /// The longest line kept; a longer one is a malformed record.
    max_record_bytes: usize,
    /// The length of the line just read, when it was longer than `max_record_bytes`.
    oversized: Option<u64>,
    /// Where the CSV row just read starts in its file, relative to where reading began.
    row_start: u64,
    record: ByteRecord,
    /// The file being read as an interned origin place, made at its first traced record.
    origin_place: Option<(String, OriginPlace)>,
    row_lines: CsvRowLines,
}

/// How much of an oversized line a malformed record shows.
const PREVIEW_BYTES: usize = 256;

/// Appends the next line (with its `\n`, if any) to `line`, at most `max` bytes of it, and
/// returns its length in bytes (0 at the end); the rest of a longer line is read past
/// without being kept, so memory never grows with a line's length (`line.len() < read` says
/// it was cut). `BufRead::read_until` does the same with a byte-at-a-time-word search; the
/// `memchr` crate's vectorized one matters for long lines such as JSON records.
fn read_line(
    reader: &mut BufReader<File>,
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<usize> {
    let mut read = 0;
    loop {
        let buffer = match reader.fill_buf() {
            Ok(buffer) => buffer,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buffer.is_empty() {
            return Ok(read);
        }
        let (taken, done) = match memchr::memchr(b'\n', buffer) {
            Some(at) => (at + 1, true),
            None => (buffer.len(), false),
        };
        let room = max.saturating_sub(line.len());
        line.extend_from_slice(&buffer[..taken.min(room)]);
        reader.consume(taken);
        read += taken;
        if done {
            return Ok(read);
        }
    }
}

/// The 1-based lines CSV rows start on, for the origins of malformed rows and of the
/// records of traced attempts. The csv crate reports a row from where it began parsing it
/// (`start`: byte offset and line), before the empty lines it skips; those are counted here by
/// reading them again, so that the hot path pays nothing. The file stays open and is read
/// forward from row to row, so that a traced attempt reads each file about twice, not once
/// per row.
#[derive(Default)]
struct CsvRowLines {
    /// The file open at a byte offset.
    open: Option<(String, BufReader<File>, u64)>,
}

impl CsvRowLines {
    fn line(&mut self, path: &str, start: (u64, u64)) -> Result<u64, BoxError> {
        let (offset, mut line) = start;
        let (mut reader, mut at) = match self.open.take() {
            Some((open, reader, at)) if open == path && at <= offset => (reader, at),
            _ => (open_at(path, offset)?, offset),
        };
        let skip = i64::try_from(offset - at).unwrap_or(i64::MAX);
        reader
            .seek_relative(skip)
            .map_err(|e| format!("file source: cannot seek `{path}` to byte {offset}: {e}"))?;
        at = offset;
        loop {
            let buffer = reader
                .fill_buf()
                .map_err(|e| format!("file source: cannot read `{path}` at byte {at}: {e}"))?;
            let blank = buffer
                .iter()
                .take_while(|b| matches!(b, b'\n' | b'\r'))
                .count();
            line += buffer[..blank].iter().filter(|b| **b == b'\n').count() as u64;
            let row_found = blank < buffer.len() || buffer.is_empty();
            reader.consume(blank);
            at += blank as u64;
            if row_found {
                self.open = Some((path.to_string(), reader, at));
                return Ok(line);
            }
        }
    }
}

fn open_at(path: &str, offset: u64) -> Result<BufReader<File>, BoxError> {
    let mut file =
        File::open(path).map_err(|e| format!("file source: cannot open `{path}`: {e}"))?;
    file.seek(SeekFrom::Start(offset))
        .map_err(|e| format!("file source: cannot seek `{path}` to byte {offset}: {e}"))?;
    Ok(BufReader::with_capacity(256 * 1024, file))
}

impl<T: Record> FileReader<T> {
    pub(crate) fn new(
        context: SourceReaderContext,
        format: FileFormat,
        strict_columns: bool,
        malformed: MalformedRecordHandler<T>,
        decoder: Decoder<T>,
        records_per_second: Option<f64>,
        max_record_bytes: usize,
    ) -> Self {
        let limiter = RateLimiter::new(records_per_second, context.parallelism());
        Self {
            context,
            format,
            strict_columns,
            malformed,
            decoder,
            limiter,
            splits: SplitQueue::default(),
            open: None,
            line_buffer: Vec::new(),
            max_record_bytes,
            oversized: None,
            row_start: 0,
            record: ByteRecord::new(),
            origin_place: None,
            row_lines: CsvRowLines::default(),
        }
    }

    /// Rows skipped as malformed so far.
    pub fn skipped(&self) -> u64 {
        self.malformed.counters().skipped()
    }

    fn open_front(&mut self) -> Result<(), BoxError> {
        let Some(split) = self.splits.front() else {
            return Ok(());
        };
        let open = match &self.format {
            FileFormat::Lines => OpenFile::Lines(open_at(&split.path, split.offset)?),
            FileFormat::Csv {
                has_header,
                delimiter,
            } => {
                let builder = || {
                    let mut b = csv::ReaderBuilder::new();
                    b.has_headers(false).delimiter(*delimiter).flexible(true);
                    b
                };
                let max = self.max_record_bytes;
                let limited = |offset: u64| -> Result<_, BoxError> {
                    Ok(LineLimitedReader::new(
                        open_at(&split.path, offset)?,
                        max,
                        b'"',
                        *delimiter,
                    ))
                };
                let too_long = |what: &str| -> BoxError {
                    format!(
                        "file source: the {what} of `{}` has a line longer than the {max} bytes \
                         a record may have (raise it with `with_max_record_bytes` on the source)",
                        split.path
                    )
                    .into()
                };
                let mut headers = None;
                let (mut offset, mut line) = (split.offset, split.line);
                if *has_header {
                    // The header is the file's first row, wherever the split resumes.
                    let mut head = builder().from_reader(limited(0)?);
                    let mut header = ByteRecord::new();
                    head.read_byte_record(&mut header).map_err(|e| {
                        format!(
                            "file source: cannot read the header of `{}`: {e}",
                            split.path
                        )
                    })?;
                    let end = head.position().byte();
                    if head.get_mut().cuts().take_until(end) {
                        return Err(too_long("header"));
                    }
                    if offset == 0 {
                        offset = head.position().byte();
                        line = head.position().line();
                    }
                    headers = Some(header);
                }
                let mut fields = headers.as_ref().map(ByteRecord::len);
                if !has_header && split.offset > 0 {
                    // Resumed mid-file: the first row still sets the expected width.
                    let mut first = ByteRecord::new();
                    let mut head = builder().from_reader(limited(0)?);
                    let read = head.read_byte_record(&mut first).map_err(|e| {
                        format!(
                            "file source: cannot read the first row of `{}`: {e}",
                            split.path
                        )
                    })?;
                    let end = head.position().byte();
                    if head.get_mut().cuts().take_until(end) {
                        return Err(too_long("first row"));
                    }
                    if read {
                        fields = Some(first.len());
                    }
                }
                OpenFile::Csv {
                    reader: Box::new(builder().from_reader(limited(offset)?)),
                    headers,
                    fields,
                    base_offset: offset,
                    base_line: line,
                }
            }
        };
        if let Some(front) = self.splits.front_mut() {
            if let OpenFile::Csv {
                base_offset,
                base_line,
                ..
            } = &open
            {
                front.offset = *base_offset;
                front.line = *base_line;
            }
        }
        self.open = Some(open);
        Ok(())
    }

    /// Reads the next raw record of the open file into the reader's buffers and advances
    /// the front split's position; `false` at the end of the file.
    fn read_next(&mut self) -> Result<bool, BoxError> {
        let (Some(open), Some(split)) = (self.open.as_mut(), self.splits.front_mut()) else {
            return Ok(false);
        };
        match open {
            OpenFile::Lines(reader) => {
                self.line_buffer.clear();
                // One byte more than allowed is kept, to tell a line of exactly the maximum
                // (with its newline) from a longer one.
                let keep = self.max_record_bytes.saturating_add(2);
                let n = read_line(reader, &mut self.line_buffer, keep).map_err(|e| {
                    format!(
                        "file source: cannot read `{}` at byte {}: {e}",
                        split.path, split.offset
                    )
                })?;
                if n == 0 {
                    return Ok(false);
                }
                split.offset += n as u64;
                split.line += 1;
                self.oversized = None;
                if self.line_buffer.len() < n {
                    self.oversized = Some(n as u64);
                    self.line_buffer.truncate(PREVIEW_BYTES);
                    return Ok(true);
                }
                if self.line_buffer.last() == Some(&b'\n') {
                    self.line_buffer.pop();
                    if self.line_buffer.last() == Some(&b'\r') {
                        self.line_buffer.pop();
                    }
                }
                if self.line_buffer.len() > self.max_record_bytes {
                    self.oversized = Some(n as u64);
                    self.line_buffer.truncate(PREVIEW_BYTES);
                }
                Ok(true)
            }
            OpenFile::Csv {
                reader,
                fields,
                base_offset,
                base_line,
                ..
            } => {
                let more = reader.read_byte_record(&mut self.record).map_err(|e| {
                    format!("file source: `{}` line {}: {e}", split.path, split.line)
                })?;
                self.oversized = None;
                if more {
                    // Positions are the cutting reader's; the file's offsets are found from
                    // what it dropped.
                    let (start, end) = (
                        self.record.position().map_or(0, |p| p.byte()),
                        reader.position().byte(),
                    );
                    let cuts = reader.get_mut().cuts();
                    let start = cuts.input_offset(start);
                    let end_offset = cuts.input_offset(end);
                    if cuts.take_until(end) {
                        self.oversized = Some(end_offset - start);
                    }
                    self.row_start = start;
                    // Without a header, the file's first row sets the width of the others.
                    fields.get_or_insert(self.record.len());
                    split.offset = *base_offset + end_offset;
                    split.line = *base_line + reader.position().line() - 1;
                }
                Ok(more)
            }
        }
    }
}

impl<T: Record> SourceReader for FileReader<T> {
    type Output = T;
    type Split = FileSplit;

    fn poll_next(&mut self, output: &mut Collector<'_, T>) -> Result<InputStatus, BoxError> {
        if let Some(status) = self.splits.status_when_empty(&self.context) {
            return Ok(status);
        }
        if self.open.is_none() {
            self.open_front()?;
        }
        let allowed = self.limiter.allowed(RECORDS_PER_POLL);
        if allowed == 0 {
            return Ok(InputStatus::NothingAvailable);
        }
        if let Some(split) = self.splits.front() {
            output.for_split(&split.split_id());
        }
        for _ in 0..allowed {
            // The line a record starts on, before reading moves the position past it.
            let line = self.splits.front().map_or(0, |s| s.line);
            if !self.read_next()? {
                if let Some(split) = self.splits.front() {
                    output.release_split(&split.split_id());
                }
                self.splits.finish_front(&self.context);
                self.open = None;
                return Ok(InputStatus::MoreAvailable);
            }
            let (raw, csv) = match &self.open {
                Some(OpenFile::Csv {
                    headers,
                    fields,
                    base_offset,
                    base_line,
                    ..
                }) => {
                    let raw = RawRecord::Csv {
                        record: &self.record,
                        headers: headers.as_ref(),
                    };
                    (raw, Some((*fields, *base_offset, *base_line)))
                }
                _ => (RawRecord::Line(&self.line_buffer), None),
            };
            let expected_fields = csv.and_then(|(fields, _, _)| fields);
            let file = self.splits.front().map_or("", |s| s.path.as_str());
            let location = RecordLocation { file, line };
            let decoded = match expected_fields {
                _ if let Some(length) = self.oversized => Err(DecodeError::new(format!(
                    "the record takes {length} bytes with its line break, more than the {} a \
                     line may have (raise it with `with_max_record_bytes` on the source); \
                     shown cut",
                    self.max_record_bytes
                ))),
                Some(expected) if self.strict_columns && self.record.len() != expected => {
                    Err(DecodeError::new(format!(
                        "expected {expected} fields, found {} (set `flexible()` on the source \
                         to accept rows of other lengths)",
                        self.record.len()
                    )))
                }
                _ => (self.decoder)(raw, &location),
            };
            match decoded {
                Ok(record) => {
                    // Made only when the attempt traces origins.
                    let position = self.record.position();
                    let cached = &mut self.origin_place;
                    let row_lines = &mut self.row_lines;
                    let row_start = self.row_start;
                    output.collect_from(record, || {
                        let place = match cached {
                            Some((path, place)) if path == file => *place,
                            _ => {
                                let place = OriginPlace::file(file);
                                *cached = Some((file.to_string(), place));
                                place
                            }
                        };
                        place.at(match (csv, position) {
                            (Some((_, base_offset, base_line)), Some(start)) => {
                                let parsed = base_line + start.line() - 1;
                                // An origin is a diagnosis: a file that cannot be read again
                                // leaves it at the line the parse began on.
                                row_lines
                                    .line(file, (base_offset + row_start, parsed))
                                    .unwrap_or(parsed)
                            }
                            _ => line,
                        })
                    });
                    self.limiter.record(1);
                }
                Err(error) => {
                    // A CSV row says where the csv crate began parsing it (before the empty
                    // lines it skips); the line it starts on is found from there.
                    let line = match (csv, self.record.position()) {
                        (Some((_, base_offset, base_line)), Some(start)) => self.row_lines.line(
                            file,
                            (base_offset + self.row_start, base_line + start.line() - 1),
                        )?,
                        _ => line,
                    };
                    let bad = MalformedRecord {
                        origin: RecordOrigin::File {
                            file: file.to_string(),
                            line,
                        },
                        error,
                        raw: raw.to_text(),
                    };
                    let origin = bad.origin.clone();
                    if let Some(dead_letter) = self.malformed.handle(bad)? {
                        output.collect_from(dead_letter, || TracedOrigin::from(&origin));
                        self.limiter.record(1);
                    }
                }
            }
        }
        Ok(InputStatus::MoreAvailable)
    }

    fn poll_delay(&self) -> Duration {
        self.limiter.delay(Duration::from_millis(5))
    }

    fn add_splits(&mut self, splits: Vec<FileSplit>) -> Result<(), BoxError> {
        self.splits.add(splits);
        Ok(())
    }

    fn notify_no_more_splits(&mut self) {
        self.splits.no_more_splits();
    }

    fn set_readers_sharing(&mut self, readers: u32) {
        self.limiter.share_among(readers);
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<FileSplit>, BoxError> {
        Ok(self.splits.snapshot())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_line_is_read_past_without_being_held() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("long.txt");
        std::fs::write(&path, format!("{}\nnext\n", "x".repeat(10 << 20))).unwrap();
        let mut reader = BufReader::new(File::open(&path).unwrap());
        let mut line = Vec::new();
        assert_eq!(
            read_line(&mut reader, &mut line, 1000).unwrap(),
            (10 << 20) + 1
        );
        assert_eq!(line.len(), 1000);
        assert!(line.capacity() < 64 << 10, "{} bytes held", line.capacity());
        line.clear();
        assert_eq!(read_line(&mut reader, &mut line, 1000).unwrap(), 5);
        assert_eq!(line, b"next\n");
    }
}
