//! [`ProcessFunction`]: a function over each record with its subtask's lifecycle.

use crate::api::functions::{FunctionStateContext, RuntimeContext};
use crate::api::output_tag::OutputTag;
use crate::error::{BoxError, TaskError};
use crate::record::Record;
use crate::runtime::chain::SideOutputs;
use crate::runtime::output::Collector;

/// What a [`ProcessFunction`] sees of the record it processes (Flink's
/// `ProcessFunction.Context`): its event timestamp and the side outputs; it also derefs to
/// the subtask's [`RuntimeContext`].
///
/// ```
/// use weir::prelude::*;
///
/// /// Tags each record with its event timestamp and the subtask that saw it.
/// #[derive(Clone)]
/// struct Stamp;
///
/// impl ProcessFunction<(u64, i64), (u64, Option<i64>, u32)> for Stamp {
///     fn process_element(
///         &mut self,
///         value: (u64, i64),
///         ctx: &mut ProcessContext<'_>,
///         out: &mut Collector<'_, (u64, Option<i64>, u32)>,
///     ) -> Result<(), BoxError> {
///         out.collect((value.0, ctx.timestamp(), ctx.subtask_index()));
///         Ok(())
///     }
/// }
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// let strategy = WatermarkStrategy::no_watermarks().with_timestamp_assigner(|e: &(u64, i64), _| e.1);
/// let stamped = env
///     .from_source(CollectionSource::new(vec![(7, 1_000)]), strategy, "events")
///     .process(Stamp)
///     .collect();
/// env.execute("stamps")?;
/// assert_eq!(stamped.take(), vec![(7, Some(1_000), 0)]);
/// # Ok::<(), WeirError>(())
/// ```
pub struct ProcessContext<'a> {
    pub(crate) runtime: &'a RuntimeContext,
    pub(crate) timestamp: Option<i64>,
    pub(crate) side: Option<&'a mut SideOutputs>,
}

impl ProcessContext<'_> {
    /// The subtask this function runs in.
    pub fn runtime(&self) -> &RuntimeContext {
        self.runtime
    }
    /// The event timestamp of the record being processed, if it has one.
    pub fn timestamp(&self) -> Option<i64> {
        self.timestamp
    }
    /// Emits `value` to side output `tag`, with the record's timestamp.
    pub fn output<T: Record>(&mut self, tag: &OutputTag<T>, value: T) -> Result<(), TaskError> {
        match &mut self.side {
            Some(side) => side.emit(tag.id(), value, self.timestamp),
            None => Ok(()),
        }
    }
}

impl std::ops::Deref for ProcessContext<'_> {
    type Target = RuntimeContext;
    fn deref(&self) -> &RuntimeContext {
        self.runtime
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
///         ctx: &mut ProcessContext<'_>,
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
        ctx: &mut ProcessContext<'_>,
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
