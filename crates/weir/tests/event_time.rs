//! Event time at the sources: per-split watermarks, idleness, the end of input, and
//! generators whose watermarks go backwards.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use weir::connectors::source::{
    Boundedness, InputStatus, Source, SourceReader, SourceReaderContext, SourceSplit,
};
use weir::connectors::static_enumerator::StaticSplitEnumerator;
use weir::prelude::*;

/// A split that emits the timestamps `0, step, 2·step, …` up to `last`, then nothing more
/// (it stays assigned: an unbounded source that went quiet).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct TimeSplit {
    name: String,
    step: i64,
    last: i64,
    next: i64,
}

impl SourceSplit for TimeSplit {
    fn split_id(&self) -> String {
        self.name.clone()
    }
}

/// Reads all its splits round-robin, ten records per split and millisecond.
#[derive(Clone)]
struct QuietingSource {
    splits: Vec<TimeSplit>,
}

struct QuietingReader {
    splits: Vec<TimeSplit>,
    next_poll: std::time::Instant,
}

impl Source for QuietingSource {
    type Output = (String, i64);
    type Split = TimeSplit;
    type Enumerator = StaticSplitEnumerator<TimeSplit>;
    type Reader = QuietingReader;

    fn boundedness(&self) -> Boundedness {
        Boundedness::ContinuousUnbounded
    }
    fn create_enumerator(&self, _parallelism: u32) -> Result<Self::Enumerator, BoxError> {
        Ok(StaticSplitEnumerator::new(self.splits.clone()))
    }
    fn restore_enumerator(
        &self,
        _parallelism: u32,
        checkpoint: Vec<TimeSplit>,
    ) -> Result<Self::Enumerator, BoxError> {
        Ok(StaticSplitEnumerator::new(checkpoint))
    }
    fn create_reader(&self, context: SourceReaderContext) -> Result<QuietingReader, BoxError> {
        // Ask for every split at once: they are read side by side.
        for _ in 0..self.splits.len() {
            context.send_split_request();
        }
        Ok(QuietingReader {
            splits: Vec::new(),
            next_poll: std::time::Instant::now(),
        })
    }
}

impl SourceReader for QuietingReader {
    type Output = (String, i64);
    type Split = TimeSplit;

    fn poll_next(
        &mut self,
        output: &mut Collector<'_, (String, i64)>,
    ) -> Result<InputStatus, BoxError> {
        let now = std::time::Instant::now();
        if now < self.next_poll {
            return Ok(InputStatus::NothingAvailable);
        }
        self.next_poll = now + Duration::from_millis(1);
        let mut emitted = false;
        for split in &mut self.splits {
            output.for_split(&split.name);
            for _ in 0..10 {
                if split.next > split.last {
                    break;
                }
                output.collect((split.name.clone(), split.next));
                split.next += split.step;
                emitted = true;
            }
        }
        Ok(if emitted {
            InputStatus::MoreAvailable
        } else {
            InputStatus::NothingAvailable
        })
    }
    fn add_splits(&mut self, splits: Vec<TimeSplit>) -> Result<(), BoxError> {
        self.splits.extend(splits);
        Ok(())
    }
    fn notify_no_more_splits(&mut self) {}
    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<TimeSplit>, BoxError> {
        Ok(self.splits.clone())
    }
}

fn split(name: &str, step: i64, last: i64) -> TimeSplit {
    TimeSplit {
        name: name.into(),
        step,
        last,
        next: 0,
    }
}

/// Runs a busy split (timestamps up to 100 000, for about 100 ms) beside a quiet one (a
/// single record at 0), cancels the job once both have gone quiet, and returns the watermark
/// the operator after a shuffle reached.
fn watermark_after_quiet_split(idleness: Option<Duration>) -> Option<Watermark> {
    let config = ExecutionConfig::default()
        .with_parallelism(1)
        .with_auto_watermark_interval(Duration::from_millis(5));
    let env = StreamExecutionEnvironment::new(config).unwrap();
    let mut strategy = WatermarkStrategy::for_bounded_out_of_orderness(Duration::ZERO)
        .with_timestamp_assigner(|record: &(String, i64), _| record.1);
    if let Some(timeout) = idleness {
        strategy = strategy.with_idleness(timeout);
    }
    let source = QuietingSource {
        splits: vec![split("busy", 100, 100_000), split("quiet", 1, 0)],
    };
    env.from_source(source, strategy, "times")
        .rebalance()
        .map(|record| record.1)
        .parallelism(2)
        .sink_to(DiscardingSink, "out");
    let client = env.execute_async("quiet split").unwrap();
    std::thread::sleep(Duration::from_millis(1_500));
    let result = client.cancel().unwrap();
    result.operator("Map").unwrap().watermark
}

#[test]
fn without_idleness_a_quiet_split_holds_the_watermark_back() {
    // The quiet split's only record is at 0: its watermark stays at -1.
    assert_eq!(watermark_after_quiet_split(None), Some(Watermark::new(-1)));
}

#[test]
fn with_idleness_the_watermark_advances_past_a_quiet_split() {
    // The quiet split goes idle after 50 ms and the busy split's watermark takes over; once
    // the busy split is idle too, the source is idle and the watermark stays where it was.
    assert_eq!(
        watermark_after_quiet_split(Some(Duration::from_millis(50))),
        Some(Watermark::new(99_999))
    );
}

/// A watermark at each event's timestamp, whichever way it goes.
struct EveryEvent;

impl WatermarkGenerator for EveryEvent {
    fn on_event(&mut self, timestamp: i64, output: &mut WatermarkOutput) {
        output.emit_watermark(Watermark::new(timestamp));
    }
}

#[test]
fn a_generator_going_backwards_is_ignored_and_counted() {
    let env =
        StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1)).unwrap();
    let strategy =
        WatermarkStrategy::for_generator(|| EveryEvent).with_timestamp_assigner(|t: &i64, _| *t);
    let out = env
        .from_source(
            CollectionSource::new(vec![10, 30, 20, 40, 5]),
            strategy,
            "times",
        )
        .collect();
    let result = env.execute("backwards").unwrap();
    assert_eq!(out.take(), vec![10, 30, 20, 40, 5]);
    let source = result.operator("Source: times").unwrap();
    assert_eq!(source.backward_watermarks, 2);
    // The end of the bounded input ends event time everywhere.
    assert_eq!(source.watermark, Some(Watermark::MAX));
    assert_eq!(
        result.operator("Sink: Collect").unwrap().watermark,
        Some(Watermark::MAX)
    );
}

#[test]
fn assigned_timestamps_get_periodic_watermarks_while_the_stream_runs() {
    let config = ExecutionConfig::default()
        .with_parallelism(1)
        .with_auto_watermark_interval(Duration::from_millis(10));
    let env = StreamExecutionEnvironment::new(config).unwrap();
    env.from_source(
        GeneratorSource::unbounded(|i| i as i64 * 10).with_rate_limit(2_000.0),
        WatermarkStrategy::no_watermarks(),
        "numbers",
    )
    .assign_timestamps_and_watermarks(
        WatermarkStrategy::for_monotonous_timestamps().with_timestamp_assigner(|t: &i64, _| *t),
    )
    .rebalance()
    .map(|t| t)
    .parallelism(2)
    .sink_to(DiscardingSink, "out");
    let client = env.execute_async("periodic").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let result = client.cancel().unwrap();
    let watermark = result.operator("Map").unwrap().watermark;
    // Hundreds of records at 10 ms of event time each: the watermark has moved well past 0,
    // without any end of input.
    assert!(
        watermark.is_some_and(|w| w.timestamp > 100 && w < Watermark::MAX),
        "{watermark:?}"
    );
}
