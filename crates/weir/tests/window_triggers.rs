//! Triggers and clocks beyond the default event-time trigger: a custom trigger with its own
//! per-window state, processing-time windows on a running stream, and timestamps at the ends
//! of the i64 range.

mod common;

use std::time::Duration;

use weir::prelude::*;
use weir::windowing::{
    GlobalWindow, GlobalWindows, TimeWindow, Trigger, TriggerContext, TriggerResult,
    TumblingEventTimeWindows, TumblingProcessingTimeWindows, Window, WindowContext,
};

/// Fires (and purges) when a window holds `n` records whose sum passes `limit`; its state
/// is the running sum.
#[derive(Clone)]
struct SumAbove {
    limit: u64,
}

impl Trigger<GlobalWindow> for SumAbove {
    type State = u64;

    fn on_element(
        &mut self,
        timestamp: i64,
        _window: &GlobalWindow,
        sum: &mut u64,
        _ctx: &mut TriggerContext,
    ) -> TriggerResult {
        // The record's value is its timestamp in this test.
        *sum += timestamp as u64;
        if *sum > self.limit {
            *sum = 0;
            TriggerResult::FireAndPurge
        } else {
            TriggerResult::Continue
        }
    }
}

/// A watermark at each event's timestamp.
struct AtEach;

impl WatermarkGenerator for AtEach {
    fn on_event(&mut self, t: i64, out: &mut WatermarkOutput) {
        out.emit_watermark(Watermark::new(t));
    }
}

#[test]
fn a_custom_trigger_with_its_own_state_fires_and_purges() {
    let env =
        StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1)).unwrap();
    let values: Vec<i64> = vec![4, 3, 5, 1, 9, 2, 2, 2];
    let batches = env
        .from_source(
            CollectionSource::new(values),
            WatermarkStrategy::no_watermarks().with_timestamp_assigner(|v: &i64, _| *v),
            "values",
        )
        .key_by(|_: &i64| 0u8)
        .window(GlobalWindows::create())
        .trigger(SumAbove { limit: 10 })
        .process(
            |_: &u8,
             _: &WindowContext<'_, GlobalWindow>,
             values: &[i64],
             out: &mut Collector<'_, Vec<i64>>| {
                out.collect(values.to_vec());
                Ok(())
            },
        )
        .collect();
    env.execute("sum above").unwrap();
    // 4+3+5 = 12 fires; 1+9+2 = 12 fires; 2+2 stays below.
    assert_eq!(batches.take(), vec![vec![4, 3, 5], vec![1, 9, 2]]);
}

/// A fired window: key, start, end, its records, and when it fired after its last
/// millisecond.
type Fired = (u64, i64, i64, Vec<u64>, i64);

#[test]
fn processing_time_windows_fire_on_the_wall_clock_while_records_flow() {
    let env =
        StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1)).unwrap();
    let fired = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Fired>::new()));
    let seen = fired.clone();
    env.from_source(
        GeneratorSource::unbounded(|i| i).with_rate_limit(2_000.0),
        WatermarkStrategy::no_watermarks(),
        "ticks",
    )
    .key_by(|i: &u64| i % 2)
    .window(TumblingProcessingTimeWindows::of(Duration::from_millis(
        100,
    )))
    .process(
        move |key: &u64,
              ctx: &WindowContext<'_, TimeWindow>,
              ticks: &[u64],
              _out: &mut Collector<'_, ()>| {
            let w = ctx.window();
            seen.lock().unwrap().push((
                *key,
                w.start,
                w.end,
                ticks.to_vec(),
                ctx.current_processing_time() - w.max_timestamp(),
            ));
            Ok(())
        },
    )
    .sink_to(DiscardingSink, "out");
    let client = env.execute_async("processing time").unwrap();
    // The source never ends: only the clock fires windows. Six of them, while the records
    // flow, however long a loaded machine takes.
    common::wait_until("six fired windows", || fired.lock().unwrap().len() >= 6);
    client.cancel().unwrap();
    let fired = fired.lock().unwrap().clone();
    assert!(fired.len() >= 6, "{fired:?}");
    // Per key: the end of its last fired window and its last record.
    let mut previous: std::collections::HashMap<u64, (i64, u64)> = Default::default();
    let mut everywhere = std::collections::HashSet::new();
    for (key, start, end, ticks, late) in fired {
        assert_eq!(end - start, 100);
        assert!(!ticks.is_empty(), "key {key}: an empty window fired");
        assert!(late >= 0, "key {key} fired {late} ms after its end");
        assert!(ticks.iter().all(|t| t % 2 == key), "key {key}: {ticks:?}");
        assert!(
            ticks.windows(2).all(|p| p[0] < p[1]),
            "key {key}: records in arrival order: {ticks:?}"
        );
        // A key's windows fire in order, each with the records after the previous one's:
        // fired windows are purged, and a record is in one window only.
        if let Some((previous_end, previous_tick)) = previous.get(&key) {
            assert!(
                start >= *previous_end,
                "key {key}: [{start}, {end}) out of order"
            );
            assert!(ticks[0] > *previous_tick, "key {key}: {ticks:?} again");
        }
        previous.insert(key, (end, *ticks.last().unwrap()));
        for tick in ticks {
            assert!(everywhere.insert(tick), "tick {tick} in two windows");
        }
    }
}

#[test]
fn timestamps_at_the_ends_of_the_range_do_not_overflow_windows() {
    let env =
        StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1)).unwrap();
    let times = vec![
        i64::MIN + 1,
        i64::MIN + 999,
        0,
        i64::MAX - 1_000,
        i64::MAX - 1,
    ];
    let windows = env
        .from_source(
            CollectionSource::new(times),
            WatermarkStrategy::for_generator(|| AtEach).with_timestamp_assigner(|t: &i64, _| *t),
            "times",
        )
        .key_by(|_: &i64| 0u8)
        .window(TumblingEventTimeWindows::of(Duration::from_secs(1)))
        .process(
            |_: &u8,
             ctx: &WindowContext<'_, TimeWindow>,
             times: &[i64],
             out: &mut Collector<'_, (i64, i64, usize)>| {
                let w = ctx.window();
                assert!(w.start <= w.max_timestamp());
                out.collect((w.start, w.end, times.len()));
                Ok(())
            },
        )
        .collect();
    env.execute("ends of time").unwrap();
    let windows = windows.take();
    assert_eq!(windows.iter().map(|w| w.2).sum::<usize>(), 5, "{windows:?}");
    assert_eq!(windows.first().map(|w| w.0), Some(i64::MIN));
    assert!(
        windows.last().is_some_and(|w| w.1 == i64::MAX),
        "{windows:?}"
    );
}
