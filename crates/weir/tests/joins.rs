//! Window and interval joins against a nested-loop reference, on random out-of-order streams,
//! also across failures and restores.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{committed, diff, failover_config, multiset, seeds, CommittingSink};
use weir::prelude::*;
use weir::windowing::{SlidingEventTimeWindows, TumblingEventTimeWindows};
use weir_testkit::Rng;

/// `(key, timestamp, id)`.
type Event = (u64, i64, u64);

const KEYS: u64 = 5;
const DISORDER: i64 = 30;

fn events(seed: u64, n: u64, step: i64) -> Vec<Event> {
    let mut rng = Rng(seed);
    (0..n)
        .map(|i| {
            let early = rng.below(DISORDER as u64 + 1) as i64;
            (rng.below(KEYS), i as i64 * step - early, i)
        })
        .collect()
}

/// A watermark after each event, `DISORDER` behind the highest timestamp: nothing is late.
#[derive(Clone)]
struct Trailing {
    max: i64,
}

impl WatermarkGenerator for Trailing {
    fn on_event(&mut self, t: i64, out: &mut WatermarkOutput) {
        self.max = self.max.max(t);
        out.emit_watermark(Watermark::new(self.max - DISORDER - 1));
    }
}

fn source(
    env: &StreamExecutionEnvironment,
    events: Vec<Event>,
    name: &str,
    fail_at: Option<u64>,
) -> DataStream<Event> {
    let n = events.len() as u64;
    let events = Arc::new(events);
    let failed = Arc::new(AtomicBool::new(false));
    env.from_source(
        GeneratorSource::new(n, move |i| events[i as usize]).with_rate_limit(10_000.0),
        WatermarkStrategy::for_generator(|| Trailing { max: i64::MIN / 2 })
            .with_timestamp_assigner(|e: &Event, _| e.1),
        name,
    )
    .uid(name)
    .map(move |e: Event| {
        if Some(e.2) == fail_at && !failed.swap(true, Ordering::SeqCst) {
            panic!("injected failure at event {}", e.2);
        }
        e
    })
}

#[derive(Clone, Copy, Debug)]
enum WindowKind {
    Tumbling,
    Sliding,
}

fn window_join_reference(
    kind: WindowKind,
    left: &[Event],
    right: &[Event],
) -> Vec<(u64, u64, u64)> {
    let windows = |t: i64| -> Vec<i64> {
        match kind {
            WindowKind::Tumbling => vec![t.div_euclid(100) * 100],
            WindowKind::Sliding => {
                let last = t.div_euclid(50) * 50;
                vec![last, last - 50]
            }
        }
    };
    let mut pairs = Vec::new();
    for a in left {
        for b in right {
            if a.0 != b.0 {
                continue;
            }
            let shared = windows(a.1)
                .into_iter()
                .filter(|w| windows(b.1).contains(w))
                .count();
            for _ in 0..shared {
                pairs.push((a.0, a.2, b.2));
            }
        }
    }
    pairs
}

fn run_window_join(kind: WindowKind, seed: u64, parallelism: u32, fail_at: Option<u64>) {
    let (left, right) = (events(seed, 400, 4), events(seed + 1, 300, 5));
    let env =
        StreamExecutionEnvironment::new(failover_config(parallelism, Duration::from_millis(30)))
            .unwrap();
    let (sink, store) = CommittingSink::new();
    let joined = source(&env, left.clone(), "left", fail_at)
        .join(&source(&env, right.clone(), "right", None))
        .where_(|e: &Event| e.0)
        .equal_to(|e: &Event| e.0);
    let pairs = match kind {
        WindowKind::Tumbling => joined
            .window(TumblingEventTimeWindows::of(Duration::from_millis(100)))
            .apply(|a: Event, b: Event| (a.0, a.2, b.2)),
        WindowKind::Sliding => joined
            .window(SlidingEventTimeWindows::of(
                Duration::from_millis(100),
                Duration::from_millis(50),
            ))
            .apply(|a: Event, b: Event| (a.0, a.2, b.2)),
    };
    pairs.uid("join").sink_to(sink, "pairs").uid("sink");
    let result = env.execute("window join").unwrap();
    assert!(
        fail_at.is_none() || result.restarts >= 1,
        "the injected failure happened"
    );
    let expected = multiset(&window_join_reference(kind, &left, &right));
    if let Some(d) = diff(&expected, &multiset(&committed(&store))) {
        panic!(
            "{kind:?} window join, seed {seed}, p{parallelism}, failure {fail_at:?} ({} restarts): {d}",
            result.restarts
        );
    }
}

#[test]
fn window_joins_equal_a_nested_loop_reference() {
    for seed in seeds(2) {
        for kind in [WindowKind::Tumbling, WindowKind::Sliding] {
            for parallelism in [1, 2] {
                run_window_join(kind, seed, parallelism, None);
            }
        }
    }
}

#[test]
fn window_joins_are_exactly_once_across_failures() {
    for seed in seeds(2) {
        let fail_at = 50 + Rng(seed).below(300);
        println!("seed {seed}: failure at left event {fail_at}");
        run_window_join(WindowKind::Tumbling, seed, 2, Some(fail_at));
    }
}

fn interval_join_reference(
    left: &[Event],
    right: &[Event],
    lower: i64,
    upper: i64,
) -> Vec<(u64, u64, u64)> {
    let mut pairs = Vec::new();
    for a in left {
        for b in right {
            if a.0 == b.0 && a.1 + lower <= b.1 && b.1 <= a.1 + upper {
                pairs.push((a.0, a.2, b.2));
            }
        }
    }
    pairs
}

fn run_interval_join(seed: u64, parallelism: u32, lower: i64, upper: i64, fail_at: Option<u64>) {
    let (left, right) = (events(seed, 400, 4), events(seed + 1, 300, 5));
    let env =
        StreamExecutionEnvironment::new(failover_config(parallelism, Duration::from_millis(30)))
            .unwrap();
    let (sink, store) = CommittingSink::new();
    source(&env, left.clone(), "left", fail_at)
        .key_by(|e: &Event| e.0)
        .interval_join(&source(&env, right.clone(), "right", None).key_by(|e: &Event| e.0))
        .between(lower, upper)
        .process(|a: Event, b: Event| (a.0, a.2, b.2))
        .uid("join")
        .sink_to(sink, "pairs")
        .uid("sink");
    let result = env.execute("interval join").unwrap();
    assert!(
        fail_at.is_none() || result.restarts >= 1,
        "the injected failure happened"
    );
    let expected = multiset(&interval_join_reference(&left, &right, lower, upper));
    if let Some(d) = diff(&expected, &multiset(&committed(&store))) {
        panic!(
            "interval join [{lower}, {upper}], seed {seed}, p{parallelism}, failure {fail_at:?} ({} restarts): {d}",
            result.restarts
        );
    }
}

#[test]
fn interval_joins_equal_a_nested_loop_reference() {
    for seed in seeds(2) {
        let mut rng = Rng(seed + 9);
        for parallelism in [1, 2] {
            let lower = rng.below(40) as i64 - 30;
            let upper = lower + rng.below(40) as i64;
            println!("seed {seed}: between({lower}, {upper}) at p{parallelism}");
            run_interval_join(seed, parallelism, lower, upper, None);
        }
    }
}

#[test]
fn interval_joins_are_exactly_once_across_failures() {
    for seed in seeds(2) {
        let fail_at = 50 + Rng(seed).below(300);
        println!("seed {seed}: failure at left event {fail_at}");
        run_interval_join(seed, 2, -10, 20, Some(fail_at));
    }
}
