//! Test harness shared by the checkpointing tests: an exactly-once oracle sink, a seeded
//! random generator, and deterministic keys.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use std::time::{Duration, Instant};

use weir::connectors::sink::{Sink, SinkWriter};
use weir::{
    BoxError, CheckpointConfig, CheckpointStorageConfig, ExecutionConfig, FunctionStateContext,
    ProcessContext, Record, RestartStrategyConfig, RuntimeContext,
};

/// A configuration for failure-injection tests: small batches, in-memory checkpoints every
/// `interval`, and immediate restarts.
pub fn failover_config(parallelism: u32, interval: Duration) -> ExecutionConfig {
    ExecutionConfig::default()
        .with_parallelism(parallelism)
        .with_buffer_size(64)
        .with_buffer_timeout(Duration::from_millis(5))
        .with_checkpointing(
            CheckpointConfig::default()
                .with_interval(interval)
                .with_storage(CheckpointStorageConfig::Memory),
        )
        .with_restart_strategy(RestartStrategyConfig::FixedDelay {
            attempts: 5,
            delay: Duration::ZERO,
        })
}

/// Waits until `done` holds, for `what` happens in the job rather than for a duration; the
/// five-minute limit only guards against a hang.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until the job completed `n` checkpoints since it started. A completed checkpoint
/// also says that the job runs: none starts before every task is deployed, and savepoints
/// are refused until then.
pub fn await_checkpoints(client: &weir::JobClient, n: u64) {
    wait_until(&format!("{n} completed checkpoints"), || {
        client.checkpoint_history().unwrap().completed >= n
    });
}

/// SplitMix64: a deterministic, well-mixed function of `i`.
pub fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A small seeded random number generator.
pub struct Rng(pub u64);

impl Rng {
    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(1);
        mix(self.0) % n
    }
}

/// Seeds to run: `WEIR_SEED=s` replays one, `WEIR_SEEDS=n` runs n, otherwise `default`.
#[allow(unused_imports)] // Not every test file that includes this module uses it.
pub use weir_testkit::seeds;

/// Transactions committed to the "external system": (writer, checkpoint) → records.
/// Committing is idempotent: a transaction already present is not written again.
pub type CommittedStore<T> = Arc<Mutex<BTreeMap<(u32, u64), Vec<T>>>>;

/// A write-ahead-log sink: records of checkpoint n wait in operator state and are committed
/// when n completes (or on restore, when the notification was lost). The committed store is
/// the exactly-once oracle: each record of an uninterrupted run must appear in it once.
#[derive(Clone)]
pub struct CommittingSink<T> {
    pub store: CommittedStore<T>,
}

impl<T> CommittingSink<T> {
    pub fn new() -> (Self, CommittedStore<T>) {
        let store: CommittedStore<T> = Arc::default();
        (
            Self {
                store: store.clone(),
            },
            store,
        )
    }
}

/// Everything committed, in commit-key order.
pub fn committed<T: Clone>(store: &CommittedStore<T>) -> Vec<T> {
    store.lock().unwrap().values().flatten().cloned().collect()
}

pub struct CommittingWriter<T> {
    store: CommittedStore<T>,
    checkpointing: bool,
    /// Unique id of this writer instance, so transactions of different runs never collide.
    writer_id: u32,
    current: Vec<T>,
    /// (writer id, checkpoint id, records) awaiting commit.
    pending: Vec<(u32, u64, Vec<T>)>,
}

static NEXT_WRITER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

impl<T: Record> CommittingWriter<T> {
    fn commit(&mut self, up_to: u64) {
        let mut store = self.store.lock().unwrap();
        self.pending.retain(|(writer, checkpoint, records)| {
            if *checkpoint <= up_to {
                store
                    .entry((*writer, *checkpoint))
                    .or_insert_with(|| records.clone());
                false
            } else {
                true
            }
        });
    }
}

impl<T: Record> Sink<T> for CommittingSink<T> {
    type Writer = CommittingWriter<T>;
    fn create_writer(&self, context: &RuntimeContext) -> Result<CommittingWriter<T>, BoxError> {
        Ok(CommittingWriter {
            store: self.store.clone(),
            checkpointing: context.is_checkpointing(),
            writer_id: NEXT_WRITER.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
            current: Vec::new(),
            pending: Vec::new(),
        })
    }
}

impl<T: Record> SinkWriter<T> for CommittingWriter<T> {
    fn write(&mut self, record: T) -> Result<(), BoxError> {
        self.current.push(record);
        Ok(())
    }
    fn flush(&mut self, end_of_input: bool) -> Result<(), BoxError> {
        // With checkpoints, the final checkpoint commits the last records.
        if end_of_input && !self.checkpointing {
            let records = std::mem::take(&mut self.current);
            self.pending.push((self.writer_id, u64::MAX, records));
            self.commit(u64::MAX);
        }
        Ok(())
    }
    fn initialize_state(&mut self, ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
        // Everything in a restored checkpoint was pre-committed in a completed checkpoint:
        // commit it now (idempotently), covering notifications lost in the crash.
        self.pending = ctx.operator_state().get_list("pending")?;
        self.commit(u64::MAX);
        Ok(())
    }
    fn snapshot_state(&mut self, ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
        let id = ctx
            .checkpoint_id()
            .ok_or("snapshot without checkpoint id")?;
        let records = std::mem::take(&mut self.current);
        self.pending.push((self.writer_id, id, records));
        ctx.operator_state().update_list("pending", &self.pending)?;
        Ok(())
    }
    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), BoxError> {
        self.commit(checkpoint_id);
        Ok(())
    }
}

/// Counts of each distinct element.
pub fn multiset<T: std::hash::Hash + Eq + Clone>(items: &[T]) -> HashMap<T, usize> {
    let mut m = HashMap::new();
    for i in items {
        *m.entry(i.clone()).or_insert(0) += 1;
    }
    m
}

/// Describes how `got` differs from `expected` (counts of missing and extra elements, and a
/// few examples), or `None` when they are equal.
pub fn diff<T: std::hash::Hash + Eq + Clone + std::fmt::Debug>(
    expected: &HashMap<T, usize>,
    got: &HashMap<T, usize>,
) -> Option<String> {
    let mut missing = Vec::new();
    let mut extra = Vec::new();
    for (k, n) in expected {
        let g = got.get(k).copied().unwrap_or(0);
        if g < *n {
            missing.push((k.clone(), n - g));
        }
    }
    for (k, n) in got {
        let e = expected.get(k).copied().unwrap_or(0);
        if *n > e {
            extra.push((k.clone(), n - e));
        }
    }
    if missing.is_empty() && extra.is_empty() {
        return None;
    }
    let m: usize = missing.iter().map(|x| x.1).sum();
    let x: usize = extra.iter().map(|x| x.1).sum();
    missing.truncate(5);
    extra.truncate(5);
    Some(format!(
        "{m} missing (e.g. {missing:?}), {x} extra (e.g. {extra:?})"
    ))
}

/// Every line of the committed files in a file sink's output directory.
pub fn committed_lines(dir: &std::path::Path) -> Vec<String> {
    weir::connectors::file_sink::committed_files(dir)
        .unwrap()
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Files whose names start with a dot: in-progress or pending parts, temporary batches.
pub fn hidden_files(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with('.'))
        .collect()
}

/// Passes numbers on as text; at the end of its input emits `end-input-<subtask>` and
/// counts the call.
#[derive(Clone, Default)]
pub struct MarkEnd {
    /// How many times `end_input` ran, over every subtask.
    pub end_inputs: Arc<std::sync::atomic::AtomicUsize>,
}

impl weir::ProcessFunction<u64, String> for MarkEnd {
    fn process_element(
        &mut self,
        value: u64,
        _ctx: &mut ProcessContext<'_>,
        out: &mut weir::Collector<'_, String>,
    ) -> Result<(), BoxError> {
        out.collect(value.to_string());
        Ok(())
    }

    fn end_input(
        &mut self,
        ctx: &RuntimeContext,
        out: &mut weir::Collector<'_, String>,
    ) -> Result<(), BoxError> {
        self.end_inputs
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        out.collect(format!("end-input-{}", ctx.subtask_index()));
        Ok(())
    }
}

/// A keyed count through a KeyedProcessFunction with value state.
#[derive(Clone, Default)]
pub struct CountPerKey {
    count: Option<weir::ValueState<u64>>,
}

impl weir::KeyedProcessFunction<u64, u64, (u64, u64)> for CountPerKey {
    fn open(&mut self, _ctx: &weir::RuntimeContext) -> Result<(), weir::BoxError> {
        self.count = Some(weir::ValueState::new("count"));
        Ok(())
    }
    fn process_element(
        &mut self,
        _value: u64,
        ctx: &mut weir::KeyedContext<'_, u64>,
        out: &mut weir::Collector<'_, (u64, u64)>,
    ) -> Result<(), weir::BoxError> {
        let state = self.count.as_ref().ok_or("not opened")?;
        let n = state.value(ctx)?.unwrap_or(0) + 1;
        state.update(ctx, n)?;
        out.collect((*ctx.current_key(), n));
        Ok(())
    }
}

/// Every rolling-count update of an uninterrupted run over records `0..records` keyed by
/// `key_of`: (key, n) for n = 1..=count(key).
pub fn rolling_counts(records: u64, key_of: impl Fn(u64) -> u64) -> Vec<(u64, u64)> {
    let mut counts: HashMap<u64, u64> = HashMap::new();
    (0..records)
        .map(|i| {
            let c = counts.entry(key_of(i)).or_insert(0);
            *c += 1;
            (key_of(i), *c)
        })
        .collect()
}
