//! Triggers and clocks beyond the default event-time trigger: a custom trigger with its own
//! per-window state, processing-time windows on a running stream, and timestamps at the ends
//! of the i64 range.

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

#[test]
fn processing_time_windows_fire_on_the_wall_clock_while_records_flow() {
    let env =
        StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1)).unwrap();
    let counts = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = counts.clone();
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
                w.end - w.start,
                ticks.len(),
                ctx.current_processing_time() - w.max_timestamp(),
            ));
            Ok(())
        },
    )
    .sink_to(DiscardingSink, "out");
    let client = env.execute_async("processing time").unwrap();
    std::thread::sleep(Duration::from_millis(700));
    client.cancel().unwrap();
    let counts = counts.lock().unwrap().clone();
    // About six windows per key in 700 ms, each fired by the clock after its end.
    assert!(counts.len() >= 6, "{counts:?}");
    for (key, size, ticks, late) in counts {
        assert_eq!(size, 100);
        assert!(
            ticks > 0 && ticks <= 200,
            "key {key}: {ticks} ticks in 100 ms"
        );
        assert!(
            (0..200).contains(&late),
            "key {key} fired {late} ms after its end"
        );
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
