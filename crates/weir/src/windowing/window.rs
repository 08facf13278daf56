//! Windows: the finite slices of a stream that window functions see.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A window: the slice of time (or of a count) a group of records belongs to.
pub trait Window:
    Clone
    + PartialEq
    + Eq
    + std::hash::Hash
    + std::fmt::Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// The largest timestamp that belongs to the window; its results carry this timestamp.
    fn max_timestamp(&self) -> i64;
}

/// A window of time, `[start, end)` in milliseconds (Flink's `TimeWindow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TimeWindow {
    /// First millisecond of the window.
    pub start: i64,
    /// First millisecond after the window.
    pub end: i64,
}

impl TimeWindow {
    /// The window `[start, end)`.
    pub const fn new(start: i64, end: i64) -> Self {
        Self { start, end }
    }

    /// Whether the two windows overlap or touch (session windows merge then).
    pub fn intersects(&self, other: &TimeWindow) -> bool {
        self.start <= other.end && other.start <= self.end
    }

    /// The smallest window covering both.
    pub fn cover(&self, other: &TimeWindow) -> TimeWindow {
        TimeWindow::new(self.start.min(other.start), self.end.max(other.end))
    }

    /// The start of the window of length `size` (sliding by `slide`, offset by `offset`)
    /// that contains `timestamp` and starts last (Flink's `getWindowStartWithOffset`),
    /// without overflowing at the ends of the i64 range.
    pub fn start_with_offset(timestamp: i64, offset: i64, slide: i64) -> i64 {
        let remainder = (i128::from(timestamp) - i128::from(offset)).rem_euclid(i128::from(slide));
        // `remainder` is below `slide`, so the difference fits in an i64 unless the
        // timestamp is within `slide` of i64::MIN; then the window starts at i64::MIN.
        i64::try_from(i128::from(timestamp) - remainder).unwrap_or(i64::MIN)
    }
}

impl Window for TimeWindow {
    fn max_timestamp(&self) -> i64 {
        self.end.saturating_sub(1)
    }
}

impl std::fmt::Display for TimeWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}, {})", self.start, self.end)
    }
}

/// The one window of a stream that is never split by time (Flink's `GlobalWindow`): its
/// records are grouped by a trigger alone, such as a count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GlobalWindow;

impl Window for GlobalWindow {
    fn max_timestamp(&self) -> i64 {
        i64::MAX
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_starts_align_to_the_slide_and_offset() {
        assert_eq!(TimeWindow::start_with_offset(12, 0, 5), 10);
        assert_eq!(TimeWindow::start_with_offset(-3, 0, 5), -5);
        assert_eq!(TimeWindow::start_with_offset(12, 1, 5), 11);
        assert_eq!(TimeWindow::start_with_offset(10, 0, 5), 10);
    }

    #[test]
    fn the_ends_of_the_range_do_not_overflow() {
        assert_eq!(TimeWindow::start_with_offset(i64::MIN, 0, 1000), i64::MIN);
        assert_eq!(
            TimeWindow::start_with_offset(i64::MIN + 1, 0, 1000),
            i64::MIN
        );
        let last = TimeWindow::start_with_offset(i64::MAX, 0, 1000);
        assert!(i64::MAX - last < 1000);
        assert_eq!(
            TimeWindow::new(last, i64::MAX).max_timestamp(),
            i64::MAX - 1
        );
        assert_eq!(TimeWindow::new(0, i64::MIN).max_timestamp(), i64::MIN);
    }

    #[test]
    fn session_windows_merge_when_they_touch() {
        let a = TimeWindow::new(0, 10);
        assert!(a.intersects(&TimeWindow::new(10, 20)));
        assert!(!a.intersects(&TimeWindow::new(11, 20)));
        assert_eq!(a.cover(&TimeWindow::new(5, 30)), TimeWindow::new(0, 30));
    }
}
