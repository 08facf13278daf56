//! A throttle for source readers: at most `rate` records per second, measured from the
//! first poll, with the delay until the next record is due.

use std::time::{Duration, Instant};

/// Limits how many records a reader emits per second (no limit when built with `None`).
#[derive(Debug, Clone)]
pub struct RateLimiter {
    /// The rate over all readers.
    total: Option<f64>,
    per_second: Option<f64>,
    started: Option<Instant>,
    emitted: u64,
}

/// Checks a rate limit as sources take it: a finite number of records per second above
/// zero.
pub fn check_rate(records_per_second: Option<f64>) -> Result<(), String> {
    match records_per_second {
        Some(rate) if !(rate.is_finite() && rate > 0.0) => Err(format!(
            "the rate limit must be a positive number of records per second, got {rate}"
        )),
        _ => Ok(()),
    }
}

impl RateLimiter {
    /// A limiter for one of `readers` readers sharing `total_per_second`.
    pub fn new(total_per_second: Option<f64>, readers: u32) -> Self {
        Self {
            total: total_per_second,
            per_second: total_per_second.map(|r| r / f64::from(readers.max(1))),
            started: None,
            emitted: 0,
        }
    }

    /// Shares the total rate among `readers` readers from now on (those that hold splits:
    /// [`SourceReader::set_readers_sharing`](crate::connectors::source::SourceReader::set_readers_sharing)),
    /// measuring the pace anew.
    pub fn share_among(&mut self, readers: u32) {
        let per_second = self.total.map(|r| r / f64::from(readers.max(1)));
        if per_second != self.per_second {
            self.per_second = per_second;
            self.started = None;
            self.emitted = 0;
        }
    }

    /// How many records may be emitted now, at most `cap`.
    pub fn allowed(&mut self, cap: u64) -> u64 {
        let Some(rate) = self.per_second else {
            return cap;
        };
        let started = *self.started.get_or_insert_with(Instant::now);
        let due = (started.elapsed().as_secs_f64() * rate) as u64 + 1;
        due.saturating_sub(self.emitted).min(cap)
    }

    /// Counts `n` emitted records.
    pub fn record(&mut self, n: u64) {
        self.emitted += n;
    }

    /// How long until the next record is due (`idle` when unlimited or not started).
    pub fn delay(&self, idle: Duration) -> Duration {
        match (self.per_second, self.started) {
            (Some(rate), Some(started)) => {
                // A rate that is not positive is refused when the job is built; here it
                // would only wait long.
                let due = Duration::try_from_secs_f64((self.emitted + 1) as f64 / rate)
                    .unwrap_or(Duration::MAX);
                due.saturating_sub(started.elapsed())
                    .clamp(Duration::from_micros(50), Duration::from_millis(100))
            }
            _ => idle,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_among_fewer_readers_is_a_larger_part_of_the_total() {
        let mut limiter = RateLimiter::new(Some(1_000.0), 4);
        assert_eq!(limiter.per_second, Some(250.0));
        limiter.allowed(1);
        limiter.record(1);
        limiter.share_among(1);
        assert_eq!(limiter.per_second, Some(1_000.0));
        assert_eq!(limiter.allowed(1024), 1, "the pace is measured anew");
        let mut free = RateLimiter::new(None, 4);
        free.share_among(1);
        assert_eq!(free.allowed(1024), 1024);
    }

    #[test]
    fn rates_must_be_positive_and_finite() {
        assert!(check_rate(None).is_ok());
        assert!(check_rate(Some(0.5)).is_ok());
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let err = check_rate(Some(bad)).unwrap_err();
            assert!(err.contains("positive number"), "{err}");
        }
        let mut zero = RateLimiter::new(Some(0.0), 1);
        zero.allowed(1);
        assert_eq!(
            zero.delay(Duration::ZERO),
            Duration::from_millis(100),
            "no panic"
        );
    }

    #[test]
    fn unlimited_allows_the_cap_and_limited_paces() {
        let mut free = RateLimiter::new(None, 1);
        assert_eq!(free.allowed(1024), 1024);
        let mut slow = RateLimiter::new(Some(10.0), 2);
        assert_eq!(slow.allowed(1024), 1, "one record is due at once");
        slow.record(1);
        assert_eq!(slow.allowed(1024), 0);
        assert!(
            slow.delay(Duration::ZERO) > Duration::from_millis(50),
            "5 records/s each"
        );
    }
}
