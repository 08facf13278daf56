//! How the configuration's job keys set an [`ExecutionConfig`]. Keys for other parts (the
//! REST endpoint, cluster security) are read by those parts.

use std::time::Duration;

use super::{Configuration, ConfigurationError};
use crate::checkpoint::config::{CheckpointStorageConfig, CheckpointingMode, RetentionOnCancel};
use crate::checkpoint::recovery::CorruptCheckpointPolicy;
use crate::checkpoint::restart_strategy::RestartStrategyConfig;
use crate::config::{ExecutionConfig, NonRestoredState, RestoreSettings};

fn positive(value: i64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

impl Configuration {
    /// Checks the configuration, then sets what its keys say in `config`; keys that are not
    /// set leave `config` as it is.
    pub fn apply(&self, config: &mut ExecutionConfig) -> Result<(), ConfigurationError> {
        self.validate()?;
        if let Some(p) = self.integer("parallelism.default")? {
            config.parallelism = positive(p);
        }
        if let Some(p) = self.integer("pipeline.max-parallelism")? {
            config.max_parallelism = positive(p);
        }
        if let Some(chaining) = self.boolean("pipeline.operator-chaining.enabled")? {
            config.chaining_enabled = chaining;
        }
        if let Some(interval) = self.duration("pipeline.auto-watermark-interval")? {
            config.auto_watermark_interval = interval;
        }
        if let Some(timeout) = self.duration("execution.buffer-timeout.interval")? {
            config.buffer_timeout = timeout;
        }
        if let Some(size) = self.integer("execution.batch-size")? {
            config.buffer_size = size as usize;
        }
        if let Some(capacity) = self.integer("execution.channel-capacity")? {
            config.channel_capacity = capacity as usize;
        }
        if let Some(tracing) = self.enumeration("execution.record-origins")? {
            config.record_origins = match tracing {
                "ALWAYS" => crate::config::RecordOriginTracing::Always,
                "NEVER" => crate::config::RecordOriginTracing::Never,
                _ => crate::config::RecordOriginTracing::AfterUserFailure,
            };
        }
        if let Some(interval) = self.duration("metrics.fetcher.update-interval")? {
            config.metrics_update_interval = interval;
        }
        if let Some(backend) = self.text("state.backend.type") {
            config.state_backend.backend_type = backend.trim().to_string();
        }
        if let Some(incremental) = self.boolean("state.backend.incremental")? {
            config.state_backend.incremental = incremental;
        }
        if let Some(dir) = self.text("state.backend.local-dir") {
            config.state_backend.local_dir = Some(dir.trim().into());
        }
        // A backend's own keys (`state.backend.<type>.<option>`) go to it as written; their
        // kinds were checked with every other key's.
        for (key, value) in self.entries() {
            if key.starts_with("state.backend.") && key.split('.').count() >= 4 {
                config
                    .state_backend
                    .options
                    .insert(key.to_string(), value.value.trim().to_string());
            }
        }
        self.apply_checkpointing(config)?;
        self.apply_restore(config)?;
        if let Some(strategy) = self.restart_strategy()? {
            config.restart_strategy = Some(strategy);
        }
        config
            .validate()
            .map_err(|e| ConfigurationError::Conflict(e.to_string()))
    }

    fn apply_checkpointing(&self, config: &mut ExecutionConfig) -> Result<(), ConfigurationError> {
        let checkpoint = &mut config.checkpoint;
        if let Some(bytes) = self.memory_size("state.storage.fs.memory-threshold")? {
            checkpoint.state_file_threshold = bytes;
        }
        if let Some(interval) = self.duration("execution.checkpointing.interval")? {
            checkpoint.interval = Some(interval);
        }
        if let Some(mode) = self.enumeration("execution.checkpointing.mode")? {
            checkpoint.mode = if mode == "AT_LEAST_ONCE" {
                CheckpointingMode::AtLeastOnce
            } else {
                CheckpointingMode::ExactlyOnce
            };
        }
        if let Some(timeout) = self.duration("execution.checkpointing.timeout")? {
            checkpoint.timeout = timeout;
        }
        if let Some(pause) = self.duration("execution.checkpointing.min-pause")? {
            checkpoint.min_pause = pause;
        }
        if let Some(n) = self.integer("execution.checkpointing.max-concurrent-checkpoints")? {
            checkpoint.max_concurrent = positive(n);
        }
        for key in [
            "execution.checkpointing.unaligned.enabled",
            "execution.checkpointing.unaligned",
        ] {
            if let Some(unaligned) = self.boolean(key)? {
                checkpoint.unaligned = unaligned;
            }
        }
        if let Some(timeout) =
            self.duration("execution.checkpointing.aligned-checkpoint-timeout")?
        {
            checkpoint.aligned_checkpoint_timeout = timeout;
        }
        if let Some(n) = self.integer("execution.checkpointing.tolerable-failed-checkpoints")? {
            checkpoint.tolerable_failures = positive(n);
        }
        for key in [
            "state.checkpoints.num-retained",
            "execution.checkpointing.num-retained",
        ] {
            if let Some(n) = self.integer(key)? {
                checkpoint.retained = positive(n);
            }
        }
        if let Some(retention) =
            self.enumeration("execution.checkpointing.externalized-checkpoint-retention")?
        {
            checkpoint.retention_on_cancel = if retention == "RETAIN_ON_CANCELLATION" {
                RetentionOnCancel::Retain
            } else {
                RetentionOnCancel::Delete
            };
        }
        if let (Some(_), Some(_)) = (
            self.text("state.checkpoints.dir"),
            self.text("execution.checkpointing.dir"),
        ) {
            return Err(ConfigurationError::Conflict(
                "both `state.checkpoints.dir` and `execution.checkpointing.dir` are set; keep one (the second is Flink 2.0's name)".into(),
            ));
        }
        for key in ["state.checkpoints.dir", "execution.checkpointing.dir"] {
            if let Some(dir) = self.text(key) {
                checkpoint.storage = CheckpointStorageConfig::from_url(dir.trim());
            }
        }
        if let Some(policy) = self.enumeration("recovery.fallback-on-corrupt-checkpoint")? {
            checkpoint.corrupt_checkpoint_policy = if policy == "ALLOW_DUPLICATES" {
                CorruptCheckpointPolicy::AllowDuplicates
            } else {
                CorruptCheckpointPolicy::Refuse
            };
        }
        match (
            self.boolean("state.backend.local-recovery")?,
            self.text("taskmanager.state.local.root-dirs"),
        ) {
            (Some(true), Some(dir)) => checkpoint.local_recovery = Some(dir.trim().into()),
            (Some(true), None) => {
                return Err(self.invalid(
                    "state.backend.local-recovery",
                    "local recovery needs `taskmanager.state.local.root-dirs`, the directory of its copies",
                ))
            }
            (Some(false), _) => checkpoint.local_recovery = None,
            (None, _) => {}
        }
        Ok(())
    }

    fn apply_restore(&self, config: &mut ExecutionConfig) -> Result<(), ConfigurationError> {
        if let Some(mode) = self.enumeration("execution.start-mode")? {
            config.resume_from_latest_checkpoint = mode == "RESUME";
        }
        let ignore = self.boolean("execution.savepoint.ignore-unclaimed-state")?;
        if let Some(path) = self.text("execution.savepoint.path") {
            let mut settings = RestoreSettings::from_path(path.trim());
            if ignore == Some(true) {
                settings.non_restored_state = NonRestoredState::Drop;
            }
            config.restore = Some(settings);
        } else if let (Some(ignore), Some(restore)) = (ignore, config.restore.as_mut()) {
            restore.non_restored_state = if ignore {
                NonRestoredState::Drop
            } else {
                NonRestoredState::Refuse
            };
        }
        Ok(())
    }

    fn restart_strategy(&self) -> Result<Option<RestartStrategyConfig>, ConfigurationError> {
        let Some(kind) = self.enumeration("restart-strategy.type")? else {
            return Ok(None);
        };
        let duration = |key: &str, default: Duration| -> Result<Duration, ConfigurationError> {
            Ok(self.duration(key)?.unwrap_or(default))
        };
        let strategy = match kind {
            "none" | "disable" | "off" => RestartStrategyConfig::None,
            "fixed-delay" | "fixeddelay" => RestartStrategyConfig::FixedDelay {
                attempts: self
                    .integer("restart-strategy.fixed-delay.attempts")?
                    .map_or(1, positive),
                delay: duration("restart-strategy.fixed-delay.delay", Duration::from_secs(1))?,
            },
            "exponential-delay" | "exponentialdelay" => RestartStrategyConfig::ExponentialDelay {
                initial: duration(
                    "restart-strategy.exponential-delay.initial-backoff",
                    Duration::from_secs(1),
                )?,
                max: duration(
                    "restart-strategy.exponential-delay.max-backoff",
                    Duration::from_secs(60),
                )?,
                multiplier: self
                    .float("restart-strategy.exponential-delay.backoff-multiplier")?
                    .unwrap_or(1.5),
                jitter: self
                    .float("restart-strategy.exponential-delay.jitter-factor")?
                    .unwrap_or(0.1),
                reset_threshold: duration(
                    "restart-strategy.exponential-delay.reset-backoff-threshold",
                    Duration::from_secs(3600),
                )?,
            },
            _ => RestartStrategyConfig::FailureRate {
                max_failures: self
                    .integer("restart-strategy.failure-rate.max-failures-per-interval")?
                    .map_or(1, positive),
                interval: duration(
                    "restart-strategy.failure-rate.failure-rate-interval",
                    Duration::from_secs(60),
                )?,
                delay: duration(
                    "restart-strategy.failure-rate.delay",
                    Duration::from_secs(1),
                )?,
            },
        };
        strategy
            .validate()
            .map_err(|e| ConfigurationError::Conflict(format!("restart-strategy: {e}")))?;
        Ok(Some(strategy))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(yaml: &str) -> Result<ExecutionConfig, ConfigurationError> {
        let mut config = ExecutionConfig::default();
        Configuration::from_yaml_str(yaml, "weir.yaml")?.apply(&mut config)?;
        Ok(config)
    }

    #[test]
    fn flinks_keys_set_the_job() {
        let config = applied(
            "parallelism.default: 3\npipeline.max-parallelism: 64\npipeline.operator-chaining.enabled: false\n\
             execution.checkpointing.interval: 2 s\nexecution.checkpointing.mode: at_least_once\n\
             execution.checkpointing.timeout: 1 min\nexecution.checkpointing.num-retained: 5\n\
             execution.checkpointing.externalized-checkpoint-retention: RETAIN_ON_CANCELLATION\n\
             state.checkpoints.dir: /tmp/weir-checkpoints\n\
             restart-strategy:\n  type: fixed-delay\n  fixed-delay:\n    attempts: 7\n    delay: 250 ms\n\
             metrics.fetcher.update-interval: 5 s\n",
        )
        .unwrap();
        assert_eq!(
            (
                config.parallelism,
                config.max_parallelism,
                config.chaining_enabled
            ),
            (3, 64, false)
        );
        let c = &config.checkpoint;
        assert_eq!(c.interval, Some(Duration::from_secs(2)));
        assert_eq!(c.mode, CheckpointingMode::AtLeastOnce);
        assert_eq!((c.timeout, c.retained), (Duration::from_secs(60), 5));
        assert_eq!(c.retention_on_cancel, RetentionOnCancel::Retain);
        assert_eq!(
            c.storage,
            CheckpointStorageConfig::directory("/tmp/weir-checkpoints")
        );
        assert_eq!(
            config.restart_strategy,
            Some(RestartStrategyConfig::FixedDelay {
                attempts: 7,
                delay: Duration::from_millis(250)
            })
        );
        assert_eq!(config.metrics_update_interval, Duration::from_secs(5));
        assert_eq!(
            applied("restart-strategy.type: none\n")
                .unwrap()
                .restart_strategy,
            Some(RestartStrategyConfig::None)
        );
        let url = applied("execution.checkpointing.dir: s3://bucket/jobs\n").unwrap();
        assert_eq!(
            url.checkpoint.storage,
            CheckpointStorageConfig::Url("s3://bucket/jobs".into())
        );
        let restore = applied("state.checkpoints.dir: /sp\nexecution.savepoint.path: /sp/savepoint-7\nexecution.savepoint.ignore-unclaimed-state: true\n").unwrap();
        assert_eq!(
            restore.restore.unwrap().non_restored_state,
            NonRestoredState::Drop
        );
        let resume = "state.checkpoints.dir: /c\nexecution.start-mode: resume\n";
        assert!(applied(resume).unwrap().resume_from_latest_checkpoint);
        let fresh = "state.checkpoints.dir: /c\nexecution.start-mode: FRESH\n";
        assert!(!applied(fresh).unwrap().resume_from_latest_checkpoint);
        let err = applied("state.checkpoints.dir: /c\nexecution.start-mode: latest\n").unwrap_err();
        assert!(err.to_string().contains("execution.start-mode"), "{err}");
    }

    #[test]
    fn values_that_do_not_fit_together_are_refused() {
        let err = applied("parallelism.default: 200\npipeline.max-parallelism: 128\n").unwrap_err();
        assert!(err.to_string().contains("parallelism"), "{err}");
        let backend = applied(
            "state.backend.type: rocksdb\nstate.backend.incremental: true\nstate.backend.local-dir: /var/weir\n",
        )
        .unwrap()
        .state_backend;
        assert_eq!(
            (
                backend.backend_type.as_str(),
                backend.incremental,
                backend.local_dir
            ),
            ("rocksdb", true, Some("/var/weir".into()))
        );
        let err = applied("state.backend.local-recovery: true\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("taskmanager.state.local.root-dirs"), "{err}");
        let err = applied("state.checkpoints.dir: /a\nexecution.checkpointing.dir: /b\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("keep one"), "{err}");
        let err = applied("restart-strategy.type: exponential-delay\nrestart-strategy.exponential-delay.backoff-multiplier: 0.5\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("multiplier"), "{err}");
    }
}
