//! Watermark generators: how a source (or an operator assigning timestamps) turns the event
//! timestamps it sees into watermarks (Flink's `WatermarkGenerator`).

use std::time::{Duration, Instant};

use crate::time::Watermark;

/// Where a generator emits: watermarks, and whether its input is idle.
///
/// ```
/// use weir::prelude::*;
///
/// /// Event time trails the highest timestamp by one second, and stands still (idle) when
/// /// no event came since the last periodic emission.
/// #[derive(Default)]
/// struct Lagging { max: Option<i64>, seen: bool }
///
/// impl WatermarkGenerator for Lagging {
///     fn on_event(&mut self, timestamp: i64, _output: &mut WatermarkOutput) {
///         self.max = Some(self.max.map_or(timestamp, |m| m.max(timestamp)));
///         self.seen = true;
///     }
///     fn on_periodic_emit(&mut self, output: &mut WatermarkOutput) {
///         match (self.max, std::mem::take(&mut self.seen)) {
///             (Some(max), true) => output.emit_watermark(Watermark::new(max - 1_000)),
///             _ => output.mark_idle(),
///         }
///     }
/// }
///
/// let strategy = WatermarkStrategy::<i64>::for_generator(Lagging::default)
///     .with_timestamp_assigner(|t, _| *t);
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// let out = env
///     .from_source(CollectionSource::new(vec![5_000, 7_000]), strategy, "times")
///     .collect();
/// env.execute("lagging")?;
/// assert_eq!(out.take(), vec![5_000, 7_000]);
/// # Ok::<(), WeirError>(())
/// ```
#[derive(Debug, Default)]
pub struct WatermarkOutput {
    watermark: Option<Watermark>,
    idle: Option<bool>,
}

impl WatermarkOutput {
    /// Emits a watermark. One below a watermark this input emitted before is ignored (and
    /// counted in the operator's `backward_watermarks`): event time never goes back.
    pub fn emit_watermark(&mut self, watermark: Watermark) {
        self.watermark = Some(self.watermark.map_or(watermark, |w| w.max(watermark)));
        self.idle = Some(false);
    }

    /// Marks the input idle: it holds no watermark back until it emits again.
    pub fn mark_idle(&mut self) {
        self.idle = Some(true);
    }

    /// Marks the input active again without a new watermark.
    pub fn mark_active(&mut self) {
        self.idle = Some(false);
    }

    /// What was emitted since the last call, and the idleness change, if any.
    pub(crate) fn take(&mut self) -> (Option<Watermark>, Option<bool>) {
        (self.watermark.take(), self.idle.take())
    }
}

/// Makes watermarks from the timestamps of events (Flink's `WatermarkGenerator`): per event,
/// periodically (every `auto_watermark_interval` of processing time), or both.
///
/// ```
/// use weir::prelude::*;
///
/// /// A watermark after every event whose payload says the batch is complete.
/// struct Punctuated;
///
/// impl WatermarkGenerator for Punctuated {
///     fn on_event(&mut self, timestamp: i64, output: &mut WatermarkOutput) {
///         output.emit_watermark(Watermark::new(timestamp - 1));
///     }
/// }
///
/// let strategy = WatermarkStrategy::<(i64, String)>::for_generator(|| Punctuated)
///     .with_timestamp_assigner(|event, _| event.0);
/// # let _ = strategy;
/// ```
pub trait WatermarkGenerator: Send {
    /// Called for each event with its timestamp; may emit a watermark.
    fn on_event(&mut self, timestamp: i64, output: &mut WatermarkOutput);

    /// Called periodically; may emit a watermark.
    fn on_periodic_emit(&mut self, _output: &mut WatermarkOutput) {}
}

/// Watermarks that trail the highest timestamp seen by a fixed bound: events may arrive that
/// much out of order (Flink's `BoundedOutOfOrdernessWatermarks`). The watermark is the
/// highest timestamp minus the bound minus one millisecond, emitted periodically.
#[derive(Debug, Clone)]
pub struct BoundedOutOfOrderness {
    max_timestamp: i64,
    out_of_orderness: i64,
}

impl BoundedOutOfOrderness {
    /// A generator allowing events up to `max_out_of_orderness` late.
    pub fn new(max_out_of_orderness: Duration) -> Self {
        let out_of_orderness = i64::try_from(max_out_of_orderness.as_millis()).unwrap_or(i64::MAX);
        Self {
            // Nothing seen yet: the first periodic watermark is the lowest possible.
            max_timestamp: i64::MIN.saturating_add(out_of_orderness).saturating_add(1),
            out_of_orderness,
        }
    }
}

impl WatermarkGenerator for BoundedOutOfOrderness {
    fn on_event(&mut self, timestamp: i64, _output: &mut WatermarkOutput) {
        self.max_timestamp = self.max_timestamp.max(timestamp);
    }

    fn on_periodic_emit(&mut self, output: &mut WatermarkOutput) {
        output.emit_watermark(Watermark::new(
            self.max_timestamp
                .saturating_sub(self.out_of_orderness)
                .saturating_sub(1),
        ));
    }
}

/// Marks its input idle when no event came for a while, around another generator (Flink's
/// `WatermarksWithIdleness`). Events only set a flag; the clock is read at the periodic
/// emission, so the per-event path stays cheap.
pub(crate) struct WithIdleness {
    inner: Box<dyn WatermarkGenerator>,
    timeout: Duration,
    /// When the last periodic emission saw that events had come.
    last_activity: Instant,
    event_since_check: bool,
    idle: bool,
}

impl WithIdleness {
    pub(crate) fn new(inner: Box<dyn WatermarkGenerator>, timeout: Duration, now: Instant) -> Self {
        Self {
            inner,
            timeout,
            last_activity: now,
            event_since_check: false,
            idle: false,
        }
    }

    pub(crate) fn on_event(&mut self, timestamp: i64, output: &mut WatermarkOutput) {
        self.event_since_check = true;
        if self.idle {
            self.idle = false;
            output.mark_active();
        }
        self.inner.on_event(timestamp, output);
    }

    pub(crate) fn on_periodic_emit(&mut self, output: &mut WatermarkOutput, now: Instant) {
        if std::mem::take(&mut self.event_since_check) {
            self.last_activity = now;
        }
        if now.saturating_duration_since(self.last_activity) >= self.timeout {
            if !self.idle {
                self.idle = true;
                output.mark_idle();
            }
        } else {
            self.inner.on_periodic_emit(output);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_out_of_orderness_trails_the_highest_timestamp() {
        let mut generator = BoundedOutOfOrderness::new(Duration::from_millis(10));
        let mut out = WatermarkOutput::default();
        generator.on_periodic_emit(&mut out);
        assert_eq!(out.take().0, Some(Watermark::new(i64::MIN)));
        generator.on_event(100, &mut out);
        generator.on_event(50, &mut out);
        assert_eq!(out.take().0, None);
        generator.on_periodic_emit(&mut out);
        assert_eq!(out.take().0, Some(Watermark::new(89)));
    }

    #[test]
    fn timestamps_at_the_ends_of_the_range_do_not_overflow() {
        let mut generator = BoundedOutOfOrderness::new(Duration::from_secs(u64::MAX));
        let mut out = WatermarkOutput::default();
        generator.on_event(i64::MIN, &mut out);
        generator.on_periodic_emit(&mut out);
        assert_eq!(out.take().0, Some(Watermark::new(i64::MIN)));
        let mut generator = BoundedOutOfOrderness::new(Duration::ZERO);
        generator.on_event(i64::MAX, &mut out);
        generator.on_periodic_emit(&mut out);
        assert_eq!(out.take().0, Some(Watermark::new(i64::MAX - 1)));
    }

    #[test]
    fn idleness_marks_a_quiet_input_idle_and_an_event_makes_it_active() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut generator = WithIdleness::new(
            Box::new(BoundedOutOfOrderness::new(Duration::ZERO)),
            Duration::from_millis(100),
            start,
        );
        let mut out = WatermarkOutput::default();
        generator.on_event(5, &mut out);
        generator.on_periodic_emit(&mut out, at(50));
        assert_eq!(out.take(), (Some(Watermark::new(4)), Some(false)));
        // Quiet since the check at 50 ms.
        generator.on_periodic_emit(&mut out, at(120));
        assert_eq!(out.take(), (Some(Watermark::new(4)), Some(false)));
        generator.on_periodic_emit(&mut out, at(150));
        assert_eq!(out.take(), (None, Some(true)));
        generator.on_event(9, &mut out);
        assert_eq!(out.take(), (None, Some(false)));
    }
}
