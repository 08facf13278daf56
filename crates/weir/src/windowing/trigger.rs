//! Triggers: when a window's result is emitted, and when its contents are dropped (Flink's
//! `Trigger`).

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::windowing::window::Window;

/// What a trigger decides about a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriggerResult {
    /// Nothing happens.
    Continue,
    /// The window's function runs on its contents, which are kept.
    Fire,
    /// The contents are dropped without a result.
    Purge,
    /// The function runs, then the contents are dropped.
    FireAndPurge,
}

impl TriggerResult {
    /// Whether the window's function runs.
    pub fn is_fire(self) -> bool {
        matches!(self, TriggerResult::Fire | TriggerResult::FireAndPurge)
    }
    /// Whether the contents are dropped.
    pub fn is_purge(self) -> bool {
        matches!(self, TriggerResult::Purge | TriggerResult::FireAndPurge)
    }
}

/// What a trigger can see and ask for: the operator's clocks, and timers for the current key
/// (a timer calls back `on_event_time` or `on_processing_time` for each window of the key).
#[derive(Debug)]
pub struct TriggerContext {
    pub(crate) watermark: i64,
    pub(crate) processing_time: i64,
    pub(crate) event_timers: Vec<i64>,
    pub(crate) processing_timers: Vec<i64>,
}

impl TriggerContext {
    pub(crate) fn new(watermark: i64, processing_time: i64) -> Self {
        Self {
            watermark,
            processing_time,
            event_timers: Vec::new(),
            processing_timers: Vec::new(),
        }
    }

    /// The operator's current watermark.
    pub fn current_watermark(&self) -> i64 {
        self.watermark
    }
    /// The wall clock, in milliseconds since the Unix epoch.
    pub fn current_processing_time(&self) -> i64 {
        self.processing_time
    }
    /// Asks for `on_event_time` when the watermark reaches `time`.
    pub fn register_event_time_timer(&mut self, time: i64) {
        self.event_timers.push(time);
    }
    /// Asks for `on_processing_time` when the wall clock reaches `time`.
    pub fn register_processing_time_timer(&mut self, time: i64) {
        self.processing_timers.push(time);
    }
}

/// Decides when a window fires. `State` is kept per window (a count, say), in checkpoints.
pub trait Trigger<W: Window>: Clone + Send + 'static {
    /// Per-window state of the trigger.
    type State: Serialize + DeserializeOwned + Clone + Default + Send + Sync + 'static;

    /// A record at `timestamp` was added to `window`.
    fn on_element(
        &mut self,
        timestamp: i64,
        window: &W,
        state: &mut Self::State,
        ctx: &mut TriggerContext,
    ) -> TriggerResult;

    /// An event-time timer of the window's key fired at `time`.
    fn on_event_time(
        &mut self,
        _time: i64,
        _window: &W,
        _state: &mut Self::State,
        _ctx: &mut TriggerContext,
    ) -> TriggerResult {
        TriggerResult::Continue
    }

    /// A processing-time timer of the window's key fired at `time`.
    fn on_processing_time(
        &mut self,
        _time: i64,
        _window: &W,
        _state: &mut Self::State,
        _ctx: &mut TriggerContext,
    ) -> TriggerResult {
        TriggerResult::Continue
    }

    /// Windows merged into `window` (sessions): combines their states.
    fn on_merge(
        &mut self,
        _window: &W,
        _merged: Vec<Self::State>,
        _ctx: &mut TriggerContext,
    ) -> Self::State {
        Self::State::default()
    }
}

/// Fires once the watermark passes the end of the window (Flink's `EventTimeTrigger`), and
/// again for each late record while the window is kept (allowed lateness).
#[derive(Debug, Clone, Copy, Default)]
pub struct EventTimeTrigger;

impl<W: Window> Trigger<W> for EventTimeTrigger {
    type State = ();

    fn on_element(
        &mut self,
        _timestamp: i64,
        window: &W,
        _state: &mut (),
        ctx: &mut TriggerContext,
    ) -> TriggerResult {
        if window.max_timestamp() <= ctx.current_watermark() {
            // A late record of a window still kept: fire at once with it.
            TriggerResult::Fire
        } else {
            ctx.register_event_time_timer(window.max_timestamp());
            TriggerResult::Continue
        }
    }

    fn on_event_time(
        &mut self,
        time: i64,
        window: &W,
        _state: &mut (),
        _ctx: &mut TriggerContext,
    ) -> TriggerResult {
        if time == window.max_timestamp() {
            TriggerResult::Fire
        } else {
            TriggerResult::Continue
        }
    }

    fn on_merge(&mut self, window: &W, _merged: Vec<()>, ctx: &mut TriggerContext) {
        if window.max_timestamp() > ctx.current_watermark() {
            ctx.register_event_time_timer(window.max_timestamp());
        }
    }
}

/// Fires when the wall clock passes the end of the window (Flink's
/// `ProcessingTimeTrigger`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessingTimeTrigger;

impl<W: Window> Trigger<W> for ProcessingTimeTrigger {
    type State = ();

    fn on_element(
        &mut self,
        _timestamp: i64,
        window: &W,
        _state: &mut (),
        ctx: &mut TriggerContext,
    ) -> TriggerResult {
        ctx.register_processing_time_timer(window.max_timestamp());
        TriggerResult::Continue
    }

    fn on_processing_time(
        &mut self,
        time: i64,
        window: &W,
        _state: &mut (),
        _ctx: &mut TriggerContext,
    ) -> TriggerResult {
        if time == window.max_timestamp() {
            TriggerResult::Fire
        } else {
            TriggerResult::Continue
        }
    }
}

/// Fires every `n` records of a window (Flink's `CountTrigger`).
#[derive(Debug, Clone, Copy, Default)]
pub struct CountTrigger {
    n: u64,
}

impl CountTrigger {
    /// Fires at every `n`-th record.
    pub fn of(n: u64) -> Self {
        Self { n: n.max(1) }
    }
}

impl<W: Window> Trigger<W> for CountTrigger {
    type State = u64;

    fn on_element(
        &mut self,
        _timestamp: i64,
        _window: &W,
        count: &mut u64,
        _ctx: &mut TriggerContext,
    ) -> TriggerResult {
        *count += 1;
        if *count >= self.n {
            *count = 0;
            TriggerResult::Fire
        } else {
            TriggerResult::Continue
        }
    }

    fn on_merge(&mut self, _window: &W, merged: Vec<u64>, _ctx: &mut TriggerContext) -> u64 {
        merged.into_iter().sum()
    }
}

/// Never fires: the default of global windows, which need a trigger of their own.
#[derive(Debug, Clone, Copy, Default)]
pub struct NeverTrigger;

impl<W: Window> Trigger<W> for NeverTrigger {
    type State = ();

    fn on_element(
        &mut self,
        _timestamp: i64,
        _window: &W,
        _state: &mut (),
        _ctx: &mut TriggerContext,
    ) -> TriggerResult {
        TriggerResult::Continue
    }
}

/// Makes another trigger drop the window's contents whenever it fires (Flink's
/// `PurgingTrigger`): `count_window(n)` is global windows with a purging count trigger.
#[derive(Debug, Clone, Copy, Default)]
pub struct PurgingTrigger<T> {
    inner: T,
}

impl<T> PurgingTrigger<T> {
    /// Purges whenever `inner` fires.
    pub fn of(inner: T) -> Self {
        Self { inner }
    }
}

fn purging(result: TriggerResult) -> TriggerResult {
    if result.is_fire() {
        TriggerResult::FireAndPurge
    } else {
        result
    }
}

impl<W: Window, T: Trigger<W>> Trigger<W> for PurgingTrigger<T> {
    type State = T::State;

    fn on_element(
        &mut self,
        timestamp: i64,
        window: &W,
        state: &mut T::State,
        ctx: &mut TriggerContext,
    ) -> TriggerResult {
        purging(self.inner.on_element(timestamp, window, state, ctx))
    }
    fn on_event_time(
        &mut self,
        time: i64,
        window: &W,
        state: &mut T::State,
        ctx: &mut TriggerContext,
    ) -> TriggerResult {
        purging(self.inner.on_event_time(time, window, state, ctx))
    }
    fn on_processing_time(
        &mut self,
        time: i64,
        window: &W,
        state: &mut T::State,
        ctx: &mut TriggerContext,
    ) -> TriggerResult {
        purging(self.inner.on_processing_time(time, window, state, ctx))
    }
    fn on_merge(
        &mut self,
        window: &W,
        merged: Vec<T::State>,
        ctx: &mut TriggerContext,
    ) -> T::State {
        self.inner.on_merge(window, merged, ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::windowing::window::{GlobalWindow, TimeWindow};

    #[test]
    fn the_event_time_trigger_waits_for_the_watermark_and_fires_late_records_at_once() {
        let window = TimeWindow::new(0, 10);
        let mut ctx = TriggerContext::new(5, 0);
        let mut trigger = EventTimeTrigger;
        assert_eq!(
            trigger.on_element(3, &window, &mut (), &mut ctx),
            TriggerResult::Continue
        );
        assert_eq!(ctx.event_timers, vec![9]);
        assert_eq!(
            trigger.on_event_time(8, &window, &mut (), &mut ctx),
            TriggerResult::Continue
        );
        assert_eq!(
            trigger.on_event_time(9, &window, &mut (), &mut ctx),
            TriggerResult::Fire
        );
        let mut late = TriggerContext::new(20, 0);
        assert_eq!(
            trigger.on_element(4, &window, &mut (), &mut late),
            TriggerResult::Fire
        );
    }

    #[test]
    fn a_purging_count_trigger_fires_and_purges_every_n() {
        let mut trigger = PurgingTrigger::of(CountTrigger::of(3));
        let mut ctx = TriggerContext::new(0, 0);
        let mut count = 0;
        let results: Vec<_> = (0..6)
            .map(|_| trigger.on_element(0, &GlobalWindow, &mut count, &mut ctx))
            .collect();
        use TriggerResult::*;
        assert_eq!(
            results,
            [
                Continue,
                Continue,
                FireAndPurge,
                Continue,
                Continue,
                FireAndPurge
            ]
        );
    }
}
