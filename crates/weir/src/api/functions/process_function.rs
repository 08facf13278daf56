//! [`ProcessFunction`]: a function over each record with its subtask's lifecycle.

use crate::api::functions::{FunctionStateContext, RuntimeContext};
use crate::error::BoxError;
use crate::runtime::output::Collector;

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
