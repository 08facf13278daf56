//! `KeyedStream<T, K>`: a stream partitioned by key, with keyed-state operators.

use std::sync::Arc;

use crate::api::data_stream::DataStream;
use crate::api::functions::{AggregateFunction, KeyedProcessFunction};
use crate::api::join::IntervalJoin;
use crate::api::windowed_stream::WindowedStream;
use crate::graph::stream_graph::OperatorKind;
use crate::record::{Key, Record};
use crate::runtime::key_selector::KeySelector;
use crate::runtime::operators::keyed_process::KeyedProcessOperator;
use crate::runtime::operators::rolling_aggregate::{
    CountAggregator, FunctionAggregator, ReduceAggregator, RollingAggregateOperator,
    RollingAggregator, SumAggregator,
};
use crate::windowing::assigners::{GlobalWindows, WindowAssigner};
use crate::windowing::trigger::{CountTrigger, PurgingTrigger, Trigger};

/// A stream whose records are routed by key, so that each key's records and state live in
/// exactly one subtask. Made by [`DataStream::key_by`].
///
/// ```
/// use weir::prelude::*;
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))?;
/// let keyed: KeyedStream<(String, u64), String> = env
///     .from_collection(vec![("a".to_string(), 3), ("b".to_string(), 1), ("a".to_string(), 4)])
///     .key_by(|(k, _): &(String, u64)| k.clone());
/// let largest = keyed
///     .reduce(|a, b| if b.1 > a.1 { b } else { a })
///     .name("largest so far")
///     .collect();
/// env.execute("reduce")?;
/// let mut largest = largest.take();
/// largest.sort();
/// assert_eq!(largest, vec![("a".into(), 3), ("a".into(), 4), ("b".into(), 1)]);
/// # Ok::<(), WeirError>(())
/// ```
pub struct KeyedStream<T, K> {
    stream: DataStream<T>,
    selector: Arc<dyn KeySelector<T, Key = K>>,
}

impl<T, K> Clone for KeyedStream<T, K> {
    fn clone(&self) -> Self {
        Self {
            stream: self.stream.clone(),
            selector: self.selector.clone(),
        }
    }
}

impl<T: Record, K: Key> KeyedStream<T, K> {
    /// Joins this stream with `other`, keyed alike, by time interval (Flink's
    /// `intervalJoin`): set the bounds with `between`. See [`IntervalJoin`].
    pub fn interval_join<B: Record>(&self, other: &KeyedStream<B, K>) -> IntervalJoin<T, B, K> {
        IntervalJoin::new(self.clone(), other.clone())
    }

    pub(crate) fn new(stream: DataStream<T>, selector: Arc<dyn KeySelector<T, Key = K>>) -> Self {
        Self { stream, selector }
    }

    /// A rolling aggregation: per key, updates an accumulator with each record and emits
    /// the updated result.
    fn rolling<A>(&self, name: &str, aggregator: A) -> DataStream<A::Output>
    where
        A: RollingAggregator<K, T>,
        A::Output: Record,
    {
        let selector = self.selector.clone();
        self.stream
            .add_operator(name, OperatorKind::Operator, true, move |setup| {
                Ok(RollingAggregateOperator::new(
                    setup,
                    selector.clone(),
                    aggregator.clone(),
                )?)
            })
    }

    /// Aggregates each key's records with `function` (an [`AggregateFunction`]), emitting
    /// `(key, result)` after each record. The accumulator is keyed state, in every
    /// checkpoint. Name the operator with `.name()`.
    pub fn aggregate<ACC, OUT, A>(&self, function: A) -> DataStream<(K, OUT)>
    where
        ACC: Record,
        OUT: Record,
        A: AggregateFunction<T, ACC, OUT>,
    {
        self.rolling("Keyed Aggregate", FunctionAggregator::new(function))
    }

    /// Emits `(key, records of this key so far)` for each record.
    pub fn count(&self) -> DataStream<(K, u64)> {
        self.rolling("Keyed Count", CountAggregator)
    }

    /// Emits `(key, running sum of field(record))` for each record.
    pub fn sum<V, F>(&self, field: F) -> DataStream<(K, V)>
    where
        V: Record + std::ops::AddAssign,
        F: FnMut(&T) -> V + Clone + Send + 'static,
    {
        self.rolling("Keyed Sum", SumAggregator::new(field))
    }

    /// Folds each key's records with `f(accumulated, next)` and emits each new value.
    pub fn reduce<F: FnMut(T, T) -> T + Clone + Send + 'static>(&self, f: F) -> DataStream<T> {
        self.rolling("Keyed Reduce", ReduceAggregator::new(f))
    }

    /// The key selector.
    pub(crate) fn selector(&self) -> Arc<dyn KeySelector<T, Key = K>> {
        self.selector.clone()
    }

    /// The hash-partitioned stream underneath.
    pub(crate) fn into_stream(self) -> DataStream<T> {
        self.stream
    }

    /// Cuts each key's records into the windows `assigner` makes (Flink's `window`); pick a
    /// window function on the result. See [`WindowedStream`].
    pub fn window<A>(&self, assigner: A) -> WindowedStream<T, K, A, A::DefaultTrigger>
    where
        A: WindowAssigner,
        A::DefaultTrigger: Trigger<A::Window>,
    {
        WindowedStream::new(
            self.stream.clone(),
            self.selector.clone(),
            assigner,
            A::DefaultTrigger::default(),
            false,
        )
    }

    /// Windows of `n` records per key (Flink's `countWindow`): global windows with a
    /// count trigger that purges the window each time it fires.
    ///
    /// ```
    /// use weir::prelude::*;
    /// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
    /// let sums = env
    ///     .generate(7, |i| (i % 2, i))
    ///     .key_by(|r: &(u64, u64)| r.0)
    ///     .count_window(2)
    ///     .reduce(|a, b| (a.0, a.1 + b.1))
    ///     .collect();
    /// env.execute("pairs")?;
    /// let mut sums = sums.take();
    /// sums.sort();
    /// // Evens 0 2 4 6 and odds 1 3 5: pairs fire, the leftover 6 never does.
    /// assert_eq!(sums, vec![(0, 2), (0, 10), (1, 4)]);
    /// # Ok::<(), WeirError>(())
    /// ```
    pub fn count_window(
        &self,
        n: u64,
    ) -> WindowedStream<T, K, GlobalWindows, PurgingTrigger<CountTrigger>> {
        WindowedStream::new(
            self.stream.clone(),
            self.selector.clone(),
            GlobalWindows,
            PurgingTrigger::of(CountTrigger::of(n)),
            false,
        )
    }

    /// Runs a [`KeyedProcessFunction`] with the current key and keyed state.
    pub fn process<O: Record, P: KeyedProcessFunction<K, T, O>>(
        &self,
        function: P,
    ) -> DataStream<O> {
        let selector = self.selector.clone();
        self.stream.add_operator(
            "Keyed Process",
            OperatorKind::Operator,
            true,
            move |setup| {
                Ok(KeyedProcessOperator::new(
                    setup,
                    selector.clone(),
                    function.clone(),
                )?)
            },
        )
    }
}
