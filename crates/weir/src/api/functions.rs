//! User function interfaces beyond plain closures, and the contexts they receive.

use std::sync::Arc;

use crate::checkpoint::fencing::FencingToken;
use crate::config::ExecutionConfig;
use crate::error::BoxError;
use crate::record::Key;
use crate::runtime::output::Collector;
use crate::state::heap_keyed_state_backend::{HeapKeyedStateBackend, KeyGroupSlot};
use crate::state::operator_state::OperatorStateBackend;
use crate::state::state_handles::KeyedState;

/// What a function sees when it initializes or snapshots its operator state (Flink's
/// `FunctionInitializationContext` / `FunctionSnapshotContext`).
///
/// ```
/// use weir::prelude::*;
///
/// /// Numbers its records per subtask, continuing after a restore (operator list state).
/// #[derive(Clone, Default)]
/// struct Sequence {
///     next: u64,
/// }
///
/// impl ProcessFunction<String, (u64, String)> for Sequence {
///     fn initialize_state(&mut self, ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
///         if ctx.is_restored() {
///             self.next = ctx.operator_state().get_list::<u64>("next")?.into_iter().max().unwrap_or(0);
///         }
///         Ok(())
///     }
///     fn snapshot_state(&mut self, ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
///         Ok(ctx.operator_state().update_list("next", &[self.next])?)
///     }
///     fn process_element(
///         &mut self,
///         value: String,
///         _ctx: &RuntimeContext,
///         out: &mut Collector<'_, (u64, String)>,
///     ) -> Result<(), BoxError> {
///         out.collect((self.next, value));
///         self.next += 1;
///         Ok(())
///     }
/// }
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// let numbered = env.from_collection(vec!["a".to_string(), "b".to_string()]).process(Sequence::default()).collect();
/// env.execute("sequence")?;
/// assert_eq!(numbered.take(), vec![(0, "a".to_string()), (1, "b".to_string())]);
/// # Ok::<(), WeirError>(())
/// ```
pub struct FunctionStateContext<'a> {
    pub(crate) operator_state: &'a mut OperatorStateBackend,
    pub(crate) checkpoint_id: Option<u64>,
    pub(crate) runtime: &'a RuntimeContext,
}

impl FunctionStateContext<'_> {
    /// The operator's list states: read them in `initialize_state`, replace them in
    /// `snapshot_state`.
    pub fn operator_state(&mut self) -> &mut OperatorStateBackend {
        self.operator_state
    }
    /// Whether the operator starts from a checkpoint or savepoint.
    pub fn is_restored(&self) -> bool {
        self.operator_state.is_restored()
    }
    /// The checkpoint being taken (in `snapshot_state`).
    pub fn checkpoint_id(&self) -> Option<u64> {
        self.checkpoint_id
    }
    /// The subtask.
    pub fn runtime(&self) -> &RuntimeContext {
        self.runtime
    }
}

/// What a function knows of the subtask it runs in (Flink's `RuntimeContext`).
///
/// ```
/// use weir::prelude::*;
///
/// /// Emits, once per subtask, which subtask of how many it is.
/// #[derive(Clone)]
/// struct WhoAmI;
///
/// impl ProcessFunction<u64, String> for WhoAmI {
///     fn process_element(&mut self, _: u64, _: &RuntimeContext, _: &mut Collector<'_, String>) -> Result<(), BoxError> {
///         Ok(())
///     }
///     fn end_input(&mut self, ctx: &RuntimeContext, out: &mut Collector<'_, String>) -> Result<(), BoxError> {
///         out.collect(format!("{} {}/{}", ctx.operator_name(), ctx.subtask_index() + 1, ctx.parallelism()));
///         Ok(())
///     }
/// }
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))?;
/// let names = env.generate(4, |i| i).process(WhoAmI).name("who").collect();
/// env.execute("who am i")?;
/// let mut names = names.take();
/// names.sort();
/// assert_eq!(names, vec!["who 1/2", "who 2/2"]);
/// # Ok::<(), WeirError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeContext {
    pub(crate) operator_name: String,
    pub(crate) operator_uid: String,
    pub(crate) subtask_index: u32,
    pub(crate) parallelism: u32,
    pub(crate) max_parallelism: u32,
    pub(crate) checkpointing: bool,
    pub(crate) config: Arc<ExecutionConfig>,
    pub(crate) fencing: FencingToken,
    pub(crate) restored_from: Option<u64>,
}

impl RuntimeContext {
    pub(crate) fn of(setup: &crate::runtime::task::OperatorSetup) -> Self {
        Self {
            operator_name: setup.name.to_string(),
            operator_uid: setup.uid.to_string(),
            subtask_index: setup.subtask,
            parallelism: setup.parallelism,
            max_parallelism: setup.max_parallelism,
            checkpointing: setup.config.checkpoint.interval.is_some(),
            config: Arc::new(setup.config.clone()),
            fencing: setup.fencing.clone(),
            restored_from: setup.restored_from,
        }
    }
    /// The operator's name.
    pub fn operator_name(&self) -> &str {
        &self.operator_name
    }
    /// The operator's uid (set with `uid()`, or derived from its place in the graph): stable
    /// across restarts, so external resources such as transactional ids can be named by it.
    pub fn operator_uid(&self) -> &str {
        &self.operator_uid
    }
    /// The job's configuration (checkpointing, restart strategy…).
    pub fn execution_config(&self) -> &ExecutionConfig {
        &self.config
    }
    /// Zero-based index of this subtask.
    pub fn subtask_index(&self) -> u32 {
        self.subtask_index
    }
    /// Number of parallel subtasks of the operator.
    pub fn parallelism(&self) -> u32 {
        self.parallelism
    }
    /// Number of key groups.
    pub fn max_parallelism(&self) -> u32 {
        self.max_parallelism
    }
    /// The fencing token of the process running the job: its epoch, which sinks put into
    /// the names of their transactions, and [`FencingToken::check`], which a sink calls right
    /// before every commit so that a process that lost its job (it stalled while another one
    /// took over) commits nothing more.
    pub fn fencing_token(&self) -> &FencingToken {
        &self.fencing
    }
    /// The checkpoint or savepoint this run of the job was restored from; `None` when it
    /// started from empty state (Flink's `isRestored()`).
    pub fn restored_checkpoint_id(&self) -> Option<u64> {
        self.restored_from
    }
    /// Whether the job takes periodic checkpoints. Transactional sinks then commit only when
    /// a checkpoint completes — the job ends with a final checkpoint — and never at the end of
    /// input.
    pub fn is_checkpointing(&self) -> bool {
        self.checkpointing
    }
}

/// The context of one keyed record: its key, its key group, and the keyed state scoped to
/// that key (see [`crate::ValueState`]).
///
/// ```
/// use weir::prelude::*;
///
/// /// Emits each key with the key group its state lives in.
/// #[derive(Clone)]
/// struct Where;
///
/// impl KeyedProcessFunction<String, String, (String, u32)> for Where {
///     fn process_element(
///         &mut self,
///         _value: String,
///         ctx: &mut KeyedContext<'_, String>,
///         out: &mut Collector<'_, (String, u32)>,
///     ) -> Result<(), BoxError> {
///         out.collect((ctx.current_key().clone(), ctx.key_group()));
///         Ok(())
///     }
/// }
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_max_parallelism(16))?;
/// let groups = env
///     .from_collection(vec!["a".to_string(), "a".to_string()])
///     .key_by(|k: &String| k.clone())
///     .process(Where)
///     .collect();
/// env.execute("key groups")?;
/// let groups = groups.take();
/// assert_eq!(groups.len(), 2);
/// assert_eq!(groups[0], groups[1]);
/// assert!(groups[0].1 < 16);
/// # Ok::<(), WeirError>(())
/// ```
pub struct KeyedContext<'a, K> {
    pub(crate) key: &'a K,
    pub(crate) slot: KeyGroupSlot,
    pub(crate) backend: &'a mut HeapKeyedStateBackend<K>,
    pub(crate) runtime: &'a RuntimeContext,
}

impl<K> KeyedContext<'_, K> {
    /// The key of the record being processed.
    pub fn current_key(&self) -> &K {
        self.key
    }
    /// The key group of the current key.
    pub fn key_group(&self) -> u32 {
        self.slot.key_group
    }
    /// The subtask this function runs in.
    pub fn runtime(&self) -> &RuntimeContext {
        self.runtime
    }
}

/// An aggregation as Flink defines it: an accumulator is created, each input is added to it,
/// a result is read from it, and two accumulators can be merged (for windows that merge,
/// such as sessions). [`KeyedStream::aggregate`](crate::KeyedStream::aggregate) runs it per
/// key and [`AggregatingState`](crate::AggregatingState) keeps it as keyed state.
///
/// ```
/// use weir::prelude::*;
///
/// /// The average of the values per key.
/// #[derive(Clone)]
/// struct Average;
///
/// impl AggregateFunction<(String, f64), (f64, u64), f64> for Average {
///     fn create_accumulator(&self) -> (f64, u64) {
///         (0.0, 0)
///     }
///     fn add(&self, (_, value): (String, f64), acc: &mut (f64, u64)) {
///         acc.0 += value;
///         acc.1 += 1;
///     }
///     fn get_result(&self, acc: &(f64, u64)) -> f64 {
///         acc.0 / acc.1 as f64
///     }
///     fn merge(&self, a: (f64, u64), b: (f64, u64)) -> (f64, u64) {
///         (a.0 + b.0, a.1 + b.1)
///     }
/// }
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))?;
/// let averages = env
///     .from_collection(vec![("a".to_string(), 1.0), ("a".to_string(), 3.0)])
///     .key_by(|(k, _): &(String, f64)| k.clone())
///     .aggregate(Average)
///     .name("average per key")
///     .collect();
/// env.execute("averages")?;
/// assert_eq!(averages.take(), vec![("a".to_string(), 1.0), ("a".to_string(), 2.0)]);
/// # Ok::<(), WeirError>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an aggregate function over `{IN}` with accumulator `{ACC}` and result `{OUT}`",
    label = "not an `AggregateFunction<{IN}, {ACC}, {OUT}>`",
    note = "implement `AggregateFunction<{IN}, {ACC}, {OUT}>` for it: `create_accumulator`, `add`, `get_result` and `merge`; the accumulator must be a record (`#[derive(Clone, serde::Serialize, serde::Deserialize)]`)"
)]
pub trait AggregateFunction<IN, ACC, OUT>: Clone + Send + 'static {
    /// A new, empty accumulator.
    fn create_accumulator(&self) -> ACC;
    /// Adds `value` to `accumulator`.
    fn add(&self, value: IN, accumulator: &mut ACC);
    /// The result an accumulator stands for.
    fn get_result(&self, accumulator: &ACC) -> OUT;
    /// Two accumulators as one.
    fn merge(&self, a: ACC, b: ACC) -> ACC;
}

/// What a [`KeyedProcessFunction`] sees when its bounded input has ended: the subtask, and
/// its keys with their state, to emit final results per key (what Flink's batch execution
/// does for keyed operators at the end of input).
///
/// ```
/// use weir::prelude::*;
///
/// /// The largest value per key, emitted once at the end of the input.
/// #[derive(Clone)]
/// struct MaxAtEnd {
///     max: ValueState<u64>,
/// }
///
/// impl KeyedProcessFunction<u64, u64, (u64, u64)> for MaxAtEnd {
///     fn process_element(
///         &mut self,
///         value: u64,
///         ctx: &mut KeyedContext<'_, u64>,
///         _out: &mut Collector<'_, (u64, u64)>,
///     ) -> Result<(), BoxError> {
///         let max = self.max.value(ctx)?.map_or(value, |m| m.max(value));
///         Ok(self.max.update(ctx, max)?)
///     }
///     fn end_input(
///         &mut self,
///         ctx: &mut KeyedEndContext<'_, u64>,
///         out: &mut Collector<'_, (u64, u64)>,
///     ) -> Result<(), BoxError> {
///         ctx.for_each_key(&self.max, |key| {
///             if let Some(max) = self.max.value(key)? {
///                 out.collect((*key.current_key(), max));
///             }
///             Ok(())
///         })
///     }
/// }
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))?;
/// let maxima = env
///     .generate(100, |i| i)
///     .key_by(|v: &u64| v % 3)
///     .process(MaxAtEnd { max: ValueState::new("max") })
///     .collect();
/// env.execute("maxima")?;
/// let mut maxima = maxima.take();
/// maxima.sort();
/// assert_eq!(maxima, vec![(0, 99), (1, 97), (2, 98)]);
/// # Ok::<(), WeirError>(())
/// ```
pub struct KeyedEndContext<'a, K> {
    pub(crate) backend: &'a mut HeapKeyedStateBackend<K>,
    pub(crate) runtime: &'a RuntimeContext,
}

impl<K: Key> KeyedEndContext<'_, K> {
    /// The subtask this function runs in.
    pub fn runtime(&self) -> &RuntimeContext {
        self.runtime
    }

    /// Calls `f` once for every key of this subtask that has a value in `state` (Flink's
    /// `applyToAllKeys`), with a [`KeyedContext`] scoped to that key: read its state, clear
    /// it, emit its result. Keys come in key-group order.
    pub fn for_each_key<S: KeyedState>(
        &mut self,
        state: &S,
        mut f: impl FnMut(&mut KeyedContext<'_, K>) -> Result<(), BoxError>,
    ) -> Result<(), BoxError> {
        for (key, slot) in state.keys(self.backend)? {
            let mut ctx = KeyedContext {
                key: &key,
                slot,
                backend: self.backend,
                runtime: self.runtime,
            };
            f(&mut ctx)?;
        }
        Ok(())
    }
}

/// A function over each record with access to its subtask (Flink's `ProcessFunction`).
///
/// One instance runs per subtask, cloned from the one given to the API.
///
/// ```
/// use weir::prelude::*;
///
/// /// Emits each value with the index of the subtask that saw it.
/// #[derive(Clone)]
/// struct Tag;
///
/// impl ProcessFunction<u64, (u32, u64)> for Tag {
///     fn process_element(
///         &mut self,
///         value: u64,
///         ctx: &RuntimeContext,
///         out: &mut Collector<'_, (u32, u64)>,
///     ) -> Result<(), BoxError> {
///         out.collect((ctx.subtask_index(), value));
///         Ok(())
///     }
/// }
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// let tagged = env.generate(2, |i| i).process(Tag).collect();
/// env.execute("tag")?;
/// assert_eq!(tagged.take(), vec![(0, 0), (0, 1)]);
/// # Ok::<(), WeirError>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a process function from `{I}` to `{O}`",
    label = "not a `ProcessFunction<{I}, {O}>`",
    note = "implement `ProcessFunction<{I}, {O}>` for it (it must also be `Clone + Send + 'static`: one instance runs per subtask); for a plain closure use `map`, `filter` or `flat_map`"
)]
pub trait ProcessFunction<I, O>: Clone + Send + 'static {
    /// Called once before the first record.
    fn open(&mut self, _ctx: &RuntimeContext) -> Result<(), BoxError> {
        Ok(())
    }
    /// Processes one record, emitting any number of results.
    fn process_element(
        &mut self,
        value: I,
        ctx: &RuntimeContext,
        out: &mut Collector<'_, O>,
    ) -> Result<(), BoxError>;
    /// Called once when the input has ended (bounded jobs), before end-of-stream moves on.
    fn end_input(
        &mut self,
        _ctx: &RuntimeContext,
        _out: &mut Collector<'_, O>,
    ) -> Result<(), BoxError> {
        Ok(())
    }
    /// Called once at task start, before `open`: restore operator state here.
    fn initialize_state(&mut self, _ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
        Ok(())
    }
    /// Called at each checkpoint, between two records: put operator state here.
    fn snapshot_state(&mut self, _ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
        Ok(())
    }
    /// Checkpoint `checkpoint_id` is complete (the notice can be lost; a later one implies it).
    fn notify_checkpoint_complete(&mut self, _checkpoint_id: u64) -> Result<(), BoxError> {
        Ok(())
    }
    /// Checkpoint `checkpoint_id` was aborted.
    fn notify_checkpoint_aborted(&mut self, _checkpoint_id: u64) -> Result<(), BoxError> {
        Ok(())
    }
}

/// A function over each record of a keyed stream, with the current key and keyed state
/// (Flink's `KeyedProcessFunction`).
///
/// ```
/// use weir::prelude::*;
///
/// /// Emits each word with the number of times it was seen so far.
/// #[derive(Clone)]
/// struct RunningCount {
///     seen: ValueState<u64>,
/// }
///
/// impl KeyedProcessFunction<String, String, (String, u64)> for RunningCount {
///     fn process_element(
///         &mut self,
///         _word: String,
///         ctx: &mut KeyedContext<'_, String>,
///         out: &mut Collector<'_, (String, u64)>,
///     ) -> Result<(), BoxError> {
///         let n = self.seen.value(ctx)?.unwrap_or(0) + 1;
///         self.seen.update(ctx, n)?;
///         out.collect((ctx.current_key().clone(), n));
///         Ok(())
///     }
/// }
///
/// /// Counts each word, emitting only the final count when the input ends.
/// #[derive(Clone)]
/// struct FinalCount {
///     seen: ValueState<u64>,
/// }
///
/// impl KeyedProcessFunction<String, String, (String, u64)> for FinalCount {
///     fn process_element(
///         &mut self,
///         _word: String,
///         ctx: &mut KeyedContext<'_, String>,
///         _out: &mut Collector<'_, (String, u64)>,
///     ) -> Result<(), BoxError> {
///         let n = self.seen.value(ctx)?.unwrap_or(0) + 1;
///         Ok(self.seen.update(ctx, n)?)
///     }
///     fn end_input(
///         &mut self,
///         ctx: &mut KeyedEndContext<'_, String>,
///         out: &mut Collector<'_, (String, u64)>,
///     ) -> Result<(), BoxError> {
///         ctx.for_each_key(&self.seen, |key| {
///             let n = self.seen.value(key)?.unwrap_or(0);
///             out.collect((key.current_key().clone(), n));
///             Ok(())
///         })
///     }
/// }
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))?;
/// let words = env.from_collection(
///     "a b a c a b".split(' ').map(String::from).collect::<Vec<_>>(),
/// );
/// let running = words.key_by(|w: &String| w.clone()).process(RunningCount { seen: ValueState::new("seen") }).collect();
/// let finals = words.key_by(|w: &String| w.clone()).process(FinalCount { seen: ValueState::new("seen") }).collect();
/// env.execute("word counts")?;
/// assert_eq!(running.take().len(), 6);
/// let mut finals = finals.take();
/// finals.sort();
/// assert_eq!(finals, vec![("a".into(), 3), ("b".into(), 2), ("c".into(), 1)]);
/// # Ok::<(), WeirError>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a keyed process function over keys `{K}` from `{I}` to `{O}`",
    label = "not a `KeyedProcessFunction<{K}, {I}, {O}>`",
    note = "implement `KeyedProcessFunction<{K}, {I}, {O}>` for it (it must also be `Clone + Send + 'static`); the key type is the one `key_by` returns"
)]
pub trait KeyedProcessFunction<K, I, O>: Clone + Send + 'static {
    /// Called once before the first record.
    fn open(&mut self, _ctx: &RuntimeContext) -> Result<(), BoxError> {
        Ok(())
    }
    /// Processes one record of key `ctx.current_key()`.
    fn process_element(
        &mut self,
        value: I,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<'_, O>,
    ) -> Result<(), BoxError>;
    /// Called once when the bounded input has ended, before end-of-stream moves on: visit
    /// the subtask's keys and their state with [`KeyedEndContext::for_each_key`] to emit
    /// final results (a word count's final count per word, say).
    fn end_input(
        &mut self,
        _ctx: &mut KeyedEndContext<'_, K>,
        _out: &mut Collector<'_, O>,
    ) -> Result<(), BoxError> {
        Ok(())
    }
    /// Called once at task start, before `open`: restore operator state here.
    fn initialize_state(&mut self, _ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
        Ok(())
    }
    /// Called at each checkpoint, between two records: put operator state here.
    fn snapshot_state(&mut self, _ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
        Ok(())
    }
    /// Checkpoint `checkpoint_id` is complete (the notice can be lost; a later one implies it).
    fn notify_checkpoint_complete(&mut self, _checkpoint_id: u64) -> Result<(), BoxError> {
        Ok(())
    }
    /// Checkpoint `checkpoint_id` was aborted.
    fn notify_checkpoint_aborted(&mut self, _checkpoint_id: u64) -> Result<(), BoxError> {
        Ok(())
    }
}
