//! [`KeyedProcessFunction`]: a function over each record of a keyed stream, with keyed state
//! and timers.

use crate::api::functions::{FunctionStateContext, KeyedContext, KeyedEndContext, RuntimeContext};
use crate::error::BoxError;
use crate::runtime::output::Collector;

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
    /// Called when a timer of the current key fires (`ctx.time_domain()` says which kind;
    /// `ctx.timestamp()` is `timestamp` for event-time timers). What it emits carries the
    /// timer's timestamp.
    fn on_timer(
        &mut self,
        _timestamp: i64,
        _ctx: &mut KeyedContext<'_, K>,
        _out: &mut Collector<'_, O>,
    ) -> Result<(), BoxError> {
        Ok(())
    }
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
