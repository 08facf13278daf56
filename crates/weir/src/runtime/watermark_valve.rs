//! The watermark of a task with several input channels (Flink's `StatusWatermarkValve`): the
//! minimum over the channels that are active and have caught up, never going back. Pure
//! logic, fed by the input loop.

use crate::time::{Watermark, WatermarkStatus};

/// What the valve passes on after an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValveOutput {
    /// The task's watermark advanced.
    Watermark(Watermark),
    /// Every channel became idle, or one became active again.
    Status(WatermarkStatus),
}

#[derive(Debug, Clone, Copy)]
struct ChannelState {
    watermark: i64,
    active: bool,
    /// Whether the channel takes part in the minimum: it is active and its watermark is not
    /// behind the last one passed on (a channel back from idleness must catch up first, or
    /// the task's watermark would go back).
    aligned: bool,
}

/// Combines the watermarks and statuses of a task's input channels.
#[derive(Debug, Clone)]
pub struct StatusWatermarkValve {
    channels: Vec<ChannelState>,
    last_output: i64,
    active: bool,
}

impl StatusWatermarkValve {
    /// A valve over `channels` channels, all active, with no watermark yet.
    pub fn new(channels: usize) -> Self {
        Self {
            channels: vec![
                ChannelState {
                    watermark: i64::MIN,
                    active: true,
                    aligned: true,
                };
                channels
            ],
            last_output: i64::MIN,
            active: true,
        }
    }

    /// The last watermark passed on.
    pub fn current(&self) -> Watermark {
        Watermark::new(self.last_output)
    }

    /// A watermark arrived on `channel`. Watermarks that go back on their channel, and those
    /// of an idle channel, are ignored.
    pub fn input_watermark(&mut self, channel: usize, watermark: Watermark) -> Option<ValveOutput> {
        let state = self.channels.get_mut(channel)?;
        if !state.active || watermark.timestamp <= state.watermark {
            return None;
        }
        state.watermark = watermark.timestamp;
        if !state.aligned && state.watermark >= self.last_output {
            state.aligned = true;
        }
        self.advance()
    }

    /// A channel became idle or active.
    pub fn input_status(&mut self, channel: usize, status: WatermarkStatus) -> Vec<ValveOutput> {
        let mut out = Vec::new();
        let Some(state) = self.channels.get_mut(channel) else {
            return out;
        };
        match status {
            WatermarkStatus::Idle if state.active => {
                state.active = false;
                state.aligned = false;
                if self.channels.iter().all(|c| !c.active) {
                    // Every channel is idle: event time moves to the furthest any channel
                    // reached, then the task is idle too.
                    let max = self.channels.iter().map(|c| c.watermark).max();
                    if let Some(max) = max.filter(|m| *m > self.last_output) {
                        self.last_output = max;
                        out.push(ValveOutput::Watermark(Watermark::new(max)));
                    }
                    self.active = false;
                    out.push(ValveOutput::Status(WatermarkStatus::Idle));
                } else {
                    out.extend(self.advance());
                }
            }
            WatermarkStatus::Active if !state.active => {
                state.active = true;
                state.aligned = state.watermark >= self.last_output;
                if !self.active {
                    self.active = true;
                    out.push(ValveOutput::Status(WatermarkStatus::Active));
                }
            }
            _ => {}
        }
        out
    }

    /// `channel` has ended: it holds nothing back any more.
    pub fn channel_finished(&mut self, channel: usize) -> Vec<ValveOutput> {
        let mut out = self.input_status(channel, WatermarkStatus::Active);
        out.extend(self.input_watermark(channel, Watermark::MAX));
        out
    }

    /// Passes on the minimum over aligned channels if it advanced.
    fn advance(&mut self) -> Option<ValveOutput> {
        let min = self
            .channels
            .iter()
            .filter(|c| c.aligned)
            .map(|c| c.watermark)
            .min()?;
        (min > self.last_output).then(|| {
            self.last_output = min;
            ValveOutput::Watermark(Watermark::new(min))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wm(t: i64) -> Option<ValveOutput> {
        Some(ValveOutput::Watermark(Watermark::new(t)))
    }

    #[test]
    fn the_minimum_over_channels_is_passed_on_and_never_goes_back() {
        let mut valve = StatusWatermarkValve::new(2);
        assert_eq!(valve.input_watermark(0, Watermark::new(10)), None);
        assert_eq!(valve.input_watermark(1, Watermark::new(5)), wm(5));
        assert_eq!(valve.input_watermark(1, Watermark::new(3)), None);
        assert_eq!(valve.input_watermark(1, Watermark::new(20)), wm(10));
        assert_eq!(valve.input_watermark(0, Watermark::new(15)), wm(15));
        assert_eq!(valve.current(), Watermark::new(15));
    }

    #[test]
    fn an_idle_channel_does_not_hold_the_watermark_back() {
        let mut valve = StatusWatermarkValve::new(2);
        valve.input_watermark(0, Watermark::new(10));
        assert_eq!(
            valve.input_status(1, WatermarkStatus::Idle),
            vec![wm(10).unwrap()]
        );
        assert_eq!(valve.input_watermark(0, Watermark::new(30)), wm(30));
        // Back from idleness, channel 1 is behind: it takes part once it has caught up.
        assert!(valve.input_status(1, WatermarkStatus::Active).is_empty());
        assert_eq!(valve.input_watermark(1, Watermark::new(20)), None);
        assert_eq!(valve.input_watermark(0, Watermark::new(50)), wm(50));
        assert_eq!(valve.input_watermark(1, Watermark::new(40)), None);
        assert_eq!(valve.input_watermark(1, Watermark::new(60)), None);
        assert_eq!(valve.input_watermark(0, Watermark::new(70)), wm(60));
    }

    #[test]
    fn all_channels_idle_makes_the_task_idle_until_one_is_active() {
        let mut valve = StatusWatermarkValve::new(2);
        valve.input_watermark(0, Watermark::new(10));
        valve.input_watermark(1, Watermark::new(4));
        assert!(valve.input_status(0, WatermarkStatus::Idle).is_empty());
        // The furthest channel's watermark first: nothing more comes from either.
        assert_eq!(
            valve.input_status(1, WatermarkStatus::Idle),
            vec![wm(10).unwrap(), ValveOutput::Status(WatermarkStatus::Idle)]
        );
        assert_eq!(
            valve.input_status(0, WatermarkStatus::Active),
            vec![ValveOutput::Status(WatermarkStatus::Active)]
        );
        assert_eq!(valve.input_watermark(0, Watermark::new(12)), wm(12));
    }

    #[test]
    fn ended_channels_release_the_watermark_to_the_end_of_time() {
        let mut valve = StatusWatermarkValve::new(2);
        valve.input_watermark(0, Watermark::new(10));
        assert_eq!(valve.channel_finished(1), vec![wm(10).unwrap()]);
        assert_eq!(
            valve.channel_finished(0),
            vec![ValveOutput::Watermark(Watermark::MAX)]
        );
    }
}
