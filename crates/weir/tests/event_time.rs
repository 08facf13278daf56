//! Event time at the sources: per-split watermarks, idleness, the end of input, and
//! generators whose watermarks go backwards.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
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

/// Reads all its splits round-robin, ten records per split and millisecond, once it has been
/// assigned all of them. Once `ticked` says that event time was emitted periodically after the
/// last record, it sends two markers on the split that ended last, at its last timestamp: a
/// round-robin shuffle gives one to each of two subtasks, after every watermark emitted so far.
#[derive(Clone)]
struct QuietingSource {
    splits: Vec<TimeSplit>,
    ticked: Arc<AtomicBool>,
}

struct QuietingReader {
    splits: Vec<TimeSplit>,
    expected: usize,
    next_poll: std::time::Instant,
    ticked: Arc<AtomicBool>,
    markers_sent: bool,
}

/// The name the markers carry.
const MARKER: &str = "marker";

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
            expected: self.splits.len(),
            next_poll: std::time::Instant::now(),
            ticked: self.ticked.clone(),
            markers_sent: false,
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
        // Side by side from the first record, however far apart the assignments come.
        if self.splits.len() < self.expected {
            return Ok(InputStatus::NothingAvailable);
        }
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
        if !emitted && !self.markers_sent && self.ticked.load(Ordering::SeqCst) {
            self.markers_sent = true;
            if let Some(last) = self.splits.iter().max_by_key(|s| s.last) {
                output.for_split(&last.name);
                for _ in 0..2 {
                    output.collect((MARKER.to_string(), last.last));
                }
                return Ok(InputStatus::MoreAvailable);
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

/// Bounded out-of-orderness without disorder (the watermark trails the highest timestamp by
/// 1 ms), which sets `ticked` at its first periodic emission after it saw `last`.
struct TicksAfter {
    inner: weir::time::BoundedOutOfOrderness,
    last: i64,
    seen_last: bool,
    ticked: Arc<AtomicBool>,
}

impl WatermarkGenerator for TicksAfter {
    fn on_event(&mut self, timestamp: i64, output: &mut WatermarkOutput) {
        self.seen_last |= timestamp >= self.last;
        self.inner.on_event(timestamp, output);
    }
    fn on_periodic_emit(&mut self, output: &mut WatermarkOutput) {
        self.inner.on_periodic_emit(output);
        if self.seen_last {
            self.ticked.store(true, Ordering::SeqCst);
        }
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

/// Runs a busy split (timestamps up to 100 000, for 100 ms at least) beside a quiet one (a
/// single record at 0), cancels the job once both have gone quiet, and returns the watermark
/// the operator after a shuffle reached: once event time was emitted after the busy split's
/// last record (with idleness, the quiet split is idle by then: it has had no record for
/// 100 ms), and each subtask of the operator has taken in what was emitted up to then (it has
/// seen a marker sent after it).
fn watermark_after_quiet_split(idleness: Option<Duration>) -> Option<Watermark> {
    const LAST: i64 = 100_000;
    let config = ExecutionConfig::default()
        .with_parallelism(1)
        .with_auto_watermark_interval(Duration::from_millis(5));
    let env = StreamExecutionEnvironment::new(config).unwrap();
    let ticked = Arc::new(AtomicBool::new(false));
    let generator_ticked = ticked.clone();
    let mut strategy = WatermarkStrategy::for_generator(move || TicksAfter {
        inner: weir::time::BoundedOutOfOrderness::new(Duration::ZERO),
        last: LAST,
        seen_last: false,
        ticked: generator_ticked.clone(),
    })
    .with_timestamp_assigner(|record: &(String, i64), _| record.1);
    if let Some(timeout) = idleness {
        strategy = strategy.with_idleness(timeout);
    }
    let source = QuietingSource {
        splits: vec![split("busy", 100, LAST), split("quiet", 1, 0)],
        ticked,
    };
    let markers = Arc::new(AtomicUsize::new(0));
    let seen = markers.clone();
    env.from_source(source, strategy, "times")
        .rebalance()
        .map(move |record: (String, i64)| {
            if record.0 == MARKER {
                seen.fetch_add(1, Ordering::SeqCst);
            }
            record.1
        })
        .parallelism(2)
        .sink_to(DiscardingSink, "out");
    let client = env.execute_async("quiet split").unwrap();
    wait_until("a marker at each subtask", || {
        markers.load(Ordering::SeqCst) == 2
    });
    let result = client.cancel().unwrap();
    result.operator("Map").unwrap().watermark
}

/// Waits until `done` holds; the five-minute limit only guards against a hang.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "gave up waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
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
        .with_auto_watermark_interval(Duration::from_millis(10))
        .with_metrics_update_interval(Duration::from_millis(20));
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
    // Cancelled once the map's published event time passed 100, however slow the machine.
    wait_until("the map's watermark past 100", || {
        client
            .details()
            .vertices
            .iter()
            .find(|v| v.operators.iter().any(|o| o == "Map"))
            .and_then(|v| v.metrics.as_ref())
            .and_then(|m| m.watermark)
            .is_some_and(|w| w > 100)
    });
    let result = client.cancel().unwrap();
    let watermark = result.operator("Map").unwrap().watermark;
    // Records at 10 ms of event time each: the watermark has moved well past 0, without any
    // end of input.
    assert!(
        watermark.is_some_and(|w| w.timestamp > 100 && w < Watermark::MAX),
        "{watermark:?}"
    );
}
