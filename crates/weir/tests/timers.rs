//! Timers of keyed process functions: event-time timers fire in order as the watermark
//! passes them, processing-time timers fire on the task thread between records, and timers
//! are keyed state — snapshotted per key group and redistributed when a job is rescaled.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{committed, multiset, CommittedStore, CommittingSink};
use weir::prelude::*;
use weir::time::TimeDomain;

/// A watermark at each event's timestamp.
struct EveryEvent;

impl WatermarkGenerator for EveryEvent {
    fn on_event(&mut self, timestamp: i64, output: &mut WatermarkOutput) {
        output.emit_watermark(Watermark::new(timestamp));
    }
}

/// For each `(key, t)`, sets a timer at `t + 10` (twice, to show it fires once) and emits
/// `(key, timer, watermark when fired, domain)` when it fires.
#[derive(Clone)]
struct TenLater;

impl KeyedProcessFunction<String, (String, i64), (String, i64, i64, String)> for TenLater {
    fn process_element(
        &mut self,
        (_, t): (String, i64),
        ctx: &mut KeyedContext<'_, String>,
        _out: &mut Collector<'_, (String, i64, i64, String)>,
    ) -> Result<(), BoxError> {
        assert_eq!(ctx.timestamp(), Some(t), "the record's event timestamp");
        assert_eq!(ctx.time_domain(), None);
        ctx.timer_service().register_event_time_timer(t + 10)?;
        ctx.timer_service().register_event_time_timer(t + 10)?;
        Ok(())
    }

    fn on_timer(
        &mut self,
        timestamp: i64,
        ctx: &mut KeyedContext<'_, String>,
        out: &mut Collector<'_, (String, i64, i64, String)>,
    ) -> Result<(), BoxError> {
        assert_eq!(ctx.timestamp(), Some(timestamp));
        let watermark = ctx.timer_service().current_watermark();
        out.collect((
            ctx.current_key().clone(),
            timestamp,
            watermark,
            format!("{:?}", ctx.time_domain().unwrap()),
        ));
        Ok(())
    }
}

#[test]
fn event_time_timers_fire_in_order_once_when_the_watermark_passes_them() {
    let env =
        StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1)).unwrap();
    let events: Vec<(String, i64)> = vec![
        ("a".into(), 0),
        ("b".into(), 5),
        ("a".into(), 12),
        ("a".into(), 13),
        ("b".into(), 40),
        ("c".into(), 41),
    ];
    let strategy = WatermarkStrategy::for_generator(|| EveryEvent)
        .with_timestamp_assigner(|e: &(String, i64), _| e.1);
    let fired = env
        .from_source(CollectionSource::new(events), strategy, "events")
        .key_by(|e: &(String, i64)| e.0.clone())
        .process(TenLater)
        .collect();
    env.execute("timers").unwrap();
    let at = |k: &str, t: i64, w: i64| (k.to_string(), t, w, "EventTime".to_string());
    assert_eq!(
        fired.take(),
        vec![
            // The watermark 12 passes a@10; 40 passes b@15, a@22 and a@23, in time order.
            at("a", 10, 12),
            at("b", 15, 40),
            at("a", 22, 40),
            at("a", 23, 40),
            // The end of the input ends event time: the rest fire.
            at("b", 50, i64::MAX),
            at("c", 51, i64::MAX),
        ]
    );
}

/// A reminder that fired: key, how late, whether in processing time, whether on the thread
/// that processes the subtask's records, and how many records had been processed then.
type Reminder = (u64, i64, bool, bool, u64);

/// Sets a processing-time timer 20 ms ahead at the first record of each key, and reports the
/// firing to `fired`.
#[derive(Clone)]
struct Remind {
    seen: ValueState<bool>,
    fired: Arc<Mutex<Vec<Reminder>>>,
    /// Records processed, over every subtask.
    processed: Arc<AtomicU64>,
    /// The thread this subtask processes its records on.
    thread: Option<std::thread::ThreadId>,
}

impl KeyedProcessFunction<u64, u64, u64> for Remind {
    fn process_element(
        &mut self,
        _value: u64,
        ctx: &mut KeyedContext<'_, u64>,
        _out: &mut Collector<'_, u64>,
    ) -> Result<(), BoxError> {
        self.thread = Some(std::thread::current().id());
        if self.seen.value(ctx)?.is_none() {
            self.seen.update(ctx, true)?;
            let now = ctx.timer_service().current_processing_time();
            ctx.timer_service()
                .register_processing_time_timer(now + 20)?;
        }
        self.processed.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn on_timer(
        &mut self,
        timestamp: i64,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<'_, u64>,
    ) -> Result<(), BoxError> {
        let now = ctx.timer_service().current_processing_time();
        let processing = ctx.time_domain() == Some(TimeDomain::ProcessingTime);
        let task_thread = self.thread == Some(std::thread::current().id());
        self.fired.lock().unwrap().push((
            *ctx.current_key(),
            now - timestamp,
            processing,
            task_thread,
            self.processed.load(Ordering::SeqCst),
        ));
        out.collect(*ctx.current_key());
        Ok(())
    }
}

#[test]
fn processing_time_timers_fire_on_the_task_thread_while_records_flow() {
    let env =
        StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2)).unwrap();
    let fired = Arc::new(Mutex::new(Vec::new()));
    let processed = Arc::new(AtomicU64::new(0));
    env.from_source(
        GeneratorSource::unbounded(|i| i).with_rate_limit(2_000.0),
        WatermarkStrategy::no_watermarks(),
        "ticks",
    )
    .key_by(|i: &u64| i % 3)
    .process(Remind {
        seen: ValueState::new("seen"),
        fired: fired.clone(),
        processed: processed.clone(),
        thread: None,
    })
    .sink_to(DiscardingSink, "out");
    let client = env.execute_async("reminders").unwrap();
    // Cancelled once every key's timer fired and records were processed after the last one.
    common::wait_until("three timers, then more records", || {
        let fired = fired.lock().unwrap();
        let last = fired.iter().map(|f| f.4).max();
        fired.len() >= 3 && last < Some(processed.load(Ordering::SeqCst))
    });
    client.cancel().unwrap();
    let mut fired = fired.lock().unwrap().clone();
    fired.sort();
    let keys: Vec<u64> = fired.iter().map(|f| f.0).collect();
    assert_eq!(keys, vec![0, 1, 2], "one timer per key: {fired:?}");
    let processed = processed.load(Ordering::SeqCst);
    for (key, late, processing, task_thread, processed_before) in fired {
        assert!(processing, "key {key}: a processing-time timer");
        assert!(late >= 0, "key {key} fired {late} ms early");
        assert!(
            task_thread,
            "key {key}: fired on another thread than the records"
        );
        assert!(
            processed_before < processed,
            "key {key}: fired after the last record"
        );
    }
}

const RECORDS: u64 = 24_000;

/// Sets an event-time timer at `i % 7` for key `i % 50`; emits `(key, timer)` when it fires.
/// Counts the records it processed.
#[derive(Clone)]
struct SevenTimers {
    processed: Arc<AtomicU64>,
}

impl KeyedProcessFunction<u64, u64, (u64, i64)> for SevenTimers {
    fn process_element(
        &mut self,
        i: u64,
        ctx: &mut KeyedContext<'_, u64>,
        _out: &mut Collector<'_, (u64, i64)>,
    ) -> Result<(), BoxError> {
        ctx.timer_service()
            .register_event_time_timer((i % 7) as i64)?;
        self.processed.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn on_timer(
        &mut self,
        timestamp: i64,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<'_, (u64, i64)>,
    ) -> Result<(), BoxError> {
        out.collect((*ctx.current_key(), timestamp));
        Ok(())
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

/// Numbers without watermarks (timers wait for the end of the input) → timers → sink; the
/// last `held` numbers of each split withheld for good (none with 0).
fn build(
    env: &StreamExecutionEnvironment,
    store: &CommittedStore<(u64, i64)>,
    held: u64,
    processed: &Arc<AtomicU64>,
) {
    let mut numbers = GeneratorSource::new(RECORDS, (|i| i) as fn(u64) -> u64);
    if held > 0 {
        numbers = numbers.with_held_tail(held, || false);
    }
    env.from_source(numbers, WatermarkStrategy::no_watermarks(), "numbers")
        .uid("numbers")
        .key_by(|i: &u64| i % 50)
        .process(SevenTimers {
            processed: processed.clone(),
        })
        .uid("timers")
        .sink_to(
            CommittingSink {
                store: store.clone(),
            },
            "committed",
        )
        .uid("sink");
}

/// Runs the job with the last `held` numbers of each of the two splits withheld, so that it
/// cannot end; once it processed the `reach` numbers it can and completed a checkpoint, stops
/// it with a savepoint.
fn run_until_stopped(
    parallelism: u32,
    dir: &std::path::Path,
    restore: Option<&Savepoint>,
    store: &CommittedStore<(u64, i64)>,
    (held, reach): (u64, u64),
) -> Savepoint {
    let env = StreamExecutionEnvironment::new(savepoint_config(parallelism, dir, restore)).unwrap();
    let processed = Arc::new(AtomicU64::new(0));
    build(&env, store, held, &processed);
    let client = env.execute_async("timers").unwrap();
    common::wait_until(&format!("{reach} numbers processed"), || {
        processed.load(Ordering::SeqCst) >= reach
    });
    common::await_checkpoints(&client, 1);
    let (savepoint, result) = client.stop_with_savepoint().unwrap();
    assert_eq!(result.status, JobStatus::Stopped);
    assert_eq!(
        processed.load(Ordering::SeqCst),
        reach,
        "held numbers were read"
    );
    savepoint
}

#[test]
fn timers_are_redistributed_with_their_keys_when_a_job_is_rescaled() {
    let dir = tempfile::tempdir().unwrap();
    let (_, store) = CommittingSink::<(u64, i64)>::new();
    // Two splits of 12 000: the first run reads 4 000 of each, the second 4 000 more.
    let first = run_until_stopped(2, dir.path(), None, &store, (8_000, 8_000));
    assert!(
        committed(&store).is_empty(),
        "no timer fires before the end"
    );
    let second = run_until_stopped(3, dir.path(), Some(&first), &store, (4_000, 8_000));
    let env =
        StreamExecutionEnvironment::new(savepoint_config(1, dir.path(), Some(&second))).unwrap();
    build(&env, &store, 0, &Arc::default());
    env.execute("timers").unwrap();
    let expected: BTreeSet<(u64, i64)> = (0..RECORDS).map(|i| (i % 50, (i % 7) as i64)).collect();
    let got = multiset(&committed(&store));
    let want: HashMap<(u64, i64), usize> = expected.into_iter().map(|t| (t, 1)).collect();
    assert_eq!(got, want, "every (key, timestamp) timer fires exactly once");
}
