//! Exactly-once output through a write-ahead log (Flink's `GenericWriteAheadSink`).
//!
//! The records of checkpoint n are kept in operator state; once n completes they are handed
//! to a [`BatchCommitter`] as one batch with a deterministic id (the writing subtask and n).
//! The committer makes each batch id written once — its own record of committed ids is the
//! "committer record" — so a commit retried after a crash writes nothing twice.

use std::fs;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::api::functions::{FunctionStateContext, RuntimeContext};
use crate::connectors::commit_metrics::CommitMetrics;
use crate::connectors::file_sink::Encoder;
use crate::connectors::sink::{committed_output_error, resumes_from_empty_state, Sink, SinkWriter};
use crate::error::BoxError;
use crate::record::Record;

/// The id of one batch: which subtask wrote it, for which checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BatchId {
    /// The subtask that buffered it.
    pub subtask: u32,
    /// The checkpoint it belongs to.
    pub checkpoint_id: u64,
}

/// Writes batches to the external system, each id at most once.
pub trait BatchCommitter<T>: Send + 'static {
    /// Writes `records` as batch `id`, unless batch `id` was written already (then does
    /// nothing). Must be atomic: a crash leaves the batch either written whole or not at all.
    fn commit_batch(&mut self, id: BatchId, records: &[T]) -> Result<(), BoxError>;
    /// Some batch committed already (its name), if the committer can tell: a job asked to
    /// resume that finds no checkpoint refuses to start from empty state over it.
    fn find_committed_output(&mut self) -> Result<Option<String>, BoxError> {
        Ok(None)
    }
}

/// A [`Sink`] buffering records per checkpoint and committing them through `C`; each subtask
/// gets a clone of the committer. Flink's `GenericWriteAheadSink`: for systems without
/// transactions whose writes of one batch can be made idempotent.
///
/// ```
/// use std::time::Duration;
/// use weir::prelude::*;
/// use weir::connectors::file_sink::committed_files;
/// use weir::connectors::write_ahead_log::{FileBatchCommitter, WriteAheadLog};
///
/// let out = tempfile::tempdir()?;
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))?;
/// env.enable_checkpointing(Duration::from_millis(50));
/// env.generate(500, |i| i.to_string())
///     .sink_to(WriteAheadLog(FileBatchCommitter::lines(out.path())), "batches");
/// env.execute("write-ahead log")?;
/// let lines: usize = committed_files(out.path())?
///     .iter()
///     .map(|f| std::fs::read_to_string(f).map(|t| t.lines().count()))
///     .sum::<std::io::Result<usize>>()?;
/// assert_eq!(lines, 500);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct WriteAheadLog<C>(pub C);

const PENDING_STATE: &str = "write-ahead-log";

/// The writer of one [`WriteAheadLog`] subtask.
pub struct WriteAheadLogWriter<T, C> {
    committer: C,
    context: RuntimeContext,
    current: Vec<T>,
    pending: Vec<(BatchId, Vec<T>)>,
    metrics: CommitMetrics,
}

impl<T: Record, C: BatchCommitter<T> + Clone> Sink<T> for WriteAheadLog<C> {
    type Writer = WriteAheadLogWriter<T, C>;
    fn create_writer(&self, context: &RuntimeContext) -> Result<Self::Writer, BoxError> {
        Ok(WriteAheadLogWriter {
            committer: self.0.clone(),
            context: context.clone(),
            current: Vec::new(),
            pending: Vec::new(),
            metrics: CommitMetrics::new(context),
        })
    }
}

impl<T: Record, C: BatchCommitter<T>> WriteAheadLogWriter<T, C> {
    fn commit_up_to(&mut self, checkpoint_id: u64) -> Result<(), BoxError> {
        self.pending.sort_by_key(|(id, _)| *id);
        while self
            .pending
            .first()
            .is_some_and(|(id, _)| id.checkpoint_id <= checkpoint_id)
        {
            let (id, records) = self.pending.remove(0);
            // A process that lost its job commits nothing more.
            self.context.fencing_token().check()?;
            self.committer.commit_batch(id, &records)?;
            self.metrics.committed(Some(id.checkpoint_id));
        }
        self.metrics.set_pending(self.pending.len());
        Ok(())
    }
}

impl<T: Record, C: BatchCommitter<T>> SinkWriter<T> for WriteAheadLogWriter<T, C> {
    fn initialize_state(&mut self, ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
        self.context.fencing_token().check()?;
        if resumes_from_empty_state(&self.context) {
            if let Some(found) = self.committer.find_committed_output()? {
                return Err(committed_output_error(&self.context, &found));
            }
        }
        // Batches in a restored checkpoint belong to completed checkpoints: commit them now,
        // covering completion notices lost in the crash.
        self.pending = ctx.operator_state().get_list(PENDING_STATE)?;
        self.commit_up_to(u64::MAX)
    }

    fn write(&mut self, record: T) -> Result<(), BoxError> {
        self.current.push(record);
        Ok(())
    }

    fn flush(&mut self, end_of_input: bool) -> Result<(), BoxError> {
        if end_of_input && !self.context.is_checkpointing() {
            let id = BatchId {
                subtask: self.context.subtask_index(),
                checkpoint_id: u64::MAX,
            };
            self.pending.push((id, std::mem::take(&mut self.current)));
            self.commit_up_to(u64::MAX)?;
        }
        Ok(())
    }

    fn snapshot_state(&mut self, ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
        let checkpoint_id = ctx
            .checkpoint_id()
            .ok_or("snapshot without a checkpoint id")?;
        let id = BatchId {
            subtask: self.context.subtask_index(),
            checkpoint_id,
        };
        self.pending.push((id, std::mem::take(&mut self.current)));
        self.metrics
            .pre_committed(checkpoint_id, self.pending.len());
        ctx.operator_state()
            .update_list(PENDING_STATE, &self.pending)?;
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), BoxError> {
        self.commit_up_to(checkpoint_id)
    }
}

/// A [`BatchCommitter`] writing each batch as one file, `<prefix>-<subtask>-<checkpoint><suffix>`,
/// created under a hidden temporary name and renamed into place: the file's existence is the
/// record that the batch was committed.
pub struct FileBatchCommitter<T> {
    dir: PathBuf,
    prefix: String,
    suffix: String,
    encoder: Encoder<T>,
}

impl<T> Clone for FileBatchCommitter<T> {
    fn clone(&self) -> Self {
        Self {
            dir: self.dir.clone(),
            prefix: self.prefix.clone(),
            suffix: self.suffix.clone(),
            encoder: self.encoder.clone(),
        }
    }
}

impl<T> FileBatchCommitter<T> {
    /// Commits batches into `dir`, encoding records with `encoder`.
    pub fn new(dir: impl AsRef<std::path::Path>, encoder: Encoder<T>) -> Self {
        Self {
            dir: dir.as_ref().to_path_buf(),
            prefix: "batch".into(),
            suffix: String::new(),
            encoder,
        }
    }
    /// Sets the suffix of batch files.
    pub fn with_suffix(mut self, suffix: impl Into<String>) -> Self {
        self.suffix = suffix.into();
        self
    }
}

impl<T: std::fmt::Display> FileBatchCommitter<T> {
    /// Commits batches as lines (each record's `Display`).
    pub fn lines(dir: impl AsRef<std::path::Path>) -> Self {
        Self::new(
            dir,
            Arc::new(|record: &T, out: &mut Vec<u8>| {
                writeln!(out, "{record}")?;
                Ok(())
            }),
        )
    }
}

impl<T: Send + 'static> BatchCommitter<T> for FileBatchCommitter<T> {
    fn find_committed_output(&mut self) -> Result<Option<String>, BoxError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(format!("WAL sink: cannot list `{}`: {e}", self.dir.display()).into())
            }
        };
        let start = format!("{}-", self.prefix);
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if name.starts_with(&start) && name.ends_with(&self.suffix) {
                return Ok(Some(format!("`{}`", entry.path().display())));
            }
        }
        Ok(None)
    }

    fn commit_batch(&mut self, id: BatchId, records: &[T]) -> Result<(), BoxError> {
        let name = if id.checkpoint_id == u64::MAX {
            format!("{}-{}-final{}", self.prefix, id.subtask, self.suffix)
        } else {
            format!(
                "{}-{}-{:020}{}",
                self.prefix, id.subtask, id.checkpoint_id, self.suffix
            )
        };
        let target = self.dir.join(&name);
        if target.exists() {
            return Ok(());
        }
        fs::create_dir_all(&self.dir)
            .map_err(|e| format!("WAL sink: cannot create `{}`: {e}", self.dir.display()))?;
        let mut bytes = Vec::new();
        for record in records {
            (self.encoder)(record, &mut bytes)?;
        }
        let temp = self.dir.join(format!(".{name}.tmp"));
        let mut file = fs::File::create(&temp)
            .map_err(|e| format!("WAL sink: cannot create `{}`: {e}", temp.display()))?;
        file.write_all(&bytes)
            .and_then(|()| file.sync_all())
            .map_err(|e| format!("WAL sink: cannot write `{}`: {e}", temp.display()))?;
        fs::rename(&temp, &target)
            .map_err(|e| format!("WAL sink: cannot commit `{}`: {e}", target.display()))?;
        fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| format!("WAL sink: cannot fsync `{}`: {e}", self.dir.display()))?;
        Ok(())
    }
}
