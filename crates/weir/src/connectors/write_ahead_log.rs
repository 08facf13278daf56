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
use crate::connectors::sink::{committed_output_error, starts_from_empty_state, Sink, SinkWriter};
use crate::error::BoxError;
use crate::record::Record;

/// The id of one batch: which subtask wrote it, for which checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BatchId {
    /// The epoch of the process that buffered it (kept with the batch in the checkpoint, so
    /// that a commit retried by a later process names the batch the same way).
    pub epoch: u64,
    /// The subtask that buffered it.
    pub subtask: u32,
    /// The checkpoint it belongs to.
    pub checkpoint_id: u64,
}

/// Writes batches to the external system, each id at most once.
pub trait BatchCommitter<T>: Send + 'static {
    /// Called once per subtask at start, after the process was found to hold the job and
    /// before any batch is committed: where the committer claims what its commits need (for
    /// files, a staging directory of this process's epoch) and revokes what stale processes
    /// of older epochs hold, so that their late commits fail instead of landing.
    fn open(&mut self, _context: &RuntimeContext) -> Result<(), BoxError> {
        Ok(())
    }
    /// Called when the subtask ends normally (best effort: a crash skips it).
    fn close(&mut self) -> Result<(), BoxError> {
        Ok(())
    }
    /// Writes `records` as batch `id`, unless batch `id` was written already (then does
    /// nothing). Must be atomic: a crash leaves the batch either written whole or not at all.
    fn commit_batch(&mut self, id: BatchId, records: &[T]) -> Result<(), BoxError>;
    /// Some batch committed already (its name), if the committer can tell: a job that starts
    /// from empty state refuses to start over it.
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
    /// The stream ended: the committer closes once nothing is pending (the final
    /// checkpoint's batch commits after the stream ended).
    closing: bool,
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
            closing: false,
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
        if self.closing && self.pending.is_empty() {
            self.closing = false;
            self.committer.close()?;
        }
        Ok(())
    }
}

impl<T: Record, C: BatchCommitter<T>> SinkWriter<T> for WriteAheadLogWriter<T, C> {
    fn initialize_state(&mut self, ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
        self.context.fencing_token().check()?;
        if starts_from_empty_state(&self.context) {
            if let Some(found) = self.committer.find_committed_output()? {
                return Err(committed_output_error(&self.context, &found));
            }
        }
        self.committer.open(&self.context)?;
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
                epoch: self.context.fencing_token().epoch(),
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
            epoch: self.context.fencing_token().epoch(),
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

    fn close(&mut self) -> Result<(), BoxError> {
        self.closing = true;
        if self.pending.is_empty() {
            self.closing = false;
            self.committer.close()?;
        }
        Ok(())
    }
}

/// A [`BatchCommitter`] writing each batch as one file,
/// `<prefix>-<subtask>-e<epoch>-<checkpoint><suffix>`,
/// written in a staging directory of the committing process and renamed into place: the
/// file's existence is the record that the batch was committed.
///
/// The staging directory (`.staging-<prefix>-e<epoch>-s<subtask>`, hidden in the output
/// directory) is
/// the fence where the effect happens: it is created when a process takes the job, and never
/// again by a commit; a process of a newer epoch removes the older ones when it starts (and a
/// reset moves the whole output directory aside). A process that checked that it holds the
/// job and stalled before it wrote its batch finds its staging directory gone when it wakes
/// up, so its commit fails instead of landing beside the successor's output.
pub struct FileBatchCommitter<T> {
    dir: PathBuf,
    prefix: String,
    suffix: String,
    encoder: Encoder<T>,
    /// This subtask's staging directory, once opened.
    staging: Option<PathBuf>,
}

impl<T> Clone for FileBatchCommitter<T> {
    fn clone(&self) -> Self {
        Self {
            dir: self.dir.clone(),
            prefix: self.prefix.clone(),
            suffix: self.suffix.clone(),
            encoder: self.encoder.clone(),
            staging: None,
        }
    }
}

/// The epoch a staging directory's name carries, if it is one of the sink with batch-file
/// prefix `prefix` (`.staging-<prefix>-e<epoch>-s<subtask>`).
fn staging_epoch(prefix: &str, name: &str) -> Option<u64> {
    name.strip_prefix(".staging-")?
        .strip_prefix(prefix)?
        .strip_prefix("-e")?
        .split('-')
        .next()?
        .parse()
        .ok()
}

impl<T> FileBatchCommitter<T> {
    /// Commits batches into `dir`, encoding records with `encoder`.
    pub fn new(dir: impl AsRef<std::path::Path>, encoder: Encoder<T>) -> Self {
        Self {
            dir: dir.as_ref().to_path_buf(),
            prefix: "batch".into(),
            suffix: String::new(),
            encoder,
            staging: None,
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

impl<T> FileBatchCommitter<T> {
    /// Removes the staging directories of epochs older than `epoch`: renamed away first (the
    /// instant a stale process's commit starts to fail), then deleted.
    fn revoke_older_staging(&self, epoch: u64) -> Result<(), BoxError> {
        let entries = fs::read_dir(&self.dir)
            .map_err(|e| format!("WAL sink: cannot list `{}`: {e}", self.dir.display()))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if staging_epoch(&self.prefix, &name).is_none_or(|e| e >= epoch) {
                continue;
            }
            let revoked = self
                .dir
                .join(format!(".revoked{name}-by-e{epoch}-{}", std::process::id()));
            match fs::rename(entry.path(), &revoked) {
                Ok(()) => {
                    tracing::info!(staging = %entry.path().display(),
                        "WAL sink: revoked the staging directory of an older process");
                    if let Err(e) = fs::remove_dir_all(&revoked) {
                        tracing::warn!(dir = %revoked.display(), error = %e,
                            "WAL sink: cannot delete a revoked staging directory");
                    }
                }
                // Another subtask of this process revoked it first.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(format!(
                        "WAL sink: cannot revoke `{}`: {e}",
                        entry.path().display()
                    )
                    .into())
                }
            }
        }
        // Revoked directories another subtask renamed but could not delete.
        for entry in fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if name.starts_with(&format!(".revoked.staging-{}-e", self.prefix)) {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
        Ok(())
    }
}

impl<T: Send + 'static> BatchCommitter<T> for FileBatchCommitter<T> {
    fn open(&mut self, context: &RuntimeContext) -> Result<(), BoxError> {
        fs::create_dir_all(&self.dir)
            .map_err(|e| format!("WAL sink: cannot create `{}`: {e}", self.dir.display()))?;
        let epoch = context.fencing_token().epoch();
        self.revoke_older_staging(epoch)?;
        let staging = self.dir.join(format!(
            ".staging-{}-e{epoch}-s{}",
            self.prefix,
            context.subtask_index()
        ));
        match fs::create_dir(&staging) {
            Ok(()) => {}
            // This process's own, from an earlier attempt of this run.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(format!("WAL sink: cannot create `{}`: {e}", staging.display()).into())
            }
        }
        self.staging = Some(staging);
        Ok(())
    }

    fn close(&mut self) -> Result<(), BoxError> {
        if let Some(staging) = self.staging.take() {
            if let Err(e) = fs::remove_dir_all(&staging) {
                tracing::warn!(dir = %staging.display(), error = %e,
                    "WAL sink: cannot remove its staging directory");
            }
        }
        Ok(())
    }

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
        // The epoch in the name lets a reset remove what older epochs committed, by name
        // (`output_epochs`).
        let name = if id.checkpoint_id == u64::MAX {
            format!(
                "{}-{}-e{}-final{}",
                self.prefix, id.subtask, id.epoch, self.suffix
            )
        } else {
            format!(
                "{}-{}-e{}-{:020}{}",
                self.prefix, id.subtask, id.epoch, id.checkpoint_id, self.suffix
            )
        };
        let target = self.dir.join(&name);
        let mut bytes = Vec::new();
        for record in records {
            (self.encoder)(record, &mut bytes)?;
        }
        match fs::read(&target) {
            // The same batch, committed before (a commit retried after a crash).
            Ok(existing) if existing == bytes => return Ok(()),
            // Another batch under this name: skipping would lose this one, overwriting
            // would lose that one.
            Ok(existing) => {
                return Err(format!(
                    "WAL sink: cannot commit checkpoint {}'s batch of subtask {} ({} bytes): \
                     `{}` exists already with other content ({} bytes), committed by an earlier \
                     run of the job whose checkpoint ids this run repeats (its checkpoints and \
                     job record were removed). Move that output aside, or restore the job's \
                     checkpoint directory",
                    id.checkpoint_id,
                    id.subtask,
                    bytes.len(),
                    target.display(),
                    existing.len()
                )
                .into())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(format!("WAL sink: cannot read `{}`: {e}", target.display()).into())
            }
        }
        let Some(staging) = &self.staging else {
            return Err("WAL sink: a batch committed before the sink was opened".into());
        };
        let temp = staging.join(format!(".{name}.tmp"));
        // Never `create_dir_all` here: a staging directory that is gone was revoked by a
        // process that took the job over, and this commit must fail.
        let revoked = |e: std::io::Error| -> BoxError {
            if e.kind() == std::io::ErrorKind::NotFound {
                format!(
                    "WAL sink: cannot commit `{}`: this process's staging directory `{}` was \
                     revoked (another process took the job over, or the job was reset); \
                     nothing was committed",
                    target.display(),
                    staging.display()
                )
                .into()
            } else {
                format!("WAL sink: cannot commit `{}`: {e}", target.display()).into()
            }
        };
        let mut file = fs::File::create(&temp).map_err(revoked)?;
        file.write_all(&bytes)
            .and_then(|()| file.sync_all())
            .map_err(|e| format!("WAL sink: cannot write `{}`: {e}", temp.display()))?;
        fs::rename(&temp, &target).map_err(revoked)?;
        fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| format!("WAL sink: cannot fsync `{}`: {e}", self.dir.display()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::fencing::FencingToken;
    use crate::checkpoint::storage::MemoryCheckpointStorage;

    fn context(epoch: u64) -> RuntimeContext {
        let storage = Arc::new(MemoryCheckpointStorage::new("j"));
        RuntimeContext::for_test(0, FencingToken::new("j", epoch, "me", storage, None))
    }

    fn batch(checkpoint_id: u64) -> BatchId {
        BatchId {
            epoch: 1,
            subtask: 0,
            checkpoint_id,
        }
    }

    #[test]
    fn a_successor_revokes_the_staging_of_an_older_process_whose_late_commit_then_fails() {
        let dir = tempfile::tempdir().unwrap();
        let mut stale = FileBatchCommitter::<String>::lines(dir.path());
        stale.open(&context(1)).unwrap();
        stale.commit_batch(batch(1), &["a".into()]).unwrap();
        let mut successor = FileBatchCommitter::<String>::lines(dir.path());
        successor.open(&context(2)).unwrap();
        // The stale process checked its fencing token before the successor started, and
        // commits now: its staging directory is gone, so nothing lands.
        let err = stale
            .commit_batch(batch(2), &["b".into()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("was revoked"), "{err}");
        assert!(!dir.path().join("batch-0-e1-00000000000000000002").exists());
        // The successor commits the same batches: the one committed before is the same, so
        // it stands; a different batch under a committed name is refused, never skipped.
        successor.commit_batch(batch(1), &["a".into()]).unwrap();
        successor.commit_batch(batch(2), &["b".into()]).unwrap();
        let err = successor
            .commit_batch(batch(1), &["other".into()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("exists already with other content"), "{err}");
        successor.close().unwrap();
        let mut names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "batch-0-e1-00000000000000000001",
                "batch-0-e1-00000000000000000002"
            ],
            "no staging directory is left behind"
        );
    }
}
