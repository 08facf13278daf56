//! Watermarks: an operator's promise that no record with an earlier event time follows.

use serde::{Deserialize, Serialize};

/// A watermark at `timestamp` (milliseconds of event time): every record that follows has a
/// timestamp above it, and event-time windows and timers up to it may fire (Flink's
/// `Watermark`).
///
/// ```
/// use weir::prelude::*;
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// env.generate(10, |i| i).map(|i| i * 2).sink_to(DiscardingSink, "out");
/// let result = env.execute("ends")?;
/// // The end of a bounded input is the end of event time: every window and timer fires.
/// assert_eq!(result.operator("Map").unwrap().watermark, Some(Watermark::MAX));
/// assert!(Watermark::new(1_000) < Watermark::MAX);
/// assert_eq!(Watermark::MAX.to_string(), "end of time");
/// # Ok::<(), WeirError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Watermark {
    /// Event time in milliseconds, inclusive: records at or below it are late.
    pub timestamp: i64,
}

impl Watermark {
    /// The watermark at the end of a bounded input: every window fires.
    pub const MAX: Watermark = Watermark {
        timestamp: i64::MAX,
    };
    /// The watermark before any has been emitted.
    pub const MIN: Watermark = Watermark {
        timestamp: i64::MIN,
    };

    /// A watermark at `timestamp`.
    pub const fn new(timestamp: i64) -> Self {
        Self { timestamp }
    }
}

impl std::fmt::Display for Watermark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.timestamp {
            i64::MAX => f.write_str("end of time"),
            i64::MIN => f.write_str("none"),
            t => write!(f, "{t}"),
        }
    }
}

/// Whether an input sends watermarks (Flink's `WatermarkStatus`): an idle input is left out
/// of the minimum over inputs until it becomes active again, so it does not hold event time
/// back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WatermarkStatus {
    /// The input sends records and watermarks.
    Active,
    /// The input has nothing to send for now.
    Idle,
}
