//! Windows against a batch reference: random out-of-order streams, every window kind, at
//! parallelism 1 and 2, with seeded failures and restores, and rescaled 2 → 3 → 1 through
//! savepoints; late records and allowed lateness; refused configurations.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{committed, diff, failover_config, multiset, seeds, CommittedStore, CommittingSink};
use weir::prelude::*;
use weir::windowing::{
    EventTimeSessionWindows, SlidingEventTimeWindows, TimeWindow, TumblingEventTimeWindows,
    WindowContext,
};
use weir_testkit::Rng;

/// `(key, timestamp, value)`.
type Event = (u64, i64, u64);
/// `(key, window start, window end, sum, count)`.
type Result5 = (u64, i64, i64, u64, u64);

const KEYS: u64 = 7;

/// The `i`-th event of a stream whose timestamps advance by 10 ms per event, each up to
/// `disorder` ms early: out of order, but never by more than `disorder`.
fn event(seed: u64, i: u64, disorder: u64) -> Event {
    let mut rng = Rng(seed.wrapping_mul(1_000_003).wrapping_add(i));
    let early = rng.below(disorder + 1) as i64;
    (rng.below(KEYS), i as i64 * 10 - early, rng.below(100))
}

/// A watermark after every event, `disorder` behind the highest timestamp: no event is late.
#[derive(Clone)]
struct TrailingByBound {
    max: i64,
    bound: i64,
}

impl WatermarkGenerator for TrailingByBound {
    fn on_event(&mut self, timestamp: i64, output: &mut WatermarkOutput) {
        self.max = self.max.max(timestamp);
        output.emit_watermark(Watermark::new(self.max - self.bound - 1));
    }
}

#[derive(Clone)]
struct SumCount;

impl AggregateFunction<Event, (u64, u64), (u64, u64)> for SumCount {
    fn create_accumulator(&self) -> (u64, u64) {
        (0, 0)
    }
    fn add(&self, e: Event, acc: &mut (u64, u64)) {
        acc.0 += e.2;
        acc.1 += 1;
    }
    fn get_result(&self, acc: &(u64, u64)) -> (u64, u64) {
        *acc
    }
    fn merge(&self, a: (u64, u64), b: (u64, u64)) -> (u64, u64) {
        (a.0 + b.0, a.1 + b.1)
    }
}

fn with_window(
    key: &u64,
    ctx: &WindowContext<'_, TimeWindow>,
    results: &[(u64, u64)],
    out: &mut Collector<'_, Result5>,
) -> Result<(), BoxError> {
    let w = ctx.window();
    for (sum, count) in results {
        out.collect((*key, w.start, w.end, *sum, *count));
    }
    Ok(())
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Tumbling,
    Sliding,
    Session,
    /// Tumbling, through a process function that sees every record.
    TumblingProcess,
}

const SIZE: i64 = 200;
const SLIDE: i64 = 50;
const GAP: i64 = 25;

/// The batch reference: every window's (sum, count), from all events at once.
fn reference(kind: Kind, events: &[Event]) -> Vec<Result5> {
    let mut windows: BTreeMap<(u64, i64, i64), (u64, u64)> = BTreeMap::new();
    let mut add = |k: u64, start: i64, end: i64, v: u64| {
        let w = windows.entry((k, start, end)).or_insert((0, 0));
        w.0 += v;
        w.1 += 1;
    };
    match kind {
        Kind::Tumbling | Kind::TumblingProcess => {
            for &(k, t, v) in events {
                let start = t.div_euclid(SIZE) * SIZE;
                add(k, start, start + SIZE, v);
            }
        }
        Kind::Sliding => {
            for &(k, t, v) in events {
                let mut start = t.div_euclid(SLIDE) * SLIDE;
                while start > t - SIZE {
                    add(k, start, start + SIZE, v);
                    start -= SLIDE;
                }
            }
        }
        Kind::Session => {
            let mut by_key: BTreeMap<u64, Vec<(i64, u64)>> = BTreeMap::new();
            for &(k, t, v) in events {
                by_key.entry(k).or_default().push((t, v));
            }
            for (k, mut items) in by_key {
                items.sort();
                let mut session: Option<(i64, i64, u64, u64)> = None;
                for (t, v) in items {
                    session = match session {
                        Some((start, end, sum, count)) if t <= end => {
                            Some((start, end.max(t + GAP), sum + v, count + 1))
                        }
                        Some((start, end, sum, count)) => {
                            windows.insert((k, start, end), (sum, count));
                            Some((t, t + GAP, v, 1))
                        }
                        None => Some((t, t + GAP, v, 1)),
                    };
                }
                if let Some((start, end, sum, count)) = session {
                    windows.insert((k, start, end), (sum, count));
                }
            }
        }
    }
    windows
        .into_iter()
        .map(|((k, s, e), (sum, count))| (k, s, e, sum, count))
        .collect()
}

struct Run {
    kind: Kind,
    seed: u64,
    records: u64,
    disorder: u64,
    parallelism: u32,
    fail_at: Vec<u64>,
}

fn build(env: &StreamExecutionEnvironment, run: &Run, store: &CommittedStore<Result5>) {
    build_with(env, run, store, 0, &Arc::default());
}

/// [`build`], the last `held` events of each split withheld for good (none with 0), and the
/// events read counted in `read`.
fn build_with(
    env: &StreamExecutionEnvironment,
    run: &Run,
    store: &CommittedStore<Result5>,
    held: u64,
    read: &Arc<AtomicU64>,
) {
    let (seed, disorder) = (run.seed, run.disorder);
    let read = read.clone();
    let failures: Arc<Vec<(u64, AtomicBool)>> = Arc::new(
        run.fail_at
            .iter()
            .map(|&i| (i, AtomicBool::new(false)))
            .collect(),
    );
    let mut source = GeneratorSource::new(run.records, move |i| (i, event(seed, i, disorder)))
        .with_rate_limit(20_000.0);
    if held > 0 {
        source = source.with_held_tail(held, || false);
    }
    let events = env
        .from_source(
            source,
            WatermarkStrategy::for_generator(move || TrailingByBound {
                max: i64::MIN / 2,
                bound: disorder as i64,
            })
            .with_timestamp_assigner(|e: &(u64, Event), _| e.1 .1),
            "events",
        )
        .uid("events")
        .map(move |(i, e)| {
            for (at, done) in failures.iter() {
                if i == *at && !done.swap(true, Ordering::SeqCst) {
                    panic!("injected failure at event {i}");
                }
            }
            read.fetch_add(1, Ordering::SeqCst);
            e
        })
        .name("fault injector");
    let keyed = events.key_by(|e: &Event| e.0);
    let results = match run.kind {
        Kind::Tumbling => keyed
            .window(TumblingEventTimeWindows::of(Duration::from_millis(
                SIZE as u64,
            )))
            .aggregate_with(SumCount, with_window),
        Kind::Sliding => keyed
            .window(SlidingEventTimeWindows::of(
                Duration::from_millis(SIZE as u64),
                Duration::from_millis(SLIDE as u64),
            ))
            .aggregate_with(SumCount, with_window),
        Kind::Session => keyed
            .window(EventTimeSessionWindows::with_gap(Duration::from_millis(
                GAP as u64,
            )))
            .aggregate_with(SumCount, with_window),
        Kind::TumblingProcess => keyed
            .window(TumblingEventTimeWindows::of(Duration::from_millis(
                SIZE as u64,
            )))
            .process(
                |key: &u64,
                 ctx: &WindowContext<'_, TimeWindow>,
                 events: &[Event],
                 out: &mut Collector<'_, Result5>| {
                    let sum = events.iter().map(|e| e.2).sum();
                    let w = ctx.window();
                    out.collect((*key, w.start, w.end, sum, events.len() as u64));
                    Ok(())
                },
            ),
    };
    results
        .uid("windows")
        .sink_to(
            CommittingSink {
                store: store.clone(),
            },
            "committed",
        )
        .uid("sink");
}

fn check(run: Run) {
    let env = StreamExecutionEnvironment::new(failover_config(
        run.parallelism,
        Duration::from_millis(40),
    ))
    .unwrap();
    let (_, store) = CommittingSink::<Result5>::new();
    build(&env, &run, &store);
    let result = env.execute("windows").unwrap();
    let events: Vec<Event> = (0..run.records)
        .map(|i| event(run.seed, i, run.disorder))
        .collect();
    let expected = multiset(&reference(run.kind, &events));
    let got = multiset(&committed(&store));
    if let Some(d) = diff(&expected, &got) {
        panic!(
            "{:?} at parallelism {} (seed {}, failures {:?}, {} restarts): {d}; replay with \
             WEIR_SEED={}",
            run.kind, run.parallelism, run.seed, run.fail_at, result.restarts, run.seed
        );
    }
    let windows = result
        .operators
        .iter()
        .find(|o| o.name.starts_with("Window("))
        .unwrap();
    assert_eq!(windows.late_records_dropped, 0, "no event is late");
}

#[test]
fn every_window_kind_equals_the_batch_reference() {
    for seed in seeds(2) {
        for kind in [
            Kind::Tumbling,
            Kind::Sliding,
            Kind::Session,
            Kind::TumblingProcess,
        ] {
            for parallelism in [1, 2] {
                println!("seed {seed}: {kind:?} at parallelism {parallelism}");
                check(Run {
                    kind,
                    seed,
                    records: 2_000,
                    disorder: 40,
                    parallelism,
                    fail_at: Vec::new(),
                });
            }
        }
    }
}

#[test]
fn windows_are_exactly_once_across_failures_and_restores() {
    for seed in seeds(2) {
        let mut rng = Rng(seed + 77);
        for kind in [Kind::Tumbling, Kind::Sliding, Kind::Session] {
            let fail_at: Vec<u64> = (0..1 + rng.below(2))
                .map(|_| 200 + rng.below(1_600))
                .collect();
            println!("seed {seed}: {kind:?} with failures before events {fail_at:?}");
            check(Run {
                kind,
                seed,
                records: 2_000,
                disorder: 40,
                parallelism: 2,
                fail_at,
            });
        }
    }
}

fn savepoint_config(
    parallelism: u32,
    dir: &std::path::Path,
    restore: Option<&Savepoint>,
) -> ExecutionConfig {
    let mut config = ExecutionConfig::default()
        .with_parallelism(parallelism)
        .with_buffer_size(64)
        .with_checkpointing(
            CheckpointConfig::default()
                .with_interval(Duration::from_millis(50))
                .with_storage(CheckpointStorageConfig::directory(dir)),
        );
    if let Some(savepoint) = restore {
        config = config.with_restore(savepoint);
    }
    config
}

#[test]
fn window_contents_and_timers_are_redistributed_when_rescaled_2_3_1() {
    for kind in [Kind::Tumbling, Kind::Session] {
        let run = Run {
            kind,
            seed: 5,
            records: 6_000,
            disorder: 40,
            parallelism: 2,
            fail_at: Vec::new(),
        };
        let dir = tempfile::tempdir().unwrap();
        let (_, store) = CommittingSink::<Result5>::new();
        // Two splits of 3 000: the first run reads 1 000 of each and cannot end, nor can the
        // second, which reads 1 000 more; each is stopped once it read what it can and
        // completed a checkpoint.
        let mut savepoint: Option<Savepoint> = None;
        for (parallelism, held) in [(2, 2_000), (3, 1_000)] {
            let env = StreamExecutionEnvironment::new(savepoint_config(
                parallelism,
                dir.path(),
                savepoint.as_ref(),
            ))
            .unwrap();
            let read = Arc::new(AtomicU64::new(0));
            build_with(&env, &run, &store, held, &read);
            let client = env.execute_async("windows").unwrap();
            common::wait_until("the events the run can read", || {
                read.load(Ordering::SeqCst) >= 2_000
            });
            common::await_checkpoints(&client, 1);
            let (stopped, result) = client.stop_with_savepoint().unwrap();
            assert_eq!(result.status, JobStatus::Stopped);
            assert_eq!(read.load(Ordering::SeqCst), 2_000, "held events were read");
            savepoint = Some(stopped);
        }
        let env =
            StreamExecutionEnvironment::new(savepoint_config(1, dir.path(), savepoint.as_ref()))
                .unwrap();
        build(&env, &run, &store);
        env.execute("windows").unwrap();
        let events: Vec<Event> = (0..run.records)
            .map(|i| event(run.seed, i, run.disorder))
            .collect();
        let expected = multiset(&reference(kind, &events));
        if let Some(d) = diff(&expected, &multiset(&committed(&store))) {
            panic!("{kind:?} rescaled 2 -> 3 -> 1: {d}");
        }
    }
}

/// A watermark at each event's timestamp.
struct AtEachEvent;

impl WatermarkGenerator for AtEachEvent {
    fn on_event(&mut self, timestamp: i64, output: &mut WatermarkOutput) {
        output.emit_watermark(Watermark::new(timestamp));
    }
}

#[test]
fn late_records_go_to_the_side_output_exactly_when_every_window_is_past_its_lateness() {
    for seed in seeds(4) {
        let mut rng = Rng(seed);
        let lateness = rng.below(30) as i64;
        let events: Vec<(u64, i64)> = (0..300)
            .map(|i| (i, i as i64 * 3 - rng.below(60) as i64))
            .collect();
        // The reference: windows of 20 ms; a record is late when its window's end minus one,
        // plus the lateness, is at or below the watermark (the highest timestamp before it).
        let mut watermark = i64::MIN;
        let mut late = Vec::new();
        let mut last_result: HashMap<i64, u64> = HashMap::new();
        let mut kept: BTreeMap<i64, u64> = BTreeMap::new();
        for &(_, t) in &events {
            let start = t.div_euclid(20) * 20;
            if start + 19 + lateness <= watermark {
                late.push(t);
            } else {
                *kept.entry(start).or_insert(0) += 1;
            }
            watermark = watermark.max(t);
        }
        let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))
            .unwrap();
        let strategy = WatermarkStrategy::for_generator(|| AtEachEvent)
            .with_timestamp_assigner(|e: &(u64, i64), _| e.1);
        let late_tag = OutputTag::<(u64, i64)>::new("late");
        let counts = env
            .from_source(CollectionSource::new(events), strategy, "events")
            .key_by(|_: &(u64, i64)| 0u8)
            .window(TumblingEventTimeWindows::of(Duration::from_millis(20)))
            .allowed_lateness(Duration::from_millis(lateness as u64))
            .side_output_late_data(&late_tag)
            .process(
                |_: &u8,
                 ctx: &WindowContext<'_, TimeWindow>,
                 events: &[(u64, i64)],
                 out: &mut Collector<'_, (i64, u64)>| {
                    out.collect((ctx.window().start, events.len() as u64));
                    Ok(())
                },
            );
        let late_records = counts.side_output(&late_tag).map(|e| e.1).collect();
        let counts = counts.collect();
        let result = env.execute("late").unwrap();
        // A window fires when the watermark passes it and again for each late record it
        // still takes: its last result counts every record it kept.
        for (start, count) in counts.take() {
            last_result.insert(start, count);
        }
        let last: BTreeMap<i64, u64> = last_result.into_iter().collect();
        assert_eq!(last, kept, "seed {seed}, lateness {lateness}");
        let window = result
            .operators
            .iter()
            .find(|o| o.name.starts_with("Window("))
            .unwrap();
        assert_eq!(
            window.late_records_dropped, 0,
            "late records go to the side output"
        );
        assert_eq!(
            late_records.take(),
            late,
            "seed {seed}, lateness {lateness}"
        );
    }
}

#[test]
fn a_window_of_size_zero_is_refused_naming_the_operator() {
    let env =
        StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1)).unwrap();
    env.generate(10, |i| (i, i))
        .key_by(|r: &(u64, u64)| r.0)
        .window(SlidingEventTimeWindows::of(
            Duration::from_secs(1),
            Duration::ZERO,
        ))
        .reduce(|a, _| a)
        .sink_to(DiscardingSink, "out");
    let error = env.execute("zero slide").unwrap_err();
    let text = error.to_string();
    assert!(text.contains("SlidingEventTimeWindows"), "{text}");
    assert!(text.contains("slide must be positive"), "{text}");
}

#[test]
fn event_time_windows_without_watermarks_upstream_are_refused_at_build_time() {
    let env =
        StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1)).unwrap();
    env.generate(10, |i| (i, i))
        .key_by(|r: &(u64, u64)| r.0)
        .window(TumblingEventTimeWindows::of(Duration::from_secs(1)))
        .reduce(|a, _| a)
        .sink_to(DiscardingSink, "out");
    let error = env.plan("no watermarks").unwrap_err();
    let text = error.to_string();
    assert!(text.contains("TumblingEventTimeWindows"), "{text}");
    assert!(text.contains("no watermarks reach it"), "{text}");
}

#[test]
fn records_without_timestamps_fail_an_event_time_window_naming_it() {
    let env =
        StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1)).unwrap();
    // Watermarks, but no timestamp assigner, and a source that gives records none.
    env.from_source(
        GeneratorSource::new(10, |i| (i, i)),
        WatermarkStrategy::for_monotonous_timestamps(),
        "numbers",
    )
    .key_by(|r: &(u64, u64)| r.0)
    .window(TumblingEventTimeWindows::of(Duration::from_secs(1)))
    .reduce(|a, _| a)
    .sink_to(DiscardingSink, "out");
    let error = env.execute("no timestamps").unwrap_err();
    let text = error.to_string();
    assert!(text.contains("TumblingEventTimeWindows"), "{text}");
    assert!(text.contains("no event timestamp"), "{text}");
}
