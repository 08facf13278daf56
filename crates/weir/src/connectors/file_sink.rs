//! The transactional file sink (Flink's `FileSink` with exactly-once part files).
//!
//! A subtask writes records into an in-progress part file (`.part-<subtask>-<token>-<n>.inprogress`).
//! A part rolls when it reaches a size or an age, and at every checkpoint: rolling closes it,
//! fsyncs it and renames it to `.….pending` — durable, still hidden. When the checkpoint
//! completes the pending parts are renamed to their final names (`part-<subtask>-<token>-<n>`
//! plus a suffix), atomically and idempotently. Readers take only files whose names do not start
//! with a dot, so they never see partial or uncommitted data. On recovery the pending parts of
//! the restored checkpoint are committed and every other in-progress or pending part this
//! subtask left behind is deleted.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::api::functions::RuntimeContext;
use crate::connectors::sink::Sink;
use crate::connectors::two_phase_commit::{
    TwoPhaseCommit, TwoPhaseCommitSink, TwoPhaseCommitWriter,
};
use crate::error::BoxError;

/// Encodes one record into bytes appended to a part file (a line, a CSV row…).
pub type Encoder<T> = Arc<dyn Fn(&T, &mut Vec<u8>) -> Result<(), BoxError> + Send + Sync>;

/// When a part file is closed and a new one started (besides at every checkpoint).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RollingPolicy {
    /// Roll once a part holds this many bytes.
    pub max_part_size: Option<u64>,
    /// Roll once a part has been open this long.
    pub rollover_interval: Option<Duration>,
}

/// The part files of one transaction: names relative to the output directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileTransaction {
    /// Unique token of the transaction, part of every file name.
    pub token: String,
    /// Subtask index that wrote it.
    pub subtask: u32,
    /// Part numbers rolled so far (each is pending once pre-committed).
    pub parts: Vec<u32>,
}

/// The exactly-once file sink (Flink's `FileSink`): give it to
/// [`sink_to`](crate::DataStream::sink_to) as it is. Part files become visible when the
/// checkpoint that covers them completes, or at the end of a bounded job.
///
/// ```
/// use weir::prelude::*;
/// use weir::connectors::file_sink::committed_files;
///
/// let out = tempfile::tempdir()?;
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))?;
/// env.generate(100, |i| (i, i * i)).sink_to(FileSink::csv(out.path()), "squares");
/// env.execute("squares")?;
/// let rows: usize = committed_files(out.path())?
///     .iter()
///     .map(|f| std::fs::read_to_string(f).map(|text| text.lines().count()))
///     .sum::<std::io::Result<usize>>()?;
/// assert_eq!(rows, 100);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct FileSink<T> {
    dir: PathBuf,
    prefix: String,
    suffix: String,
    rolling: RollingPolicy,
    encoder: Encoder<T>,
}

impl<T> Clone for FileSink<T> {
    fn clone(&self) -> Self {
        Self {
            dir: self.dir.clone(),
            prefix: self.prefix.clone(),
            suffix: self.suffix.clone(),
            rolling: self.rolling,
            encoder: self.encoder.clone(),
        }
    }
}

impl<T: std::fmt::Display> FileSink<T> {
    /// A sink writing each record as a line (its `Display`) into `dir`.
    pub fn lines(dir: impl AsRef<Path>) -> Self {
        Self::new(
            dir,
            Arc::new(|record: &T, out: &mut Vec<u8>| {
                writeln!(out, "{record}")?;
                Ok(())
            }),
        )
    }
}

impl<T: Serialize> FileSink<T> {
    /// A sink writing each record as a CSV row (no header) into `dir`.
    pub fn csv(dir: impl AsRef<Path>) -> Self {
        Self::new(
            dir,
            Arc::new(|record: &T, out: &mut Vec<u8>| {
                let mut writer = csv::WriterBuilder::new()
                    .has_headers(false)
                    .from_writer(Vec::new());
                writer.serialize(record)?;
                out.extend_from_slice(&writer.into_inner().map_err(|e| e.to_string())?);
                Ok(())
            }),
        )
        .with_suffix(".csv")
    }
}

impl<T: Serialize> FileSink<T> {
    /// A sink writing each record as one line of JSON (JSON Lines) into `dir`, with the
    /// suffix `.jsonl`: the form for records with nested or free text, such as dead letters.
    pub fn json_lines(dir: impl AsRef<Path>) -> Self {
        Self::new(
            dir,
            Arc::new(|record: &T, out: &mut Vec<u8>| {
                serde_json::to_writer(&mut *out, record)?;
                out.push(b'\n');
                Ok(())
            }),
        )
        .with_suffix(".jsonl")
    }
}

impl<T> FileSink<T> {
    /// A sink encoding records with `encoder` into `dir`.
    pub fn new(dir: impl AsRef<Path>, encoder: Encoder<T>) -> Self {
        Self {
            dir: dir.as_ref().to_path_buf(),
            prefix: "part".into(),
            suffix: String::new(),
            rolling: RollingPolicy::default(),
            encoder,
        }
    }
    /// Sets the part file prefix (default `part`).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }
    /// Sets the suffix of committed files (for example `.csv`).
    pub fn with_suffix(mut self, suffix: impl Into<String>) -> Self {
        self.suffix = suffix.into();
        self
    }
    /// Sets the rolling policy.
    pub fn with_rolling_policy(mut self, rolling: RollingPolicy) -> Self {
        self.rolling = rolling;
        self
    }
    /// The sink as the [`TwoPhaseCommitSink`] it runs as, wrapped for `sink_to` (a
    /// `FileSink` is a [`Sink`] itself; this is for code that composes two-phase-commit
    /// sinks).
    pub fn into_two_phase_commit_sink(self) -> TwoPhaseCommit<FileSinkCore<T>> {
        TwoPhaseCommit(FileSinkCore {
            config: self,
            open: None,
            nonce: 0,
            scratch: Vec::new(),
        })
    }
}

impl<T: Send + 'static> Sink<T> for FileSink<T> {
    type Writer = TwoPhaseCommitWriter<T, FileSinkCore<T>>;
    fn create_writer(&self, context: &RuntimeContext) -> Result<Self::Writer, BoxError> {
        self.clone()
            .into_two_phase_commit_sink()
            .create_writer(context)
    }
}

/// The part currently written.
struct OpenPart {
    path: PathBuf,
    token: String,
    number: u32,
    writer: BufWriter<File>,
    bytes: u64,
    opened: Instant,
}

/// The per-subtask state of a [`FileSink`].
pub struct FileSinkCore<T> {
    config: FileSink<T>,
    open: Option<OpenPart>,
    nonce: u64,
    scratch: Vec<u8>,
}

impl<T> Clone for FileSinkCore<T> {
    fn clone(&self) -> Self {
        Self {
            config: self.config.clone(),
            open: None,
            nonce: 0,
            scratch: Vec::new(),
        }
    }
}

fn io_error(action: &str, path: &Path, e: std::io::Error) -> BoxError {
    format!("file sink: cannot {action} `{}`: {e}", path.display()).into()
}

fn fsync_dir(dir: &Path) -> Result<(), BoxError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error("fsync directory", dir, e))
}

impl<T> FileSinkCore<T> {
    fn base(&self, subtask: u32, token: &str, number: u32) -> String {
        format!("{}-{subtask}-{token}-{number}", self.config.prefix)
    }
    fn in_progress(&self, subtask: u32, token: &str, number: u32) -> PathBuf {
        self.config
            .dir
            .join(format!(".{}.inprogress", self.base(subtask, token, number)))
    }
    fn pending(&self, subtask: u32, token: &str, number: u32) -> PathBuf {
        self.config
            .dir
            .join(format!(".{}.pending", self.base(subtask, token, number)))
    }
    fn committed(&self, subtask: u32, token: &str, number: u32) -> PathBuf {
        self.config.dir.join(format!(
            "{}{}",
            self.base(subtask, token, number),
            self.config.suffix
        ))
    }

    /// Closes the open part of `transaction` (flush, fsync) and renames it to pending.
    fn roll(&mut self, transaction: &mut FileTransaction) -> Result<(), BoxError> {
        let Some(part) = self.open.take() else {
            return Ok(());
        };
        let path = self.in_progress(transaction.subtask, &part.token, part.number);
        let file = part
            .writer
            .into_inner()
            .map_err(|e| io_error("flush", &path, e.into_error()))?;
        file.sync_all().map_err(|e| io_error("fsync", &path, e))?;
        let pending = self.pending(transaction.subtask, &part.token, part.number);
        fs::rename(&path, &pending).map_err(|e| io_error("rename", &path, e))?;
        transaction.parts.push(part.number);
        Ok(())
    }

    /// Files of this sink (by prefix) in the output directory that are hidden parts of
    /// `subtask` (or of any subtask at or above `parallelism`, which no subtask owns now).
    fn hidden_parts(&self, subtask: u32, parallelism: u32) -> Result<Vec<PathBuf>, BoxError> {
        let mut found = Vec::new();
        let entries =
            fs::read_dir(&self.config.dir).map_err(|e| io_error("list", &self.config.dir, e))?;
        let start = format!(".{}-", self.config.prefix);
        for entry in entries {
            let entry = entry.map_err(|e| io_error("list", &self.config.dir, e))?;
            let name = entry.file_name().to_string_lossy().to_string();
            let Some(rest) = name.strip_prefix(&start) else {
                continue;
            };
            if !(name.ends_with(".inprogress") || name.ends_with(".pending")) {
                continue;
            }
            let owner: Option<u32> = rest.split('-').next().and_then(|s| s.parse().ok());
            let ours =
                owner == Some(subtask) || (subtask == 0 && owner.is_some_and(|o| o >= parallelism));
            if ours {
                found.push(entry.path());
            }
        }
        Ok(found)
    }
}

impl<T: Send + 'static> TwoPhaseCommitSink<T> for FileSinkCore<T> {
    type Transaction = FileTransaction;

    fn find_committed_output(
        &mut self,
        _context: &RuntimeContext,
    ) -> Result<Option<String>, BoxError> {
        let entries = match fs::read_dir(&self.config.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error("list", &self.config.dir, e)),
        };
        let start = format!("{}-", self.config.prefix);
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if name.starts_with(&start) && name.ends_with(&self.config.suffix) {
                return Ok(Some(format!("`{}`", entry.path().display())));
            }
        }
        Ok(None)
    }

    fn abort_lingering(
        &mut self,
        context: &RuntimeContext,
        known: &[FileTransaction],
    ) -> Result<(), BoxError> {
        fs::create_dir_all(&self.config.dir)
            .map_err(|e| io_error("create", &self.config.dir, e))?;
        let mut referenced: Vec<PathBuf> = Vec::new();
        for t in known {
            for n in &t.parts {
                referenced.push(self.pending(t.subtask, &t.token, *n));
            }
        }
        for path in self.hidden_parts(context.subtask_index(), context.parallelism())? {
            if !referenced.contains(&path) {
                tracing::info!(file = %path.display(), "file sink: removing a part left by an earlier run");
                match fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io_error("remove", &path, e)),
                }
            }
        }
        Ok(())
    }

    fn begin_transaction(&mut self, context: &RuntimeContext) -> Result<FileTransaction, BoxError> {
        self.nonce += 1;
        let clock = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        // The epoch tells which process wrote a file; the clock, process id and counter make
        // the token unique within it.
        Ok(FileTransaction {
            token: format!(
                "e{}x{:x}{:04x}{}",
                context.fencing_token().epoch(),
                clock,
                std::process::id() & 0xffff,
                self.nonce
            ),
            subtask: context.subtask_index(),
            parts: Vec::new(),
        })
    }

    fn write(&mut self, transaction: &mut FileTransaction, record: T) -> Result<(), BoxError> {
        let rolling = self.config.rolling;
        if let Some(part) = &self.open {
            let too_big = rolling.max_part_size.is_some_and(|max| part.bytes >= max);
            let too_old = rolling
                .rollover_interval
                .is_some_and(|age| part.opened.elapsed() >= age);
            if too_big || too_old || part.token != transaction.token {
                self.roll(transaction)?;
            }
        }
        if self.open.is_none() {
            let number = transaction.parts.len() as u32;
            let path = self.in_progress(transaction.subtask, &transaction.token, number);
            let file = File::create(&path).map_err(|e| io_error("create", &path, e))?;
            self.open = Some(OpenPart {
                path,
                token: transaction.token.clone(),
                number,
                writer: BufWriter::with_capacity(64 * 1024, file),
                bytes: 0,
                opened: Instant::now(),
            });
        }
        self.scratch.clear();
        (self.config.encoder)(&record, &mut self.scratch)?;
        if let Some(part) = self.open.as_mut() {
            part.writer
                .write_all(&self.scratch)
                .map_err(|e| io_error("write", &part.path, e))?;
            part.bytes += self.scratch.len() as u64;
        }
        Ok(())
    }

    fn pre_commit(&mut self, transaction: &mut FileTransaction) -> Result<(), BoxError> {
        if self
            .open
            .as_ref()
            .is_some_and(|p| p.token == transaction.token)
        {
            self.roll(transaction)?;
        }
        if !transaction.parts.is_empty() {
            fsync_dir(&self.config.dir)?;
        }
        Ok(())
    }

    fn commit(&mut self, transaction: &FileTransaction) -> Result<(), BoxError> {
        for &number in &transaction.parts {
            let pending = self.pending(transaction.subtask, &transaction.token, number);
            let committed = self.committed(transaction.subtask, &transaction.token, number);
            match fs::rename(&pending, &committed) {
                Ok(()) => {}
                // Committed already (a retried commit, or another subtask after a rescale).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && committed.exists() => {}
                Err(e) => {
                    return Err(format!(
                        "file sink: cannot commit `{}` ({e}): this part of a completed \
                         checkpoint's transaction is no longer pending, and `{}` does not exist \
                         either, so the output directory was changed outside the job (files \
                         removed or moved, or the job reset while this process ran) and these \
                         rows are missing from it. Put the output directory back to resume \
                         exactly, or start the job over (`weir reset <checkpoint dir>/<job> \
                         --output {}`)",
                        pending.display(),
                        committed.display(),
                        self.config.dir.display()
                    )
                    .into())
                }
            }
        }
        if !transaction.parts.is_empty() {
            fsync_dir(&self.config.dir)?;
        }
        Ok(())
    }

    fn abort(&mut self, transaction: &FileTransaction) -> Result<(), BoxError> {
        if self
            .open
            .as_ref()
            .is_some_and(|p| p.token == transaction.token)
        {
            if let Some(part) = self.open.take() {
                let path = self.in_progress(transaction.subtask, &part.token, part.number);
                drop(part);
                let _ = fs::remove_file(path);
            }
        }
        for &number in &transaction.parts {
            let _ = fs::remove_file(self.pending(transaction.subtask, &transaction.token, number));
        }
        let next = transaction.parts.len() as u32;
        let _ = fs::remove_file(self.in_progress(transaction.subtask, &transaction.token, next));
        Ok(())
    }
}

/// Reads the committed files of a file sink's output directory: every file whose name does not
/// start with a dot, in name order.
pub fn committed_files(dir: impl AsRef<Path>) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir.as_ref())?
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_neither_pending_nor_committed_is_named_with_the_way_on() {
        let dir = tempfile::tempdir().unwrap();
        let TwoPhaseCommit(mut core) = FileSink::<String>::lines(dir.path())
            .with_suffix(".csv")
            .into_two_phase_commit_sink();
        let gone = FileTransaction {
            token: "e3x1".into(),
            subtask: 0,
            parts: vec![0],
        };
        let err = TwoPhaseCommitSink::<String>::commit(&mut core, &gone)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(".part-0-e3x1-0.pending")
                && err.contains("part-0-e3x1-0.csv` does not exist")
                && err.contains("Put the output directory back")
                && err.contains(&format!("--output {}", dir.path().display())),
            "{err}"
        );
        // Committed before (by another process that took the job over): nothing to do.
        std::fs::write(dir.path().join("part-0-e3x1-0.csv"), b"x\n").unwrap();
        TwoPhaseCommitSink::<String>::commit(&mut core, &gone).unwrap();
    }
}
