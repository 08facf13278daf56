//! Window assigners: which windows a record belongs to (Flink's `WindowAssigner`s).

use std::time::Duration;

use crate::windowing::trigger::{EventTimeTrigger, NeverTrigger, ProcessingTimeTrigger};
use crate::windowing::window::{GlobalWindow, TimeWindow, Window};

/// How an assigner's time is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowTime {
    /// The records' event timestamps; windows fire as the watermark passes them.
    EventTime,
    /// The wall clock when a record is processed.
    ProcessingTime,
    /// No time: a trigger alone decides (global windows).
    None,
}

/// Assigns each record to zero or more windows.
pub trait WindowAssigner: Clone + Send + Sync + std::fmt::Debug + 'static {
    /// The windows it makes.
    type Window: Window;
    /// The trigger used unless another is set.
    type DefaultTrigger: Default;

    /// The windows of a record at `timestamp` (its event timestamp for event-time
    /// assigners, the current processing time for processing-time ones).
    fn assign_windows(&self, timestamp: i64) -> Vec<Self::Window>;

    /// Which time the assigner uses.
    fn time(&self) -> WindowTime;

    /// For merging assigners (sessions): merges `window` into the overlapping windows of
    /// `windows`, returning the merged window and the indexes it replaces.
    fn merge(
        &self,
        _windows: &[Self::Window],
        _window: &Self::Window,
    ) -> Option<(Self::Window, Vec<usize>)> {
        None
    }

    /// Whether windows merge (sessions).
    fn is_merging(&self) -> bool {
        false
    }

    /// Checks the assigner's parameters; the error says what is wrong.
    fn validate(&self) -> Result<(), String> {
        Ok(())
    }

    /// A short description for plans and errors.
    fn describe(&self) -> String {
        format!("{self:?}")
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn positive(what: &str, value: i64) -> Result<(), String> {
    if value <= 0 {
        Err(format!(
            "the window {what} must be positive, not {value} ms"
        ))
    } else {
        Ok(())
    }
}

/// Windows of `size` and `slide` (equal for tumbling windows) containing `timestamp`.
fn sliding_windows(timestamp: i64, size: i64, slide: i64, offset: i64) -> Vec<TimeWindow> {
    if size <= 0 || slide <= 0 {
        return Vec::new();
    }
    let last_start = TimeWindow::start_with_offset(timestamp, offset, slide);
    let mut windows = Vec::with_capacity((size / slide).max(1) as usize);
    let mut start = last_start;
    loop {
        if start <= timestamp.saturating_sub(size) {
            break;
        }
        windows.push(TimeWindow::new(start, start.saturating_add(size)));
        match start.checked_sub(slide) {
            Some(next) => start = next,
            None => break,
        }
    }
    windows
}

macro_rules! time_windows {
    ($(#[$doc:meta])* $name:ident, $time:expr, $trigger:ty, sliding) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name {
            size: i64,
            slide: i64,
            offset: i64,
        }

        impl $name {
            /// Windows of `size`, starting every `slide`.
            pub fn of(size: Duration, slide: Duration) -> Self {
                Self { size: millis(size), slide: millis(slide), offset: 0 }
            }
            /// Shifts the windows' starts by `offset` (for time zones, say).
            pub fn with_offset(mut self, offset: Duration) -> Self {
                self.offset = millis(offset);
                self
            }
        }

        impl WindowAssigner for $name {
            type Window = TimeWindow;
            type DefaultTrigger = $trigger;
            fn assign_windows(&self, timestamp: i64) -> Vec<TimeWindow> {
                sliding_windows(timestamp, self.size, self.slide, self.offset)
            }
            fn time(&self) -> WindowTime {
                $time
            }
            fn validate(&self) -> Result<(), String> {
                positive("size", self.size)?;
                positive("slide", self.slide)
            }
            fn describe(&self) -> String {
                format!("{}({} ms, slide {} ms)", stringify!($name), self.size, self.slide)
            }
        }
    };
    ($(#[$doc:meta])* $name:ident, $time:expr, $trigger:ty, tumbling) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name {
            size: i64,
            offset: i64,
        }

        impl $name {
            /// Back-to-back windows of `size`.
            pub fn of(size: Duration) -> Self {
                Self { size: millis(size), offset: 0 }
            }
            /// Shifts the windows' starts by `offset` (for time zones, say).
            pub fn with_offset(mut self, offset: Duration) -> Self {
                self.offset = millis(offset);
                self
            }
        }

        impl WindowAssigner for $name {
            type Window = TimeWindow;
            type DefaultTrigger = $trigger;
            fn assign_windows(&self, timestamp: i64) -> Vec<TimeWindow> {
                if self.size <= 0 {
                    return Vec::new();
                }
                let start = TimeWindow::start_with_offset(timestamp, self.offset, self.size);
                vec![TimeWindow::new(start, start.saturating_add(self.size))]
            }
            fn time(&self) -> WindowTime {
                $time
            }
            fn validate(&self) -> Result<(), String> {
                positive("size", self.size)
            }
            fn describe(&self) -> String {
                format!("{}({} ms)", stringify!($name), self.size)
            }
        }
    };
}

time_windows!(
    /// Back-to-back event-time windows of a fixed size (Flink's
    /// `TumblingEventTimeWindows`).
    TumblingEventTimeWindows,
    WindowTime::EventTime,
    EventTimeTrigger,
    tumbling
);
time_windows!(
    /// Overlapping event-time windows of a fixed size, one starting every `slide` (Flink's
    /// `SlidingEventTimeWindows`): a record belongs to `size / slide` windows.
    SlidingEventTimeWindows,
    WindowTime::EventTime,
    EventTimeTrigger,
    sliding
);
time_windows!(
    /// Back-to-back processing-time windows of a fixed size (Flink's
    /// `TumblingProcessingTimeWindows`).
    TumblingProcessingTimeWindows,
    WindowTime::ProcessingTime,
    ProcessingTimeTrigger,
    tumbling
);
time_windows!(
    /// Overlapping processing-time windows (Flink's `SlidingProcessingTimeWindows`).
    SlidingProcessingTimeWindows,
    WindowTime::ProcessingTime,
    ProcessingTimeTrigger,
    sliding
);

/// Event-time sessions (Flink's `EventTimeSessionWindows`): a key's records closer than
/// `gap` to each other fall into one window, which closes after `gap` without records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventTimeSessionWindows {
    gap: i64,
}

impl EventTimeSessionWindows {
    /// Sessions that end after `gap` without a record.
    pub fn with_gap(gap: Duration) -> Self {
        Self { gap: millis(gap) }
    }
}

impl WindowAssigner for EventTimeSessionWindows {
    type Window = TimeWindow;
    type DefaultTrigger = EventTimeTrigger;

    fn assign_windows(&self, timestamp: i64) -> Vec<TimeWindow> {
        if self.gap <= 0 {
            return Vec::new();
        }
        vec![TimeWindow::new(
            timestamp,
            timestamp.saturating_add(self.gap),
        )]
    }

    fn time(&self) -> WindowTime {
        WindowTime::EventTime
    }

    fn merge(
        &self,
        windows: &[TimeWindow],
        window: &TimeWindow,
    ) -> Option<(TimeWindow, Vec<usize>)> {
        let mut merged = *window;
        let mut replaced = Vec::new();
        // Merging can make the window reach further ones: repeat until nothing changes.
        loop {
            let before = replaced.len();
            for (i, w) in windows.iter().enumerate() {
                if !replaced.contains(&i) && merged.intersects(w) {
                    merged = merged.cover(w);
                    replaced.push(i);
                }
            }
            if replaced.len() == before {
                break;
            }
        }
        Some((merged, replaced))
    }

    fn is_merging(&self) -> bool {
        true
    }

    fn validate(&self) -> Result<(), String> {
        positive("gap", self.gap)
    }

    fn describe(&self) -> String {
        format!("EventTimeSessionWindows(gap {} ms)", self.gap)
    }
}

/// All of a key's records in one window that never ends (Flink's `GlobalWindows`); pair it
/// with a trigger, such as a
/// [`CountTrigger`](crate::windowing::CountTrigger), or nothing ever fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GlobalWindows;

impl GlobalWindows {
    /// The global window assigner.
    pub fn create() -> Self {
        GlobalWindows
    }
}

impl WindowAssigner for GlobalWindows {
    type Window = GlobalWindow;
    type DefaultTrigger = NeverTrigger;

    fn assign_windows(&self, _timestamp: i64) -> Vec<GlobalWindow> {
        vec![GlobalWindow]
    }

    fn time(&self) -> WindowTime {
        WindowTime::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tumbling_windows_contain_their_records() {
        let tumbling = TumblingEventTimeWindows::of(Duration::from_millis(10));
        assert_eq!(tumbling.assign_windows(15), vec![TimeWindow::new(10, 20)]);
        assert_eq!(tumbling.assign_windows(-1), vec![TimeWindow::new(-10, 0)]);
        let shifted = tumbling.with_offset(Duration::from_millis(3));
        assert_eq!(shifted.assign_windows(12), vec![TimeWindow::new(3, 13)]);
    }

    #[test]
    fn sliding_windows_assign_size_over_slide_windows() {
        let sliding =
            SlidingEventTimeWindows::of(Duration::from_millis(10), Duration::from_millis(5));
        assert_eq!(
            sliding.assign_windows(12),
            vec![TimeWindow::new(10, 20), TimeWindow::new(5, 15)]
        );
        for t in -50..50 {
            let windows = sliding.assign_windows(t);
            assert_eq!(windows.len(), 2);
            assert!(windows.iter().all(|w| w.start <= t && t < w.end));
        }
    }

    #[test]
    fn sessions_merge_every_window_they_reach() {
        let sessions = EventTimeSessionWindows::with_gap(Duration::from_millis(10));
        let existing = [
            TimeWindow::new(0, 10),
            TimeWindow::new(30, 40),
            TimeWindow::new(15, 25),
        ];
        let (merged, replaced) = sessions.merge(&existing, &TimeWindow::new(8, 18)).unwrap();
        assert_eq!(merged, TimeWindow::new(0, 25));
        let mut replaced = replaced;
        replaced.sort();
        assert_eq!(replaced, vec![0, 2]);
    }

    #[test]
    fn zero_sizes_are_refused() {
        assert!(TumblingEventTimeWindows::of(Duration::ZERO)
            .validate()
            .is_err());
        assert!(
            SlidingEventTimeWindows::of(Duration::from_secs(1), Duration::ZERO)
                .validate()
                .is_err()
        );
        assert!(EventTimeSessionWindows::with_gap(Duration::ZERO)
            .validate()
            .is_err());
    }
}
