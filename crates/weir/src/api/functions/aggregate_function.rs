//! [`AggregateFunction`]: an accumulator per key or window.

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
