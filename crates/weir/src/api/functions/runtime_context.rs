//! What every user function sees of its subtask: the [`RuntimeContext`], and the
//! [`FunctionStateContext`] of its operator-state hooks.

use std::sync::Arc;

use crate::checkpoint::fencing::FencingToken;
use crate::config::ExecutionConfig;
use crate::state::operator_state::OperatorStateBackend;

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
///         _ctx: &mut ProcessContext<'_>,
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
///     fn process_element(&mut self, _: u64, _: &mut ProcessContext<'_>, _: &mut Collector<'_, String>) -> Result<(), BoxError> {
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
    pub(crate) attempt: u64,
    pub(crate) metrics: crate::metrics::MetricGroup,
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
            attempt: setup.attempt,
            metrics: setup.metrics.group().clone(),
        }
    }

    /// The context of subtask `subtask` of a one-operator job whose process holds the job
    /// at `fencing`'s epoch (unit tests of connectors).
    #[cfg(test)]
    pub(crate) fn for_test(subtask: u32, fencing: FencingToken) -> Self {
        Self {
            operator_name: "test sink".into(),
            operator_uid: "test-sink".into(),
            subtask_index: subtask,
            parallelism: subtask + 1,
            max_parallelism: 128,
            checkpointing: true,
            config: Arc::new(ExecutionConfig::default()),
            fencing,
            restored_from: None,
            attempt: 0,
            metrics: crate::metrics::MetricGroup::detached(),
        }
    }

    /// Where the function registers its metrics (Flink's
    /// `getRuntimeContext().getMetricGroup()`); they are reported with the operator's, to
    /// the REST API and Prometheus. Looking a metric up takes a lock: on a hot path, keep
    /// the handle it returns (handles are cheap clones of one atomic).
    ///
    /// ```
    /// use weir::prelude::*;
    /// #[derive(Clone)]
    /// struct CountEvens;
    /// impl<K: Key> KeyedProcessFunction<K, u64, u64> for CountEvens {
    ///     fn process_element(&mut self, n: u64, ctx: &mut KeyedContext<'_, K>, out: &mut Collector<'_, u64>) -> Result<(), BoxError> {
    ///         if n % 2 == 0 {
    ///             ctx.runtime().metric_group().counter("evens").inc();
    ///         }
    ///         out.collect(n);
    ///         Ok(())
    ///     }
    /// }
    /// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
    /// env.generate(10, |i| i).key_by(|i: &u64| i % 2).process(CountEvens).sink_to(DiscardingSink, "out");
    /// env.execute("evens")?;
    /// # Ok::<(), WeirError>(())
    /// ```
    pub fn metric_group(&self) -> &crate::metrics::MetricGroup {
        &self.metrics
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
    /// Which attempt of the job's run in this process this is: 0 when the process started
    /// the job, one more after each restart (Flink's `getAttemptNumber()`).
    pub fn attempt_number(&self) -> u64 {
        self.attempt
    }
    /// Whether the job takes periodic checkpoints. Transactional sinks then commit only when
    /// a checkpoint completes — the job ends with a final checkpoint — and never at the end of
    /// input.
    pub fn is_checkpointing(&self) -> bool {
        self.checkpointing
    }
}
