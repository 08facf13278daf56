//! Event time at a source subtask: timestamps assigned per record, one watermark generator
//! per split, and the subtask's watermark as the minimum over its active splits (Flink's
//! `SourceOperator` with per-split `WatermarkOutputMultiplexer`).

use std::time::Instant;

use crate::error::TaskError;
use crate::record::Record;
use crate::runtime::chain::ChainOutput;
use crate::runtime::output::Output;
use crate::time::generator::WithIdleness;
use crate::time::{
    Watermark, WatermarkGenerator, WatermarkOutput, WatermarkStatus, WatermarkStrategy,
};

enum SplitGenerator {
    Plain(Box<dyn WatermarkGenerator>),
    WithIdleness(WithIdleness),
}

struct SplitState {
    id: String,
    generator: Option<SplitGenerator>,
    watermark: i64,
    idle: bool,
    /// Whether the reader has emitted for it (an assigned split counts before that only
    /// once the reader names its splits).
    entered: bool,
}

/// The event time of one source subtask (or of an operator assigning timestamps, which has
/// one implicit split).
pub struct SourceWatermarks<T> {
    strategy: WatermarkStrategy<T>,
    splits: Vec<SplitState>,
    current: Option<usize>,
    /// Whether the reader names the splits its records come from.
    names_splits: bool,
    /// The last watermark passed on.
    output: i64,
    /// Whether the subtask announced itself idle.
    idle: bool,
    /// A split's watermark or idleness changed since the last combination.
    pending: bool,
    scratch: WatermarkOutput,
    backward: u64,
}

impl<T> SourceWatermarks<T> {
    /// Event time after `strategy`.
    pub fn new(strategy: WatermarkStrategy<T>) -> Self {
        Self {
            strategy,
            splits: Vec::new(),
            current: None,
            names_splits: false,
            output: i64::MIN,
            idle: false,
            pending: false,
            scratch: WatermarkOutput::default(),
            backward: 0,
        }
    }

    /// The last watermark passed on, if any.
    pub fn current(&self) -> Option<Watermark> {
        (self.output != i64::MIN).then_some(Watermark::new(self.output))
    }

    /// Watermarks a generator emitted below its own earlier ones (ignored).
    pub fn backward_watermarks(&self) -> u64 {
        self.backward
    }

    fn split_index(&mut self, id: &str) -> usize {
        if let Some(i) = self.splits.iter().position(|s| s.id == id) {
            return i;
        }
        let generator =
            self.strategy
                .create_generator()
                .map(|generator| match self.strategy.idleness() {
                    Some(timeout) => SplitGenerator::WithIdleness(WithIdleness::new(
                        generator,
                        timeout,
                        Instant::now(),
                    )),
                    None => SplitGenerator::Plain(generator),
                });
        self.splits.push(SplitState {
            id: id.to_string(),
            generator,
            watermark: i64::MIN,
            idle: false,
            entered: false,
        });
        self.pending = true;
        self.splits.len() - 1
    }

    /// Split `id` was assigned: once the reader names its splits, it holds the watermark back
    /// until it has records (or is idle, or released).
    pub fn add_split(&mut self, id: &str) {
        self.split_index(id);
    }

    /// The records that follow come from split `id`.
    pub fn enter_split(&mut self, id: &str) {
        let index = self.split_index(id);
        self.splits[index].entered = true;
        if !self.names_splits {
            self.names_splits = true;
            self.pending = true;
        }
        self.current = Some(index);
    }

    /// Split `id` is finished: it no longer holds the watermark back.
    pub fn release_split(&mut self, id: &str) {
        if let Some(i) = self.splits.iter().position(|s| s.id == id) {
            self.splits.remove(i);
            self.current = None;
            self.pending = true;
        }
    }

    /// The event timestamp of `record` (the assigner's, or the source's), fed to the current
    /// split's generator.
    #[inline]
    pub fn on_record(&mut self, record: &T, source_timestamp: Option<i64>) -> Option<i64> {
        let timestamp = match self.strategy.assigner() {
            Some(assign) => Some(assign(record, source_timestamp)),
            None => source_timestamp,
        };
        if let Some(t) = timestamp {
            let index = match self.current {
                Some(i) => i,
                None => {
                    // A reader that does not name its splits: one implicit split.
                    let i = self.split_index("");
                    self.splits[i].entered = true;
                    self.current = Some(i);
                    i
                }
            };
            match &mut self.splits[index].generator {
                Some(SplitGenerator::Plain(g)) => g.on_event(t, &mut self.scratch),
                Some(SplitGenerator::WithIdleness(g)) => g.on_event(t, &mut self.scratch),
                None => return timestamp,
            }
            self.absorb(index);
        }
        timestamp
    }

    /// Runs every split's periodic emission.
    pub fn on_periodic_emit(&mut self, now: Instant) {
        for index in 0..self.splits.len() {
            match &mut self.splits[index].generator {
                Some(SplitGenerator::Plain(g)) => g.on_periodic_emit(&mut self.scratch),
                Some(SplitGenerator::WithIdleness(g)) => g.on_periodic_emit(&mut self.scratch, now),
                None => continue,
            }
            self.absorb(index);
        }
    }

    fn absorb(&mut self, index: usize) {
        let (watermark, idle) = self.scratch.take();
        let split = &mut self.splits[index];
        if let Some(idle) = idle.filter(|i| *i != split.idle) {
            split.idle = idle;
            self.pending = true;
        }
        if let Some(w) = watermark {
            if w.timestamp > split.watermark {
                split.watermark = w.timestamp;
                self.pending = true;
            } else if w.timestamp < split.watermark {
                self.backward += 1;
            }
        }
    }

    /// Takes the subtask's watermark to `watermark` if that is ahead; counts it otherwise.
    pub fn advance_to(&mut self, watermark: Watermark) -> bool {
        if watermark.timestamp > self.output {
            self.output = watermark.timestamp;
            true
        } else {
            self.backward += u64::from(watermark.timestamp < self.output);
            false
        }
    }

    /// Whether the subtask's watermark or status may have changed.
    #[inline]
    pub fn is_pending(&self) -> bool {
        self.pending
    }

    /// The subtask's status change and new watermark, if any: the minimum over its active
    /// splits; idle when every split is.
    pub fn combine(&mut self) -> (Option<WatermarkStatus>, Option<Watermark>) {
        self.pending = false;
        let names_splits = self.names_splits;
        let generating = self
            .splits
            .iter()
            .filter(|s| s.generator.is_some() && (s.entered || names_splits));
        let mut any = false;
        let mut min: Option<i64> = None;
        for split in generating {
            any = true;
            if !split.idle {
                min = Some(min.map_or(split.watermark, |m| m.min(split.watermark)));
            }
        }
        if !any {
            return (None, None);
        }
        let Some(min) = min else {
            return if self.idle {
                (None, None)
            } else {
                self.idle = true;
                (Some(WatermarkStatus::Idle), None)
            };
        };
        let status = std::mem::replace(&mut self.idle, false).then_some(WatermarkStatus::Active);
        let watermark = (min > self.output).then(|| {
            self.output = min;
            Watermark::new(min)
        });
        (status, watermark)
    }
}

/// What a source reader (or a timestamp-assigning operator) writes into: records get their
/// event timestamps and splits' watermarks on the way into the chain.
pub struct SourceOutput<'a, 'w, T> {
    chain: ChainOutput<'a, T>,
    watermarks: &'w mut SourceWatermarks<T>,
}

impl<'a, 'w, T: Record> SourceOutput<'a, 'w, T> {
    /// Writes into `chain` with the event time of `watermarks`.
    pub fn new(chain: ChainOutput<'a, T>, watermarks: &'w mut SourceWatermarks<T>) -> Self {
        Self { chain, watermarks }
    }

    /// Passes on what changed in the subtask's event time.
    pub fn emit_changes(&mut self) -> Result<(), TaskError> {
        let (status, watermark) = self.watermarks.combine();
        if let Some(status) = status {
            self.chain.emit_watermark_status(status)?;
        }
        if let Some(watermark) = watermark {
            self.chain.emit_watermark(watermark)?;
        }
        Ok(())
    }

    /// Hands the gathered records on.
    pub fn flush(&mut self) -> Result<(), TaskError> {
        self.chain.flush()
    }

    #[inline]
    fn emit(&mut self, record: T, source_timestamp: Option<i64>) -> Result<(), TaskError> {
        match self.watermarks.on_record(&record, source_timestamp) {
            Some(t) => self.chain.collect_with_timestamp(record, t)?,
            None => self.chain.collect(record)?,
        }
        if self.watermarks.is_pending() {
            self.emit_changes()?;
        }
        Ok(())
    }
}

impl<T: Record> Output<T> for SourceOutput<'_, '_, T> {
    #[inline]
    fn collect(&mut self, record: T) -> Result<(), TaskError> {
        let timestamp = self.chain.timestamp();
        self.emit(record, timestamp)
    }

    fn collect_with_timestamp(&mut self, record: T, timestamp: i64) -> Result<(), TaskError> {
        self.emit(record, Some(timestamp))
    }

    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), TaskError> {
        // A reader's own watermark passes if it does not take event time back.
        if self.watermarks.advance_to(watermark) {
            self.chain.emit_watermark(watermark)?;
        }
        Ok(())
    }

    fn enter_split(&mut self, split: &str) {
        self.watermarks.enter_split(split);
    }

    fn release_split(&mut self, split: &str) -> Result<(), TaskError> {
        self.watermarks.release_split(split);
        self.emit_changes()
    }

    fn traces_origins(&self) -> bool {
        Output::traces_origins(&self.chain)
    }

    fn set_origin(&mut self, origin: Option<crate::connectors::origin::TracedOrigin>) {
        self.chain.set_origin(origin);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn strategy() -> WatermarkStrategy<i64> {
        WatermarkStrategy::for_generator(|| PerEvent).with_timestamp_assigner(|r: &i64, _| *r)
    }

    /// A watermark at each event's timestamp.
    struct PerEvent;
    impl WatermarkGenerator for PerEvent {
        fn on_event(&mut self, timestamp: i64, output: &mut WatermarkOutput) {
            output.emit_watermark(Watermark::new(timestamp));
        }
    }

    #[test]
    fn the_subtask_watermark_is_the_minimum_over_its_splits() {
        let mut w = SourceWatermarks::new(strategy());
        w.enter_split("a");
        assert_eq!(w.on_record(&10, None), Some(10));
        assert_eq!(w.combine(), (None, Some(Watermark::new(10))));
        w.enter_split("b");
        w.on_record(&4, None);
        // Split b is behind: the watermark waits for it.
        assert_eq!(w.combine(), (None, None));
        w.on_record(&30, None);
        assert_eq!(w.combine(), (None, None));
        w.enter_split("a");
        w.on_record(&40, None);
        assert_eq!(w.combine(), (None, Some(Watermark::new(30))));
        w.release_split("b");
        assert_eq!(w.combine(), (None, Some(Watermark::new(40))));
    }

    #[test]
    fn an_assigned_split_holds_back_once_the_reader_names_splits() {
        let mut w = SourceWatermarks::new(strategy());
        w.add_split("a");
        w.add_split("b");
        // Not named yet: a reader that never names splits is not held back by them.
        w.on_record(&5, None);
        assert_eq!(w.combine(), (None, Some(Watermark::new(5))));
        let mut w = SourceWatermarks::new(strategy());
        w.add_split("a");
        w.add_split("b");
        w.enter_split("a");
        w.on_record(&50, None);
        // b is assigned but unread: it holds the watermark back (Flink's SourceReaderBase).
        assert_eq!(w.combine(), (None, None));
        w.release_split("b");
        assert_eq!(w.combine(), (None, Some(Watermark::new(50))));
    }

    #[test]
    fn a_watermark_that_goes_back_is_ignored_and_counted() {
        let mut w = SourceWatermarks::new(strategy());
        w.on_record(&10, None);
        w.on_record(&3, None);
        assert_eq!(w.combine(), (None, Some(Watermark::new(10))));
        assert_eq!(w.backward_watermarks(), 1);
    }

    #[test]
    fn an_idle_split_does_not_hold_back_and_all_idle_is_announced() {
        let strategy = WatermarkStrategy::for_bounded_out_of_orderness(Duration::ZERO)
            .with_timestamp_assigner(|r: &i64, _| *r)
            .with_idleness(Duration::from_millis(100));
        let mut w = SourceWatermarks::new(strategy);
        let start = Instant::now();
        w.enter_split("a");
        w.on_record(&100, None);
        w.enter_split("b");
        w.on_record(&5, None);
        w.on_periodic_emit(start + Duration::from_millis(50));
        assert_eq!(w.combine(), (None, Some(Watermark::new(4))));
        // Only a gets records from now on: b goes idle, the watermark follows a alone.
        w.enter_split("a");
        w.on_record(&200, None);
        w.on_periodic_emit(start + Duration::from_millis(120));
        w.on_record(&210, None);
        w.on_periodic_emit(start + Duration::from_millis(180));
        assert_eq!(w.combine(), (None, Some(Watermark::new(209))));
        w.on_periodic_emit(start + Duration::from_millis(400));
        assert_eq!(w.combine(), (Some(WatermarkStatus::Idle), None));
        w.on_record(&220, None);
        assert_eq!(w.combine(), (Some(WatermarkStatus::Active), None));
    }

    #[test]
    fn without_a_strategy_records_keep_the_source_timestamp() {
        let mut w = SourceWatermarks::<i64>::new(WatermarkStrategy::no_watermarks());
        assert_eq!(w.on_record(&1, Some(77)), Some(77));
        assert_eq!(w.on_record(&1, None), None);
        assert_eq!(w.combine(), (None, None));
    }
}
