//! Connected streams: keyed co-processing is exactly once across failures (barriers align
//! across both inputs), and a two-input operator's watermark is the lower of its inputs'.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{committed, failover_config, seeds, CommittingSink};
use weir::prelude::*;
use weir_testkit::Rng;

const RECORDS: u64 = 6_000;

/// Counts each key's records per input; emits the totals when both inputs end.
#[derive(Clone)]
struct CountBoth {
    first: ValueState<u64>,
    second: ValueState<u64>,
}

impl KeyedCoProcessFunction<u64, u64, u64, (u64, u64, u64)> for CountBoth {
    fn process_element1(
        &mut self,
        _: u64,
        ctx: &mut KeyedContext<'_, u64>,
        _: &mut Collector<'_, (u64, u64, u64)>,
    ) -> Result<(), BoxError> {
        let n = self.first.value(ctx)?.unwrap_or(0);
        Ok(self.first.update(ctx, n + 1)?)
    }
    fn process_element2(
        &mut self,
        _: u64,
        ctx: &mut KeyedContext<'_, u64>,
        _: &mut Collector<'_, (u64, u64, u64)>,
    ) -> Result<(), BoxError> {
        let n = self.second.value(ctx)?.unwrap_or(0);
        Ok(self.second.update(ctx, n + 1)?)
    }
    fn end_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, u64>,
        out: &mut Collector<'_, (u64, u64, u64)>,
    ) -> Result<(), BoxError> {
        let (first, second) = (self.first.clone(), self.second.clone());
        let mut keys = std::collections::BTreeSet::new();
        ctx.for_each_key(&first, |key| {
            keys.insert(*key.current_key());
            Ok(())
        })?;
        ctx.for_each_key(&second, |key| {
            keys.insert(*key.current_key());
            Ok(())
        })?;
        ctx.for_each_key(&first, |key| {
            let a = first.value(key)?.unwrap_or(0);
            let b = second.value(key)?.unwrap_or(0);
            out.collect((*key.current_key(), a, b));
            Ok(())
        })?;
        // Keys only the second input saw.
        ctx.for_each_key(&second, |key| {
            if first.value(key)?.is_none() {
                out.collect((*key.current_key(), 0, second.value(key)?.unwrap_or(0)));
            }
            Ok(())
        })
    }
}

#[test]
fn keyed_co_processing_is_exactly_once_across_failures() {
    let mut expected: Vec<(u64, u64, u64)> = (0..13)
        .map(|k| {
            let a = (0..RECORDS).filter(|i| i % 13 == k).count() as u64;
            let b = (0..RECORDS / 2).filter(|i| (i * 7) % 13 == k).count() as u64;
            (k, a, b)
        })
        .filter(|(_, a, b)| a + b > 0)
        .collect();
    expected.sort();
    for seed in seeds(3) {
        let mut rng = Rng(seed);
        let fail_at = 500 + rng.below(RECORDS - 1_000);
        println!("seed {seed}: failure before record {fail_at} of the first input");
        let env =
            StreamExecutionEnvironment::new(failover_config(2, Duration::from_millis(30))).unwrap();
        let (sink, store) = CommittingSink::new();
        let failed = Arc::new(AtomicBool::new(false));
        let first = env
            .from_source(
                GeneratorSource::new(RECORDS, |i| i).with_rate_limit(30_000.0),
                WatermarkStrategy::no_watermarks(),
                "first",
            )
            .uid("first")
            .map(move |i: u64| {
                if i == fail_at && !failed.swap(true, Ordering::SeqCst) {
                    panic!("injected failure at {i}");
                }
                i
            });
        let second = env
            .from_source(
                GeneratorSource::new(RECORDS / 2, |i| i * 7).with_rate_limit(15_000.0),
                WatermarkStrategy::no_watermarks(),
                "second",
            )
            .uid("second");
        first
            .connect(&second)
            .key_by(|i: &u64| i % 13, |i: &u64| i % 13)
            .process(CountBoth {
                first: ValueState::new("first"),
                second: ValueState::new("second"),
            })
            .uid("counts")
            .sink_to(sink, "committed")
            .uid("sink");
        let result = env.execute("co-count").unwrap();
        let mut got = committed(&store);
        got.sort();
        assert_eq!(got, expected, "seed {seed}: {} restarts", result.restarts);
        assert!(result.restarts >= 1, "seed {seed}: the failure happened");
    }
}

/// Sets an event-time timer at 500 at the first input's first record; reports the watermark
/// it fires at, and counts the records of each input.
#[derive(Clone)]
struct TimerAt500 {
    fired: Arc<Mutex<Vec<i64>>>,
    records: Arc<[AtomicU64; 2]>,
}

impl KeyedCoProcessFunction<u8, i64, i64, ()> for TimerAt500 {
    fn process_element1(
        &mut self,
        t: i64,
        ctx: &mut KeyedContext<'_, u8>,
        _: &mut Collector<'_, ()>,
    ) -> Result<(), BoxError> {
        if t == 0 {
            ctx.timer_service().register_event_time_timer(500)?;
        }
        self.records[0].fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn process_element2(
        &mut self,
        _: i64,
        _: &mut KeyedContext<'_, u8>,
        _: &mut Collector<'_, ()>,
    ) -> Result<(), BoxError> {
        self.records[1].fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn on_timer(
        &mut self,
        _: i64,
        ctx: &mut KeyedContext<'_, u8>,
        _: &mut Collector<'_, ()>,
    ) -> Result<(), BoxError> {
        let watermark = ctx.timer_service().current_watermark();
        self.fired.lock().unwrap().push(watermark);
        Ok(())
    }
}

/// A watermark at each event's timestamp.
struct AtEach;

impl WatermarkGenerator for AtEach {
    fn on_event(&mut self, t: i64, out: &mut WatermarkOutput) {
        out.emit_watermark(Watermark::new(t));
    }
}

/// The first input runs to 1 000 and ends; the second, unbounded, stays at `second_time`.
/// Returns what fired once the operator has taken in a watermark of at least 900 on the first
/// input (the one after record 900 comes before record 1 000) and one on the second (the one
/// after its first record comes before its second): a timer the watermark passed has fired
/// by then, and one it has not passed never fires, as neither input's watermark moves again
/// but to the first one's end.
fn fired_with_second_input_at(second_time: i64) -> Vec<i64> {
    let env =
        StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1)).unwrap();
    let fired = Arc::new(Mutex::new(Vec::new()));
    let records: Arc<[AtomicU64; 2]> = Arc::default();
    let strategy =
        || WatermarkStrategy::for_generator(|| AtEach).with_timestamp_assigner(|t: &i64, _| *t);
    let first = env.from_source(
        CollectionSource::new((0..=1_000).step_by(100).collect::<Vec<i64>>()),
        strategy(),
        "first",
    );
    let second = env.from_source(
        GeneratorSource::unbounded(move |_| second_time).with_rate_limit(1_000.0),
        strategy(),
        "second",
    );
    first
        .connect(&second)
        .key_by(|_: &i64| 0u8, |_: &i64| 0u8)
        .process(TimerAt500 {
            fired: fired.clone(),
            records: records.clone(),
        })
        .sink_to(DiscardingSink, "out");
    let client = env.execute_async("two watermarks").unwrap();
    common::wait_until(
        "all of the first input and two records of the second",
        || records[0].load(Ordering::SeqCst) == 11 && records[1].load(Ordering::SeqCst) >= 2,
    );
    client.cancel().unwrap();
    let fired = fired.lock().unwrap().clone();
    fired
}

#[test]
fn the_watermark_of_a_two_input_operator_is_the_lower_of_its_inputs() {
    // The second input holds event time at 50: the timer at 500 waits, although the first
    // input has passed it.
    assert_eq!(fired_with_second_input_at(50), Vec::<i64>::new());
    // At 2 000 the second input no longer holds it back: the timer fires once the first
    // input's watermark passes 500.
    let fired = fired_with_second_input_at(2_000);
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert!(fired[0] >= 500, "{fired:?}");
}
