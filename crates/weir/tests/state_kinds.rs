//! Keyed state of every kind (value, list, map, reducing, aggregating) and operator list
//! state (even-split and union) survive failures and rescaling exactly.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir::WatermarkStrategy;

use common::{committed, diff, failover_config, mix, multiset, CommittingSink};
use weir::connectors::generator::GeneratorSource;
use weir::{
    AggregateFunction, AggregatingState, BoxError, CheckpointConfig, CheckpointStorageConfig,
    Collector, ExecutionConfig, FunctionStateContext, KeyedContext, KeyedProcessFunction,
    ListState, MapState, ProcessContext, ProcessFunction, ReducingState,
    StreamExecutionEnvironment,
};

const RECORDS: u64 = 15_000;

fn key_of(i: u64) -> u64 {
    mix(i) % 31
}

#[derive(Clone, Copy)]
struct Average;

impl AggregateFunction<u64, (u64, u64), u64> for Average {
    fn create_accumulator(&self) -> (u64, u64) {
        (0, 0)
    }
    fn add(&self, value: u64, acc: &mut (u64, u64)) {
        acc.0 += value;
        acc.1 += 1;
    }
    fn get_result(&self, acc: &(u64, u64)) -> u64 {
        acc.0 / acc.1.max(1)
    }
    fn merge(&self, a: (u64, u64), b: (u64, u64)) -> (u64, u64) {
        (a.0 + b.0, a.1 + b.1)
    }
}

fn max(a: u64, b: u64) -> u64 {
    a.max(b)
}

/// Per record: (key, sum of the last 3 values, count of this value's bucket, max, average).
#[derive(Clone)]
struct AllKinds {
    recent: ListState<u64>,
    buckets: MapState<u64, u64>,
    max: ReducingState<u64, fn(u64, u64) -> u64>,
    average: AggregatingState<u64, (u64, u64), u64, Average>,
}

impl AllKinds {
    fn new() -> Self {
        Self {
            recent: ListState::new("recent"),
            buckets: MapState::new("buckets"),
            max: ReducingState::new("max", max as fn(u64, u64) -> u64),
            average: AggregatingState::new("average", Average),
        }
    }
}

type Summary = (u64, u64, u64, u64, u64);

impl KeyedProcessFunction<u64, u64, Summary> for AllKinds {
    fn process_element(
        &mut self,
        v: u64,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<'_, Summary>,
    ) -> Result<(), BoxError> {
        let mut recent = self.recent.get(ctx)?;
        recent.push(v);
        if recent.len() > 3 {
            recent.remove(0);
        }
        self.recent.update(ctx, recent.clone())?;
        let bucket = v % 5;
        let n = self.buckets.get(ctx, &bucket)?.unwrap_or(0) + 1;
        self.buckets.put(ctx, bucket, n)?;
        self.max.add(ctx, v)?;
        self.average.add(ctx, v)?;
        out.collect((
            *ctx.current_key(),
            recent.iter().sum(),
            n,
            self.max.get(ctx)?.unwrap_or(0),
            self.average.get(ctx)?.unwrap_or(0),
        ));
        Ok(())
    }
}

fn expected() -> HashMap<Summary, usize> {
    let mut recent: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut buckets: HashMap<(u64, u64), u64> = HashMap::new();
    let mut maxima: HashMap<u64, u64> = HashMap::new();
    let mut sums: HashMap<u64, (u64, u64)> = HashMap::new();
    let out: Vec<Summary> = (0..RECORDS)
        .map(|v| {
            let k = key_of(v);
            let r = recent.entry(k).or_default();
            r.push(v);
            if r.len() > 3 {
                r.remove(0);
            }
            let b = buckets.entry((k, v % 5)).or_insert(0);
            *b += 1;
            let m = maxima.entry(k).or_insert(0);
            *m = (*m).max(v);
            let s = sums.entry(k).or_insert((0, 0));
            s.0 += v;
            s.1 += 1;
            (k, r.iter().sum(), *b, *m, s.0 / s.1)
        })
        .collect();
    multiset(&out)
}

#[test]
fn every_keyed_state_kind_is_restored_exactly_after_failures() {
    let config = failover_config(2, Duration::from_millis(30));
    let env = StreamExecutionEnvironment::new(config).unwrap();
    let (sink, store) = CommittingSink::new();
    let failures = Arc::new([
        (4_000u64, AtomicBool::new(false)),
        (11_000, AtomicBool::new(false)),
    ]);
    // One source subtask keeps each key's records in order, so the expected output is exact.
    env.from_source(
        GeneratorSource::new(RECORDS, |i| i).with_rate_limit(30_000.0),
        WatermarkStrategy::no_watermarks(),
        "numbers",
    )
    .parallelism(1)
    .map(move |i: u64| {
        for (at, done) in failures.iter() {
            if i == *at && !done.swap(true, Ordering::SeqCst) {
                panic!("injected failure at {i}");
            }
        }
        i
    })
    .parallelism(1)
    .key_by(|i: &u64| key_of(*i))
    .process(AllKinds::new())
    .sink_to(sink, "committed");
    let result = env.execute("state kinds").unwrap();
    assert_eq!(result.restarts, 2);
    if let Some(d) = diff(&expected(), &multiset(&committed(&store))) {
        panic!("{d}");
    }
}

type Observed = Arc<Mutex<Vec<(u32, Vec<u32>, u64)>>>;

/// Counts its records in even-split list state and names its subtask in union list state;
/// on restore, reports what it received.
#[derive(Clone)]
struct OperatorStateUser {
    subtask: u32,
    seen: u64,
    observed: Observed,
    /// Records processed, over every subtask.
    processed: Arc<AtomicU64>,
}

impl ProcessFunction<u64, u64> for OperatorStateUser {
    fn initialize_state(&mut self, ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
        self.subtask = ctx.runtime().subtask_index();
        if ctx.is_restored() {
            let mut owners: Vec<u32> = ctx.operator_state().get_union_list("owners")?;
            owners.sort_unstable();
            let counts: Vec<u64> = ctx.operator_state().get_list("seen")?;
            self.observed
                .lock()
                .unwrap()
                .push((self.subtask, owners, counts.iter().sum()));
            self.seen = 0;
        }
        Ok(())
    }
    fn process_element(
        &mut self,
        v: u64,
        _: &mut ProcessContext<'_>,
        out: &mut Collector<'_, u64>,
    ) -> Result<(), BoxError> {
        self.seen += 1;
        self.processed.fetch_add(1, Ordering::SeqCst);
        out.collect(v);
        Ok(())
    }
    fn snapshot_state(&mut self, ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
        ctx.operator_state()
            .update_union_list("owners", &[self.subtask])?;
        ctx.operator_state().update_list("seen", &[self.seen])?;
        Ok(())
    }
}

#[test]
fn operator_list_state_is_split_and_union_state_is_broadcast_on_rescale() {
    let dir = tempfile::tempdir().unwrap();
    let config = |parallelism: u32| {
        ExecutionConfig::default()
            .with_parallelism(parallelism)
            .with_checkpointing(
                CheckpointConfig::default()
                    .with_interval(Duration::from_millis(50))
                    .with_storage(CheckpointStorageConfig::FileSystem(
                        dir.path().to_path_buf(),
                    )),
            )
    };
    let observed: Observed = Arc::default();
    // The last 45 000 numbers of each of the two splits are withheld for good: neither run
    // can end before the test is done with it.
    let build = |env: &StreamExecutionEnvironment, processed: &Arc<AtomicU64>| {
        env.from_source(
            GeneratorSource::new(100_000, |i| i).with_held_tail(45_000, || false),
            WatermarkStrategy::no_watermarks(),
            "numbers",
        )
        .uid("numbers")
        .rebalance()
        .process(OperatorStateUser {
            subtask: 0,
            seen: 0,
            observed: observed.clone(),
            processed: processed.clone(),
        })
        .uid("user");
    };
    let env = StreamExecutionEnvironment::new(config(2)).unwrap();
    let processed = Arc::new(AtomicU64::new(0));
    build(&env, &processed);
    let client = env.execute_async("operator state").unwrap();
    // Stopped once the subtasks counted all the records they can get and the job runs (a
    // checkpoint completed).
    common::wait_until("the records not withheld", || {
        processed.load(Ordering::SeqCst) >= 10_000
    });
    common::await_checkpoints(&client, 1);
    let (savepoint, first) = client.stop_with_savepoint().unwrap();
    let processed_before = first.operator("Process").unwrap().records_in;
    assert_eq!(processed_before, 10_000);
    let env = StreamExecutionEnvironment::new(config(3).with_restore(&savepoint)).unwrap();
    build(&env, &Arc::default());
    let client = env.execute_async("operator state").unwrap();
    // Cancelled once all three subtasks restored their state.
    common::wait_until("three restored subtasks", || {
        observed.lock().unwrap().len() >= 3
    });
    client.cancel().unwrap();
    let observed = observed.lock().unwrap().clone();
    assert_eq!(observed.len(), 3, "{observed:?}");
    for (_, owners, _) in &observed {
        assert_eq!(owners, &vec![0, 1], "union state reaches every subtask");
    }
    let total: u64 = observed.iter().map(|o| o.2).sum();
    assert!(
        total > 0 && total <= processed_before,
        "split counts {total} vs {processed_before} processed"
    );
}

/// What each restored subtask found of the blobs: its index and, per blob, the old subtask
/// that wrote it and whether its bytes are intact.
type Blobs = Arc<Mutex<Vec<(u32, Vec<(u32, bool)>)>>>;

/// Keeps one 40 KB blob per subtask in modulo-subtask list state.
#[derive(Clone)]
struct BlobKeeper {
    subtask: u32,
    found: Blobs,
}

fn blob(subtask: u32) -> Vec<u8> {
    (0..40_000u32).map(|i| (i ^ subtask) as u8).collect()
}

impl ProcessFunction<u64, u64> for BlobKeeper {
    fn initialize_state(&mut self, ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
        self.subtask = ctx.runtime().subtask_index();
        if ctx.is_restored() {
            let blobs: Vec<(u32, Vec<u8>)> =
                ctx.operator_state().get_modulo_subtask_list("blobs")?;
            let seen = blobs.iter().map(|(s, b)| (*s, *b == blob(*s))).collect();
            self.found.lock().unwrap().push((self.subtask, seen));
        }
        Ok(())
    }
    fn process_element(
        &mut self,
        v: u64,
        _: &mut ProcessContext<'_>,
        out: &mut Collector<'_, u64>,
    ) -> Result<(), BoxError> {
        out.collect(v);
        Ok(())
    }
    fn snapshot_state(&mut self, ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
        ctx.operator_state()
            .update_modulo_subtask_list("blobs", &[(self.subtask, blob(self.subtask))])?;
        Ok(())
    }
}

#[test]
fn large_operator_state_goes_to_a_state_file_and_old_subtask_s_to_new_subtask_s_mod_p() {
    let dir = tempfile::tempdir().unwrap();
    let config = |parallelism: u32| {
        ExecutionConfig::default()
            .with_parallelism(parallelism)
            .with_checkpointing(
                CheckpointConfig::default()
                    // Periodic checkpoints say when the job runs (see below).
                    .with_interval(Duration::from_millis(50))
                    .with_storage(CheckpointStorageConfig::FileSystem(
                        dir.path().to_path_buf(),
                    )),
            )
    };
    let found: Blobs = Arc::default();
    let build = |env: &StreamExecutionEnvironment| {
        env.from_source(
            GeneratorSource::unbounded(|i| i).with_rate_limit(10_000.0),
            WatermarkStrategy::no_watermarks(),
            "numbers",
        )
        .uid("numbers")
        .rebalance()
        .process(BlobKeeper {
            subtask: 0,
            found: found.clone(),
        })
        .uid("blobs");
    };
    let env = StreamExecutionEnvironment::new(config(3)).unwrap();
    build(&env);
    let client = env.execute_async("blobs").unwrap();
    // Savepoints are refused while the tasks are being deployed: stopped once one completed.
    common::await_checkpoints(&client, 1);
    let (savepoint, _) = client.stop_with_savepoint().unwrap();

    // 40 KB per subtask is above the 20 KiB threshold: the metadata holds references only.
    let metadata_file = savepoint.path().join("_metadata");
    let metadata_bytes = std::fs::metadata(&metadata_file).unwrap().len();
    assert!(
        metadata_bytes < 20_000,
        "the metadata holds the blobs: {metadata_bytes} bytes"
    );
    let metadata = weir::checkpoint::metadata::CheckpointMetadata::decode(
        &std::fs::read(&metadata_file).unwrap(),
    )
    .unwrap();
    let op = metadata.operator("blobs").unwrap();
    for subtask in &op.subtasks {
        assert!(subtask.lists[0]
            .items
            .iter()
            .all(|i| matches!(i, weir::checkpoint::metadata::ListItem::Stored(_))));
    }

    let env = StreamExecutionEnvironment::new(config(2).with_restore(&savepoint)).unwrap();
    build(&env);
    let client = env.execute_async("blobs").unwrap();
    // Cancelled once both subtasks restored their state.
    common::wait_until("two restored subtasks", || found.lock().unwrap().len() >= 2);
    client.cancel().unwrap();
    let mut found = found.lock().unwrap().clone();
    found.sort();
    assert_eq!(
        found,
        vec![(0, vec![(0, true), (2, true)]), (1, vec![(1, true)])],
        "old subtask s went to new subtask s mod 2, intact"
    );

    // A damaged state file is caught by its checksum: the restore fails, naming it.
    let state_file = std::fs::read_dir(savepoint.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".operator"))
        .expect("an operator state file");
    let mut bytes = std::fs::read(&state_file).unwrap();
    bytes[100] ^= 0xff;
    std::fs::write(&state_file, bytes).unwrap();
    let env = StreamExecutionEnvironment::new(config(2).with_restore(&savepoint)).unwrap();
    build(&env);
    let err = env.execute("blobs").unwrap_err().to_string();
    let name = state_file
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(err.contains(&name) && err.contains("checksum"), "{err}");
}
