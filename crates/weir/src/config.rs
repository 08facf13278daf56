//! Job configuration: parallelism, key groups, chaining and channel buffering.

use std::time::Duration;

use crate::checkpoint::config::{CheckpointConfig, CheckpointStorageConfig};
use crate::checkpoint::restart_strategy::RestartStrategyConfig;
use crate::checkpoint::savepoint::Savepoint;
use crate::error::ConfigError;

/// Where a job starts from (Flink's `SavepointRestoreSettings`, `run -s`): a savepoint or a
/// retained checkpoint, and what to do with state no operator of the job claims.
///
/// ```
/// use weir::prelude::*;
/// let settings = RestoreSettings::from_path("/var/lib/weir/job/savepoint-7")
///     .with_non_restored_state(NonRestoredState::Drop);
/// let config = ExecutionConfig::default().with_restore(settings);
/// assert_eq!(config.restore.unwrap().non_restored_state, NonRestoredState::Drop);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RestoreSettings {
    /// A savepoint or retained checkpoint: its directory (its `_metadata` is read).
    pub path: String,
    /// What happens to state of operators the job no longer has.
    pub non_restored_state: NonRestoredState,
}

/// What a restore does with state that belongs to no operator of the job (Flink's
/// `--allowNonRestoredState`).
///
/// ```
/// use weir::prelude::*;
/// // An operator was removed from the job: drop its state instead of refusing to start.
/// let settings = RestoreSettings::from_path("/var/lib/weir/checkpoints/job/savepoint-12")
///     .with_non_restored_state(NonRestoredState::Drop);
/// assert!(settings.allows_non_restored_state());
/// assert_eq!(NonRestoredState::default(), NonRestoredState::Refuse);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NonRestoredState {
    /// Refuse to start: the job would silently lose that state (the default).
    #[default]
    Refuse,
    /// Drop it and start.
    Drop,
}

impl RestoreSettings {
    /// Restores the savepoint or retained checkpoint in the directory `path`.
    pub fn from_path(path: impl AsRef<std::path::Path>) -> Self {
        Self {
            path: path.as_ref().to_string_lossy().into_owned(),
            non_restored_state: NonRestoredState::Refuse,
        }
    }
    /// Sets what happens to state no operator claims.
    pub fn with_non_restored_state(mut self, policy: NonRestoredState) -> Self {
        self.non_restored_state = policy;
        self
    }
    /// Whether unclaimed state is dropped rather than refused.
    pub fn allows_non_restored_state(&self) -> bool {
        self.non_restored_state == NonRestoredState::Drop
    }
}

impl From<&Savepoint> for RestoreSettings {
    fn from(savepoint: &Savepoint) -> Self {
        Self::from_path(savepoint.location())
    }
}

impl From<Savepoint> for RestoreSettings {
    fn from(savepoint: Savepoint) -> Self {
        Self::from(&savepoint)
    }
}

/// Largest number of key groups, as in Flink (2^15).
pub const UPPER_BOUND_MAX_PARALLELISM: u32 = 1 << 15;

/// Settings of one job, chosen when the environment is created.
///
/// ```
/// use std::time::Duration;
/// use weir::ExecutionConfig;
/// let config = ExecutionConfig::default()
///     .with_parallelism(4)
///     .with_max_parallelism(256)
///     .with_buffer_timeout(Duration::from_millis(10));
/// assert!(config.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ExecutionConfig {
    /// Parallelism of operators that do not set their own (`parallelism.default`).
    pub parallelism: u32,
    /// Number of key groups, the upper bound for rescaling keyed state (`max-parallelism`).
    pub max_parallelism: u32,
    /// Whether operators may be chained into one task (`pipeline.operator-chaining`).
    pub chaining_enabled: bool,
    /// Records per batch sent through a channel (Flink's network buffer, counted in records).
    pub buffer_size: usize,
    /// Batches a channel holds before its producer blocks (backpressure).
    pub channel_capacity: usize,
    /// A partly filled batch is sent at the latest this long after it was started
    /// (`execution.buffer-timeout`). Idle tasks flush at once.
    #[serde(with = "duration_millis")]
    pub buffer_timeout: Duration,
    /// How often sources and timestamp assigners run their watermark generators' periodic
    /// emission (`pipeline.auto-watermark-interval`, 200 ms as in Flink); zero turns periodic
    /// watermarks off.
    #[serde(with = "duration_millis", default = "default_auto_watermark_interval")]
    pub auto_watermark_interval: Duration,
    /// Checkpointing (off unless an interval is set).
    pub checkpoint: CheckpointConfig,
    /// What to do when a task fails; `None` picks Flink's default: restart (fixed delay) when
    /// checkpointing is on, fail at once when it is off.
    pub restart_strategy: Option<RestartStrategyConfig>,
    /// Start from a savepoint or retained checkpoint.
    pub restore: Option<RestoreSettings>,
    /// Start from the job's latest retained checkpoint in its checkpoint storage, if there
    /// is one — how a job resumes after its process died. An explicit `restore` wins.
    pub resume_from_latest_checkpoint: bool,
    /// How often the JobManager samples the tasks' metrics for the REST API, the dashboard
    /// and Prometheus (`metrics.fetcher.update-interval`; 1 s).
    #[serde(with = "duration_millis", default = "default_metrics_update_interval")]
    pub metrics_update_interval: Duration,
    /// Where keyed state lives (`state.backend.type`, heap by default).
    #[serde(default)]
    pub state_backend: crate::state::backend_factory::StateBackendConfig,
    /// When sources say where each record was read, so that an operator failing on a
    /// record names it (`execution.record-origins`; after a failure of user code by default).
    #[serde(default)]
    pub record_origins: RecordOriginTracing,
}

/// When a job traces where each record was read (its file and line, or topic, partition and
/// offset), so that an error of an operator on a record names it — a poison record that fails
/// every restart is then named when the restart strategy gives up. Each traced record carries
/// its origin through the chain and the network, which costs throughput (bench/README.md,
/// "the cost of tracing record origins").
///
/// ```
/// use weir::prelude::*;
/// let config = ExecutionConfig::default().with_record_origins(RecordOriginTracing::Always);
/// assert_eq!(config.record_origins, RecordOriginTracing::Always);
/// assert_eq!(ExecutionConfig::default().record_origins, RecordOriginTracing::AfterUserFailure);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordOriginTracing {
    /// In the attempt that follows a failure user code may have caused, for twice as long as
    /// the failed attempt lived (at least 10 s), long enough to read past where it failed
    /// (the default): the first run costs nothing, and a record that fails again is named.
    #[default]
    AfterUserFailure,
    /// In every attempt, the first included (to find a failing record at once).
    Always,
    /// Never.
    Never,
}

fn default_metrics_update_interval() -> Duration {
    Duration::from_secs(1)
}

impl Default for ExecutionConfig {
    fn default() -> Self {
        Self {
            parallelism: std::thread::available_parallelism()
                .map(|n| n.get() as u32)
                .unwrap_or(1),
            max_parallelism: 128,
            chaining_enabled: true,
            buffer_size: 1024,
            channel_capacity: 4,
            buffer_timeout: Duration::from_millis(100),
            auto_watermark_interval: default_auto_watermark_interval(),
            checkpoint: CheckpointConfig::default(),
            restart_strategy: None,
            restore: None,
            resume_from_latest_checkpoint: false,
            metrics_update_interval: default_metrics_update_interval(),
            state_backend: crate::state::backend_factory::StateBackendConfig::default(),
            record_origins: RecordOriginTracing::default(),
        }
    }
}

impl ExecutionConfig {
    /// Sets the default parallelism.
    pub fn with_parallelism(mut self, parallelism: u32) -> Self {
        self.parallelism = parallelism;
        self
    }
    /// Sets the number of key groups.
    pub fn with_max_parallelism(mut self, max_parallelism: u32) -> Self {
        self.max_parallelism = max_parallelism;
        self
    }
    /// Enables or disables operator chaining for the whole job.
    pub fn with_chaining(mut self, enabled: bool) -> Self {
        self.chaining_enabled = enabled;
        self
    }
    /// Sets the number of records per channel batch.
    pub fn with_buffer_size(mut self, records: usize) -> Self {
        self.buffer_size = records;
        self
    }
    /// Sets how many batches a channel holds.
    pub fn with_channel_capacity(mut self, batches: usize) -> Self {
        self.channel_capacity = batches;
        self
    }
    /// Sets the flush timeout of partly filled batches.
    pub fn with_buffer_timeout(mut self, timeout: Duration) -> Self {
        self.buffer_timeout = timeout;
        self
    }

    /// Sets how often watermark generators emit periodically (zero: never).
    pub fn with_auto_watermark_interval(mut self, interval: Duration) -> Self {
        self.auto_watermark_interval = interval;
        self
    }

    /// Sets the checkpointing configuration.
    pub fn with_checkpointing(mut self, checkpoint: CheckpointConfig) -> Self {
        self.checkpoint = checkpoint;
        self
    }
    /// Sets the restart strategy.
    pub fn with_restart_strategy(mut self, strategy: RestartStrategyConfig) -> Self {
        self.restart_strategy = Some(strategy);
        self
    }
    /// Starts the job from a savepoint or retained checkpoint: a [`Savepoint`] or
    /// [`RestoreSettings`].
    pub fn with_restore(mut self, restore: impl Into<RestoreSettings>) -> Self {
        self.restore = Some(restore.into());
        self
    }

    /// Resumes from the job's latest retained checkpoint when one exists.
    pub fn with_resume_from_latest_checkpoint(mut self, resume: bool) -> Self {
        self.resume_from_latest_checkpoint = resume;
        self
    }

    /// Sets when sources say where each record was read (see [`RecordOriginTracing`]).
    pub fn with_record_origins(mut self, tracing: RecordOriginTracing) -> Self {
        self.record_origins = tracing;
        self
    }

    /// Sets how often the JobManager samples the tasks' metrics
    /// (`metrics.fetcher.update-interval`).
    pub fn with_metrics_update_interval(mut self, interval: Duration) -> Self {
        self.metrics_update_interval = interval;
        self
    }

    /// Chooses the keyed state backend (`state.backend.type`); a backend other than the
    /// heap must be registered in the process
    /// ([`register_state_backend`](crate::state::backend_factory::register_state_backend)).
    pub fn with_state_backend(
        mut self,
        backend: crate::state::backend_factory::StateBackendConfig,
    ) -> Self {
        self.state_backend = backend;
        self
    }

    /// The restart strategy in force.
    pub fn effective_restart_strategy(&self) -> RestartStrategyConfig {
        match (&self.restart_strategy, self.checkpoint.interval) {
            (Some(strategy), _) => strategy.clone(),
            (None, Some(_)) => RestartStrategyConfig::default(),
            (None, None) => RestartStrategyConfig::None,
        }
    }

    /// Checks every value; the error names the option and says why it is rejected.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |option, value: String, reason: &str| ConfigError {
            option,
            value,
            reason: reason.to_string(),
        };
        if self.max_parallelism == 0 || self.max_parallelism > UPPER_BOUND_MAX_PARALLELISM {
            return Err(err(
                "max_parallelism",
                self.max_parallelism.to_string(),
                &format!("must be between 1 and {UPPER_BOUND_MAX_PARALLELISM}"),
            ));
        }
        if self.parallelism == 0 {
            return Err(err("parallelism", "0".into(), "must be at least 1"));
        }
        if self.parallelism > self.max_parallelism {
            return Err(err(
                "parallelism",
                self.parallelism.to_string(),
                &format!(
                    "must not exceed max_parallelism ({}), the number of key groups",
                    self.max_parallelism
                ),
            ));
        }
        if self.buffer_size == 0 {
            return Err(err("buffer_size", "0".into(), "must be at least 1 record"));
        }
        if self.channel_capacity == 0 {
            return Err(err(
                "channel_capacity",
                "0".into(),
                "must be at least 1 batch",
            ));
        }
        self.checkpoint.validate()?;
        let in_memory = self.checkpoint.storage == CheckpointStorageConfig::Memory;
        if let Some(restore) = self.restore.as_ref().filter(|_| in_memory) {
            if !restore.path.starts_with("memory://") {
                return Err(err(
                    "restore",
                    restore.path.clone(),
                    "the checkpoint storage is in memory, so the savepoint's files cannot be \
                     read: set `CheckpointStorageConfig::directory(dir)` to the directory it \
                     was written under",
                ));
            }
        }
        if self.resume_from_latest_checkpoint && in_memory {
            return Err(err(
                "resume_from_latest_checkpoint",
                "true".into(),
                "the checkpoint storage is in memory, where nothing survives the process: set \
                 `CheckpointStorageConfig::directory(dir)` to resume from its checkpoints",
            ));
        }
        if let Some(strategy) = &self.restart_strategy {
            strategy.validate()?;
        }
        if self.buffer_timeout.is_zero() {
            return Err(err(
                "buffer_timeout",
                "0ms".into(),
                "must be positive (idle tasks already flush at once)",
            ));
        }
        if self.metrics_update_interval.is_zero() {
            return Err(err(
                "metrics.fetcher.update-interval",
                "0ms".into(),
                "must be positive",
            ));
        }
        Ok(())
    }

    /// The most records one channel can hold: queued batches plus the one its writer fills.
    pub fn records_per_channel_bound(&self) -> usize {
        (self.channel_capacity + 1) * self.buffer_size
    }
}

fn default_auto_watermark_interval() -> Duration {
    Duration::from_millis(200)
}

mod duration_millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        ExecutionConfig::default().validate().unwrap();
    }

    #[test]
    fn rejects_parallelism_above_key_groups() {
        let e = ExecutionConfig::default()
            .with_max_parallelism(4)
            .with_parallelism(8)
            .validate()
            .unwrap_err();
        assert_eq!(e.option, "parallelism");
        assert!(e.to_string().contains("max_parallelism (4)"), "{e}");
    }

    #[test]
    fn restores_and_resumes_need_a_directory() {
        let e = ExecutionConfig::default()
            .with_restore(RestoreSettings::from_path("/sp/savepoint-3"))
            .validate()
            .unwrap_err();
        assert_eq!(e.option, "restore");
        let e = ExecutionConfig::default()
            .with_resume_from_latest_checkpoint(true)
            .validate()
            .unwrap_err();
        assert_eq!(e.option, "resume_from_latest_checkpoint");
        let on_disk = ExecutionConfig::default().with_checkpointing(
            CheckpointConfig::default().with_storage(CheckpointStorageConfig::directory("/sp")),
        );
        assert!(on_disk
            .clone()
            .with_restore(RestoreSettings::from_path("/sp/savepoint-3"))
            .with_resume_from_latest_checkpoint(true)
            .validate()
            .is_ok());
    }

    #[test]
    fn rejects_zero_values() {
        for (config, option) in [
            (
                ExecutionConfig::default().with_parallelism(0),
                "parallelism",
            ),
            (
                ExecutionConfig::default().with_buffer_size(0),
                "buffer_size",
            ),
            (
                ExecutionConfig::default().with_channel_capacity(0),
                "channel_capacity",
            ),
            (
                ExecutionConfig::default().with_buffer_timeout(Duration::ZERO),
                "buffer_timeout",
            ),
            (
                ExecutionConfig::default().with_max_parallelism(0),
                "max_parallelism",
            ),
        ] {
            assert_eq!(config.validate().unwrap_err().option, option);
        }
    }
}
