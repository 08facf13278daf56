//! Checkpointing settings, with Flink's names and defaults where sensible.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::checkpoint::recovery::CorruptCheckpointPolicy;
use crate::error::ConfigError;

/// Guarantee that checkpoints give.
///
/// ```
/// use std::time::Duration;
/// use weir::prelude::*;
/// // No alignment: lower latency under backpressure, but records may count twice after a recovery.
/// let config = CheckpointConfig::default()
///     .with_interval(Duration::from_secs(1))
///     .with_mode(CheckpointingMode::AtLeastOnce);
/// assert_eq!(config.mode, CheckpointingMode::AtLeastOnce);
/// assert_eq!(CheckpointConfig::default().mode, CheckpointingMode::ExactlyOnce);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointingMode {
    /// Barriers are aligned: state reflects each record exactly once.
    ExactlyOnce,
    /// Barriers are not aligned: after a recovery some records may be counted twice, none lost.
    AtLeastOnce,
}

/// Where checkpoints are written. In memory unless a directory is chosen, as Flink's
/// default (`JobManagerCheckpointStorage`) is: Weir writes no directory the user did not
/// name.
///
/// ```
/// use weir::prelude::*;
/// let config = CheckpointConfig::default()
///     .with_interval(std::time::Duration::from_secs(1))
///     .with_storage(CheckpointStorageConfig::directory("/var/lib/weir/checkpoints"));
/// assert_eq!(CheckpointConfig::default().storage, CheckpointStorageConfig::Memory);
/// # let _ = config;
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointStorageConfig {
    /// In this process's memory; for tests (lost when the process exits).
    Memory,
    /// Under a directory: `<dir>/<job>/chk-<id>/`.
    FileSystem(PathBuf),
    /// At a URL whose scheme a registered storage serves (`s3://bucket/prefix`, `gs://…`,
    /// `az://…`; see [`register_storage_scheme`](crate::checkpoint::storage::register_storage_scheme)):
    /// `<url>/<job>/chk-<id>/`.
    Url(String),
}

impl CheckpointStorageConfig {
    /// Under the directory `dir`: `<dir>/<job>/chk-<id>/`.
    pub fn directory(dir: impl AsRef<std::path::Path>) -> Self {
        CheckpointStorageConfig::FileSystem(dir.as_ref().to_path_buf())
    }
    /// The storage a URL names: `file:///dir` (or a plain path) is a directory, `memory:` is
    /// this process's memory, any other scheme (`s3://bucket/prefix`, …) is served by the
    /// storage registered for it.
    ///
    /// ```
    /// use weir::prelude::*;
    /// assert_eq!(
    ///     CheckpointStorageConfig::from_url("file:///var/lib/weir"),
    ///     CheckpointStorageConfig::directory("/var/lib/weir")
    /// );
    /// assert_eq!(
    ///     CheckpointStorageConfig::from_url("s3://bucket/checkpoints"),
    ///     CheckpointStorageConfig::Url("s3://bucket/checkpoints".into())
    /// );
    /// ```
    pub fn from_url(url: &str) -> Self {
        if let Some(path) = url.strip_prefix("file://") {
            return CheckpointStorageConfig::FileSystem(PathBuf::from(path));
        }
        if url == "memory:" || url == "memory://" {
            return CheckpointStorageConfig::Memory;
        }
        match url.split_once("://") {
            Some((scheme, _)) if !scheme.is_empty() && !scheme.contains('/') => {
                CheckpointStorageConfig::Url(url.to_string())
            }
            _ => CheckpointStorageConfig::FileSystem(PathBuf::from(url)),
        }
    }

    /// Whether checkpoints outlive this process (a directory or a URL, not memory).
    pub fn is_durable(&self) -> bool {
        !matches!(self, CheckpointStorageConfig::Memory)
    }

    /// Under `dir` when given, else in memory.
    pub fn directory_or_memory(dir: Option<std::path::PathBuf>) -> Self {
        match dir {
            Some(dir) => CheckpointStorageConfig::FileSystem(dir),
            None => CheckpointStorageConfig::Memory,
        }
    }
}

/// What happens to retained checkpoints when the job is cancelled
/// (Flink's `ExternalizedCheckpointRetention`).
///
/// ```
/// use weir::prelude::*;
/// // Keep the latest checkpoints when the job is cancelled, to resume it later.
/// let config = CheckpointConfig::default()
///     .with_storage(CheckpointStorageConfig::directory("/var/lib/weir/checkpoints"))
///     .with_retention_on_cancel(RetentionOnCancel::Retain);
/// assert_eq!(config.retention_on_cancel, RetentionOnCancel::Retain);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetentionOnCancel {
    /// Delete them.
    Delete,
    /// Keep them, so the job can be resumed from the latest one.
    Retain,
}

/// Checkpointing settings of a job.
///
/// ```
/// use std::time::Duration;
/// use weir::prelude::*;
/// let checkpoints = CheckpointConfig::default()
///     .with_interval(Duration::from_secs(10))
///     .with_timeout(Duration::from_secs(60))
///     .with_min_pause(Duration::from_secs(1))
///     .with_tolerable_failures(3)
///     .with_retained(2)
///     .with_storage(CheckpointStorageConfig::directory("/var/lib/weir/checkpoints"));
/// let config = ExecutionConfig::default().with_checkpointing(checkpoints);
/// assert!(config.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointConfig {
    /// Time between two checkpoint triggers; `None` disables periodic checkpoints
    /// (`execution.checkpointing.interval`).
    pub interval: Option<Duration>,
    /// Exactly-once (aligned) or at-least-once.
    pub mode: CheckpointingMode,
    /// A checkpoint not complete after this long expires (`execution.checkpointing.timeout`).
    pub timeout: Duration,
    /// Least time between the end of one checkpoint and the trigger of the next
    /// (`execution.checkpointing.min-pause`).
    pub min_pause: Duration,
    /// Checkpoints in flight at once (`execution.checkpointing.max-concurrent-checkpoints`).
    pub max_concurrent: u32,
    /// Consecutive failed checkpoints tolerated before the job fails
    /// (`execution.checkpointing.tolerable-failed-checkpoints`).
    pub tolerable_failures: u32,
    /// Completed checkpoints kept (`state.checkpoints.num-retained`).
    pub retained: u32,
    /// What cancellation does to retained checkpoints.
    pub retention_on_cancel: RetentionOnCancel,
    /// Where checkpoints go.
    pub storage: CheckpointStorageConfig,
    /// A second copy of every checkpoint file — state files, metadata and the job record —
    /// under this directory, as Flink's task-local recovery keeps
    /// (`state.backend.local-recovery`): recovery reads whichever copy verifies, so a damaged
    /// or deleted file does not make the newest checkpoint unrestorable. Needs filesystem
    /// storage; off by default.
    pub local_recovery: Option<PathBuf>,
    /// What recovery may do when the checkpoint it must restore is corrupt or missing
    /// (`recovery.fallback-on-corrupt-checkpoint`).
    pub corrupt_checkpoint_policy: CorruptCheckpointPolicy,
    /// A subtask's operator list state larger than this many bytes goes into a file of the
    /// checkpoint, written by the snapshot's asynchronous part, rather than into its
    /// metadata (`state.storage.fs.memory-threshold`, 20 KiB as in Flink).
    pub state_file_threshold: u64,
    /// Unaligned checkpoints (Flink's FLIP-76, `execution.checkpointing.unaligned.enabled`):
    /// a periodic checkpoint's barriers overtake the records in flight, which are stored as
    /// the checkpoint's channel state, so that a checkpoint under backpressure takes as long
    /// as the barriers' trip rather than the draining of every queue. Savepoints and the
    /// final checkpoint stay aligned. Needs exactly-once mode.
    pub unaligned: bool,
    /// With unaligned checkpoints on, a task first aligns its barriers and switches to an
    /// unaligned snapshot only when the alignment has lasted this long
    /// (`execution.checkpointing.aligned-checkpoint-timeout`; zero, the default, as in Flink:
    /// unaligned from the first barrier).
    pub aligned_checkpoint_timeout: Duration,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        Self {
            interval: None,
            mode: CheckpointingMode::ExactlyOnce,
            timeout: Duration::from_secs(600),
            min_pause: Duration::ZERO,
            max_concurrent: 1,
            tolerable_failures: 0,
            retained: 1,
            retention_on_cancel: RetentionOnCancel::Delete,
            storage: CheckpointStorageConfig::Memory,
            local_recovery: None,
            state_file_threshold: 20 << 10,
            corrupt_checkpoint_policy: CorruptCheckpointPolicy::Refuse,
            unaligned: false,
            aligned_checkpoint_timeout: Duration::ZERO,
        }
    }
}

impl CheckpointConfig {
    /// Enables periodic checkpoints every `interval`.
    pub fn with_interval(mut self, interval: Duration) -> Self {
        self.interval = Some(interval);
        self
    }
    /// Sets the mode.
    pub fn with_mode(mut self, mode: CheckpointingMode) -> Self {
        self.mode = mode;
        self
    }
    /// Sets the timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
    /// Sets the minimum pause between checkpoints.
    pub fn with_min_pause(mut self, min_pause: Duration) -> Self {
        self.min_pause = min_pause;
        self
    }
    /// Sets the number of concurrent checkpoints.
    pub fn with_max_concurrent(mut self, max_concurrent: u32) -> Self {
        self.max_concurrent = max_concurrent;
        self
    }
    /// Sets the number of tolerated consecutive checkpoint failures.
    pub fn with_tolerable_failures(mut self, failures: u32) -> Self {
        self.tolerable_failures = failures;
        self
    }
    /// Sets the number of retained completed checkpoints.
    pub fn with_retained(mut self, retained: u32) -> Self {
        self.retained = retained;
        self
    }
    /// Sets what cancellation does to retained checkpoints.
    pub fn with_retention_on_cancel(mut self, retention: RetentionOnCancel) -> Self {
        self.retention_on_cancel = retention;
        self
    }
    /// Sets the checkpoint storage.
    pub fn with_storage(mut self, storage: CheckpointStorageConfig) -> Self {
        self.storage = storage;
        self
    }

    /// Keeps a second copy of every checkpoint file under `dir` (task-local recovery).
    pub fn with_local_recovery(mut self, dir: impl AsRef<std::path::Path>) -> Self {
        self.local_recovery = Some(dir.as_ref().to_path_buf());
        self
    }
    /// Puts a subtask's operator list state larger than `bytes` into a state file rather than
    /// into the checkpoint metadata (`state.storage.fs.memory-threshold`).
    pub fn with_state_file_threshold(mut self, bytes: u64) -> Self {
        self.state_file_threshold = bytes;
        self
    }
    /// Turns unaligned checkpoints on or off (`execution.checkpointing.unaligned.enabled`).
    pub fn with_unaligned(mut self, unaligned: bool) -> Self {
        self.unaligned = unaligned;
        self
    }
    /// Aligns first and switches to an unaligned snapshot after `timeout` of alignment
    /// (`execution.checkpointing.aligned-checkpoint-timeout`); only with unaligned checkpoints on.
    pub fn with_aligned_checkpoint_timeout(mut self, timeout: Duration) -> Self {
        self.aligned_checkpoint_timeout = timeout;
        self
    }
    /// Sets what recovery may do when the checkpoint it must restore is unusable.
    pub fn with_corrupt_checkpoint_policy(mut self, policy: CorruptCheckpointPolicy) -> Self {
        self.corrupt_checkpoint_policy = policy;
        self
    }

    /// Rejects invalid values and combinations, saying why.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |option: &'static str, value: String, reason: &str| ConfigError {
            option,
            value,
            reason: reason.to_string(),
        };
        if let Some(interval) = self.interval {
            if interval < Duration::from_millis(10) {
                return Err(err(
                    "checkpoint.interval",
                    format!("{interval:?}"),
                    "must be at least 10 ms",
                ));
            }
        }
        if self.timeout < Duration::from_millis(10) {
            return Err(err(
                "checkpoint.timeout",
                format!("{:?}", self.timeout),
                "must be at least 10 ms",
            ));
        }
        if self.unaligned && self.mode != CheckpointingMode::ExactlyOnce {
            return Err(err(
                "checkpoint.unaligned",
                "true".into(),
                "unaligned checkpoints need exactly-once mode (at-least-once never aligns)",
            ));
        }
        if !self.aligned_checkpoint_timeout.is_zero() && !self.unaligned {
            return Err(err(
                "checkpoint.aligned_checkpoint_timeout",
                format!("{:?}", self.aligned_checkpoint_timeout),
                "only applies with unaligned checkpoints on (`execution.checkpointing.unaligned.enabled: true`)",
            ));
        }
        if self.max_concurrent == 0 {
            return Err(err(
                "checkpoint.max_concurrent",
                "0".into(),
                "must be at least 1",
            ));
        }
        if !self.min_pause.is_zero() && self.max_concurrent > 1 {
            return Err(err(
                "checkpoint.min_pause",
                format!("{:?}", self.min_pause),
                &format!(
                    "a minimum pause between checkpoints cannot be combined with max_concurrent = {} \
                     (a pause only makes sense when checkpoints run one at a time)",
                    self.max_concurrent
                ),
            ));
        }
        if self.retained == 0 {
            return Err(err(
                "checkpoint.retained",
                "0".into(),
                "must be at least 1: recovery needs the latest completed checkpoint",
            ));
        }
        if let CheckpointStorageConfig::Url(url) = &self.storage {
            if url
                .split_once("://")
                .is_none_or(|(_, rest)| rest.is_empty())
            {
                return Err(err(
                    "checkpoint.storage",
                    url.clone(),
                    "expected scheme://location, e.g. s3://bucket/checkpoints",
                ));
            }
        }
        if let CheckpointStorageConfig::FileSystem(dir) = &self.storage {
            if dir.as_os_str().is_empty() {
                return Err(err(
                    "checkpoint.storage",
                    "\"\"".into(),
                    "directory must not be empty",
                ));
            }
        }
        if let Some(copy) = &self.local_recovery {
            let primary = match &self.storage {
                CheckpointStorageConfig::FileSystem(dir) => dir,
                CheckpointStorageConfig::Memory => {
                    return Err(err(
                        "state.backend.local-recovery",
                        copy.display().to_string(),
                        "needs checkpoint storage on a filesystem, not in memory",
                    ))
                }
                CheckpointStorageConfig::Url(url) => {
                    return Err(err(
                        "state.backend.local-recovery",
                        copy.display().to_string(),
                        &format!("is not supported with checkpoint storage at a URL (`{url}`) yet; turn it off"),
                    ))
                }
            };
            if copy.as_os_str().is_empty() || copy == primary {
                return Err(err(
                    "state.backend.local-recovery",
                    copy.display().to_string(),
                    "must be a directory of its own, not the checkpoint directory",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_pause_with_concurrent_checkpoints_is_rejected() {
        let e = CheckpointConfig::default()
            .with_min_pause(Duration::from_millis(100))
            .with_max_concurrent(2)
            .validate()
            .unwrap_err();
        assert_eq!(e.option, "checkpoint.min_pause");
        assert!(e.reason.contains("max_concurrent = 2"), "{e}");
    }

    #[test]
    fn rejects_bad_values() {
        let base = CheckpointConfig::default();
        let cases = [
            (
                base.clone().with_interval(Duration::from_millis(1)),
                "checkpoint.interval",
            ),
            (
                base.clone().with_timeout(Duration::ZERO),
                "checkpoint.timeout",
            ),
            (
                base.clone().with_max_concurrent(0),
                "checkpoint.max_concurrent",
            ),
            (base.clone().with_retained(0), "checkpoint.retained"),
            (
                base.clone()
                    .with_storage(CheckpointStorageConfig::Memory)
                    .with_local_recovery("/tmp/copy"),
                "state.backend.local-recovery",
            ),
            (
                base.clone()
                    .with_storage(CheckpointStorageConfig::FileSystem("/c".into()))
                    .with_local_recovery("/c"),
                "state.backend.local-recovery",
            ),
            (
                base.clone()
                    .with_storage(CheckpointStorageConfig::FileSystem(PathBuf::new())),
                "checkpoint.storage",
            ),
        ];
        for (config, option) in cases {
            assert_eq!(config.validate().unwrap_err().option, option);
        }
        base.with_interval(Duration::from_secs(1))
            .validate()
            .unwrap();
    }
}
