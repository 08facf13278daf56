//! Restart strategies: whether and when a failed job restarts (Flink's
//! `restart-strategy.type`: none, fixed-delay, exponential-delay, failure-rate).
//!
//! [`RestartBackoff`] is the pure decision logic: it is told of each failure with the current
//! time and answers with the delay before the restart, or that the job must fail.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

/// Which restart strategy a job uses.
///
/// ```
/// use std::time::Duration;
/// use weir::prelude::*;
/// let config = ExecutionConfig::default()
///     .with_checkpointing(CheckpointConfig::default().with_interval(Duration::from_secs(1)))
///     .with_restart_strategy(RestartStrategyConfig::FixedDelay {
///         attempts: 5,
///         delay: Duration::from_secs(2),
///     });
/// assert!(config.validate().is_ok());
/// // Without a strategy: restart when checkpointing, fail at once otherwise (Flink's default).
/// assert_eq!(ExecutionConfig::default().effective_restart_strategy(), RestartStrategyConfig::None);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RestartStrategyConfig {
    /// Never restart: the first failure fails the job.
    None,
    /// Restart up to `attempts` times, waiting `delay` each time.
    FixedDelay {
        /// Restarts allowed.
        attempts: u32,
        /// Wait before each restart.
        delay: Duration,
    },
    /// Restart without limit, waiting `initial`, then `multiplier` times longer each time up to
    /// `max`, randomised by ±`jitter` (a fraction); the delay returns to `initial` after
    /// `reset_threshold` without failure.
    ExponentialDelay {
        /// First delay.
        initial: Duration,
        /// Largest delay.
        max: Duration,
        /// Growth factor (> 1).
        multiplier: f64,
        /// Random spread as a fraction of the delay, in [0, 1].
        jitter: f64,
        /// Failure-free run time after which the delay resets.
        reset_threshold: Duration,
    },
    /// Restart while fewer than `max_failures` happened within `interval`, waiting `delay`.
    FailureRate {
        /// Failures allowed per interval.
        max_failures: u32,
        /// The sliding interval.
        interval: Duration,
        /// Wait before each restart.
        delay: Duration,
    },
}

impl Default for RestartStrategyConfig {
    /// With checkpointing Flink defaults to fixed-delay with (practically) unlimited attempts;
    /// Weir picks a bounded default so that a job with a persistent fault fails visibly.
    fn default() -> Self {
        RestartStrategyConfig::FixedDelay {
            attempts: 10,
            delay: Duration::from_millis(100),
        }
    }
}

impl RestartStrategyConfig {
    /// Rejects values that make no sense.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |option: &'static str, value: String, reason: &str| ConfigError {
            option,
            value,
            reason: reason.to_string(),
        };
        match self {
            RestartStrategyConfig::None | RestartStrategyConfig::FixedDelay { .. } => Ok(()),
            RestartStrategyConfig::ExponentialDelay {
                initial,
                max,
                multiplier,
                jitter,
                ..
            } => {
                if initial.is_zero() || max < initial {
                    return Err(err(
                        "restart_strategy.exponential_delay",
                        format!("initial={initial:?} max={max:?}"),
                        "initial must be positive and not above max",
                    ));
                }
                if !(*multiplier > 1.0 && multiplier.is_finite()) {
                    return Err(err(
                        "restart_strategy.exponential_delay.multiplier",
                        multiplier.to_string(),
                        "must be a finite number above 1",
                    ));
                }
                if !(0.0..=1.0).contains(jitter) {
                    return Err(err(
                        "restart_strategy.exponential_delay.jitter",
                        jitter.to_string(),
                        "must be between 0 and 1",
                    ));
                }
                Ok(())
            }
            RestartStrategyConfig::FailureRate {
                max_failures,
                interval,
                ..
            } => {
                if *max_failures == 0 || interval.is_zero() {
                    return Err(err(
                        "restart_strategy.failure_rate",
                        format!("max_failures={max_failures} interval={interval:?}"),
                        "needs at least one failure per positive interval",
                    ));
                }
                Ok(())
            }
        }
    }
}

/// The state of a restart strategy over the life of a job.
#[derive(Debug, Clone)]
pub struct RestartBackoff {
    config: RestartStrategyConfig,
    restarts: u32,
    current_delay: Option<Duration>,
    last_failure: Option<Instant>,
    recent_failures: VecDeque<Instant>,
    /// SplitMix64 state for jitter; seeded so runs are reproducible.
    rng: u64,
}

impl RestartBackoff {
    /// A fresh strategy; `seed` drives the jitter.
    pub fn new(config: RestartStrategyConfig, seed: u64) -> Self {
        Self {
            config,
            restarts: 0,
            current_delay: None,
            last_failure: None,
            recent_failures: VecDeque::new(),
            rng: seed,
        }
    }

    /// Restarts granted so far.
    pub fn restarts(&self) -> u32 {
        self.restarts
    }

    fn next_unit_random(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A failure happened at `now`: the delay before restarting, or `None` to give up.
    pub fn on_failure(&mut self, now: Instant) -> Option<Duration> {
        let previous = self.last_failure.replace(now);
        let delay = match self.config.clone() {
            RestartStrategyConfig::None => None,
            RestartStrategyConfig::FixedDelay { attempts, delay } => {
                (self.restarts < attempts).then_some(delay)
            }
            RestartStrategyConfig::ExponentialDelay {
                initial,
                max,
                multiplier,
                jitter,
                reset_threshold,
            } => {
                let quiet_long_enough =
                    previous.is_some_and(|p| now.saturating_duration_since(p) >= reset_threshold);
                let base = match self.current_delay {
                    Some(d) if !quiet_long_enough => d.mul_f64(multiplier).min(max),
                    _ => initial,
                };
                self.current_delay = Some(base);
                let spread = (self.next_unit_random() * 2.0 - 1.0) * jitter;
                Some(base.mul_f64((1.0 + spread).max(0.0)).min(max))
            }
            RestartStrategyConfig::FailureRate {
                max_failures,
                interval,
                delay,
            } => {
                self.recent_failures.push_back(now);
                while self
                    .recent_failures
                    .front()
                    .is_some_and(|t| now.saturating_duration_since(*t) > interval)
                {
                    self.recent_failures.pop_front();
                }
                (self.recent_failures.len() as u32 <= max_failures).then_some(delay)
            }
        };
        if delay.is_some() {
            self.restarts += 1;
        }
        delay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn none_never_restarts() {
        let mut b = RestartBackoff::new(RestartStrategyConfig::None, 1);
        assert_eq!(b.on_failure(Instant::now()), None);
    }

    #[test]
    fn fixed_delay_gives_up_after_its_attempts() {
        let mut b = RestartBackoff::new(
            RestartStrategyConfig::FixedDelay {
                attempts: 2,
                delay: 5 * MS,
            },
            1,
        );
        let t = Instant::now();
        assert_eq!(b.on_failure(t), Some(5 * MS));
        assert_eq!(b.on_failure(t), Some(5 * MS));
        assert_eq!(b.on_failure(t), None);
        assert_eq!(b.restarts(), 2);
    }

    #[test]
    fn exponential_delay_grows_caps_and_resets() {
        let config = RestartStrategyConfig::ExponentialDelay {
            initial: 10 * MS,
            max: 50 * MS,
            multiplier: 2.0,
            jitter: 0.0,
            reset_threshold: 1000 * MS,
        };
        let mut b = RestartBackoff::new(config, 7);
        let t = Instant::now();
        let delays: Vec<_> = (0..5).map(|i| b.on_failure(t + i * MS).unwrap()).collect();
        assert_eq!(delays, vec![10 * MS, 20 * MS, 40 * MS, 50 * MS, 50 * MS]);
        assert_eq!(
            b.on_failure(t + 5000 * MS),
            Some(10 * MS),
            "reset after a quiet period"
        );
    }

    #[test]
    fn exponential_jitter_stays_within_bounds() {
        let config = RestartStrategyConfig::ExponentialDelay {
            initial: 100 * MS,
            max: 100 * MS,
            multiplier: 2.0,
            jitter: 0.1,
            reset_threshold: 1000 * MS,
        };
        let mut b = RestartBackoff::new(config, 42);
        let t = Instant::now();
        let mut distinct = std::collections::BTreeSet::new();
        for i in 0..50 {
            let d = b.on_failure(t + i * MS).unwrap();
            assert!(d >= 90 * MS && d <= 100 * MS, "{d:?}");
            distinct.insert(d);
        }
        assert!(distinct.len() > 5, "jitter should vary the delay");
    }

    #[test]
    fn failure_rate_counts_failures_in_a_sliding_interval() {
        let config = RestartStrategyConfig::FailureRate {
            max_failures: 2,
            interval: 100 * MS,
            delay: MS,
        };
        let mut b = RestartBackoff::new(config, 1);
        let t = Instant::now();
        assert!(b.on_failure(t).is_some());
        assert!(b.on_failure(t + 10 * MS).is_some());
        assert!(
            b.on_failure(t + 20 * MS).is_none(),
            "third failure within 100 ms"
        );
        let mut b = RestartBackoff::new(
            RestartStrategyConfig::FailureRate {
                max_failures: 2,
                interval: 100 * MS,
                delay: MS,
            },
            1,
        );
        assert!(b.on_failure(t).is_some());
        assert!(b.on_failure(t + 10 * MS).is_some());
        assert!(
            b.on_failure(t + 500 * MS).is_some(),
            "old failures slid out"
        );
    }

    #[test]
    fn invalid_strategies_are_rejected() {
        let bad = RestartStrategyConfig::ExponentialDelay {
            initial: 10 * MS,
            max: 50 * MS,
            multiplier: 1.0,
            jitter: 0.0,
            reset_threshold: MS,
        };
        assert!(bad.validate().is_err());
        let bad = RestartStrategyConfig::FailureRate {
            max_failures: 0,
            interval: MS,
            delay: MS,
        };
        assert!(bad.validate().is_err());
    }
}
