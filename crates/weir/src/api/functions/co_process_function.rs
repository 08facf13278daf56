//! Functions over two connected streams: [`CoProcessFunction`] and, keyed on both sides,
//! [`KeyedCoProcessFunction`] (Flink's), which share keyed state and timers across the two
//! inputs.

use crate::api::functions::{
    FunctionStateContext, KeyedContext, KeyedEndContext, ProcessContext, RuntimeContext,
};
use crate::error::BoxError;
use crate::runtime::output::Collector;

/// A function over the records of two streams (Flink's `CoProcessFunction`): one method per
/// input, one instance per subtask seeing both.
///
/// ```
/// use weir::prelude::*;
///
/// /// Passes numbers on, scaled by the latest factor seen on the second input.
/// #[derive(Clone)]
/// struct Scale {
///     factor: u64,
/// }
///
/// impl CoProcessFunction<u64, u64, u64> for Scale {
///     fn process_element1(&mut self, value: u64, _ctx: &mut ProcessContext<'_>, out: &mut Collector<'_, u64>) -> Result<(), BoxError> {
///         out.collect(value * self.factor);
///         Ok(())
///     }
///     fn process_element2(&mut self, factor: u64, _ctx: &mut ProcessContext<'_>, _out: &mut Collector<'_, u64>) -> Result<(), BoxError> {
///         self.factor = factor;
///         Ok(())
///     }
/// }
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// let numbers = env.from_collection(vec![1u64, 2, 3]);
/// let factors = env.from_collection(vec![10u64]);
/// let scaled = numbers.connect(&factors).process(Scale { factor: 1 }).collect();
/// env.execute("scale")?;
/// let scaled = scaled.take();
/// // Which input is read first is not fixed: each number is scaled by 1 or by 10.
/// assert_eq!(scaled.len(), 3);
/// assert!(scaled.iter().zip([1, 2, 3]).all(|(s, n)| *s == n || *s == n * 10));
/// # Ok::<(), WeirError>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a co-process function from `{I1}` and `{I2}` to `{O}`",
    label = "not a `CoProcessFunction<{I1}, {I2}, {O}>`",
    note = "implement `CoProcessFunction<{I1}, {I2}, {O}>` for it (it must also be `Clone + Send + 'static`)"
)]
pub trait CoProcessFunction<I1, I2, O>: Clone + Send + 'static {
    /// Called once before the first record.
    fn open(&mut self, _ctx: &RuntimeContext) -> Result<(), BoxError> {
        Ok(())
    }
    /// Processes a record of the first input.
    fn process_element1(
        &mut self,
        value: I1,
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_, O>,
    ) -> Result<(), BoxError>;
    /// Processes a record of the second input.
    fn process_element2(
        &mut self,
        value: I2,
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_, O>,
    ) -> Result<(), BoxError>;
    /// Called once when both inputs have ended.
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
    /// Checkpoint `checkpoint_id` is complete.
    fn notify_checkpoint_complete(&mut self, _checkpoint_id: u64) -> Result<(), BoxError> {
        Ok(())
    }
    /// Checkpoint `checkpoint_id` was aborted.
    fn notify_checkpoint_aborted(&mut self, _checkpoint_id: u64) -> Result<(), BoxError> {
        Ok(())
    }
}

/// A function over two streams keyed alike (Flink's `KeyedCoProcessFunction`): both inputs'
/// records of a key reach the same subtask, and see the same keyed state and timers.
///
/// ```
/// use weir::prelude::*;
///
/// /// Emits each order with the latest price of its item, waiting for the first price.
/// #[derive(Clone)]
/// struct Enrich {
///     price: ValueState<u64>,
///     waiting: ListState<u64>,
/// }
///
/// impl KeyedCoProcessFunction<String, (String, u64), (String, u64), (String, u64, u64)> for Enrich {
///     fn process_element1(
///         &mut self,
///         (item, quantity): (String, u64),
///         ctx: &mut KeyedContext<'_, String>,
///         out: &mut Collector<'_, (String, u64, u64)>,
///     ) -> Result<(), BoxError> {
///         match self.price.value(ctx)? {
///             Some(price) => out.collect((item, quantity, price)),
///             None => self.waiting.add(ctx, quantity)?,
///         }
///         Ok(())
///     }
///     fn process_element2(
///         &mut self,
///         (item, price): (String, u64),
///         ctx: &mut KeyedContext<'_, String>,
///         out: &mut Collector<'_, (String, u64, u64)>,
///     ) -> Result<(), BoxError> {
///         self.price.update(ctx, price)?;
///         for quantity in self.waiting.get(ctx)? {
///             out.collect((item.clone(), quantity, price));
///         }
///         Ok(self.waiting.clear(ctx)?)
///     }
/// }
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))?;
/// let orders = env.from_collection(vec![("pen".to_string(), 3), ("ink".to_string(), 1)]);
/// let prices = env.from_collection(vec![("pen".to_string(), 2), ("ink".to_string(), 9)]);
/// let enriched = orders
///     .connect(&prices)
///     .key_by(|o: &(String, u64)| o.0.clone(), |p: &(String, u64)| p.0.clone())
///     .process(Enrich { price: ValueState::new("price"), waiting: ListState::new("waiting") })
///     .collect();
/// env.execute("enrich")?;
/// let mut enriched = enriched.take();
/// enriched.sort();
/// assert_eq!(enriched, vec![("ink".into(), 1, 9), ("pen".into(), 3, 2)]);
/// # Ok::<(), WeirError>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a keyed co-process function over keys `{K}` from `{I1}` and `{I2}` to `{O}`",
    label = "not a `KeyedCoProcessFunction<{K}, {I1}, {I2}, {O}>`",
    note = "implement `KeyedCoProcessFunction<{K}, {I1}, {I2}, {O}>` for it (it must also be `Clone + Send + 'static`); the key type is the one both key selectors return"
)]
pub trait KeyedCoProcessFunction<K, I1, I2, O>: Clone + Send + 'static {
    /// Called once before the first record.
    fn open(&mut self, _ctx: &RuntimeContext) -> Result<(), BoxError> {
        Ok(())
    }
    /// Processes a record of the first input, of key `ctx.current_key()`.
    fn process_element1(
        &mut self,
        value: I1,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<'_, O>,
    ) -> Result<(), BoxError>;
    /// Processes a record of the second input, of key `ctx.current_key()`.
    fn process_element2(
        &mut self,
        value: I2,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<'_, O>,
    ) -> Result<(), BoxError>;
    /// Called when a timer of the current key fires.
    fn on_timer(
        &mut self,
        _timestamp: i64,
        _ctx: &mut KeyedContext<'_, K>,
        _out: &mut Collector<'_, O>,
    ) -> Result<(), BoxError> {
        Ok(())
    }
    /// Called once when both inputs have ended, with every key of the subtask.
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
    /// Checkpoint `checkpoint_id` is complete.
    fn notify_checkpoint_complete(&mut self, _checkpoint_id: u64) -> Result<(), BoxError> {
        Ok(())
    }
    /// Checkpoint `checkpoint_id` was aborted.
    fn notify_checkpoint_aborted(&mut self, _checkpoint_id: u64) -> Result<(), BoxError> {
        Ok(())
    }
}
