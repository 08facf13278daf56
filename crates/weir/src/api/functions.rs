//! User function interfaces beyond plain closures, and the contexts they receive.

use std::sync::Arc;

use crate::checkpoint::fencing::FencingToken;
use crate::config::ExecutionConfig;
use crate::error::BoxError;
use crate::runtime::output::Collector;
use crate::state::heap_keyed_state_backend::{HeapKeyedStateBackend, KeyGroupSlot};
use crate::state::operator_state::OperatorStateBackend;

/// What a function sees when it initializes or snapshots its operator state (Flink's
/// `FunctionInitializationContext` / `FunctionSnapshotContext`).
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

/// A function over each record with access to its subtask (Flink's `ProcessFunction`).
///
/// One instance runs per subtask, cloned from the one given to the API.
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
/// use weir::{BoxError, Collector, KeyedContext, KeyedProcessFunction, ValueState};
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
/// # let _ = RunningCount { seen: ValueState::new("seen") };
/// ```
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
