//! Time for the JobManager's decisions, injectable: the system clock in a running job, a
//! clock the test moves by hand in unit tests, so that intervals, timeouts and back-offs are
//! decided without sleeping.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of the current time.
pub trait Clock: Send {
    /// Now, for intervals and deadlines.
    fn now(&self) -> Instant;
    /// Now as milliseconds since the Unix epoch, for timestamps that leave the process.
    fn unix_millis(&self) -> u64;
}

/// The system's clocks.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn unix_millis(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }
}

/// A clock that stands still until [`advance`](ManualClock::advance)d; clones share it.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<(Instant, u64)>>,
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ManualClock {
    /// A clock at the current instant (and Unix time 1 000 000 ms).
    pub fn new() -> Self {
        Self {
            now: Arc::new(Mutex::new((Instant::now(), 1_000_000))),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        now.0 += by;
        now.1 += by.as_millis() as u64;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.now.lock().unwrap_or_else(|p| p.into_inner()).0
    }

    fn unix_millis(&self) -> u64 {
        self.now.lock().unwrap_or_else(|p| p.into_inner()).1
    }
}
