//! Rolling aggregations on a keyed stream (`reduce`, `sum`, `count`): per key, one state
//! value updated by each record, and the updated result emitted.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::api::functions::AggregateFunction;
use crate::error::TaskError;
use crate::record::{Key, Record};
use crate::runtime::chain::ChainOutput;
use crate::runtime::key_selector::KeySelector;
use crate::runtime::operators::{
    notify_keyed, snapshot_keyed, OneInputStreamOperator, OperatorCore, StreamOperator,
};
use crate::runtime::output::{call_user, in_operator};
use crate::runtime::snapshot::{CheckpointNotification, OperatorSnapshot};
use crate::runtime::stream_element::CheckpointBarrier;
use crate::runtime::task::OperatorSetup;
use crate::state::backend::StateKind;
use crate::state::keyed_state_store::KeyedStateStore;

/// How a rolling aggregation folds records into its per-key state.
pub(crate) trait RollingAggregator<K, I>: Clone + Send + 'static {
    /// The per-key accumulator.
    type State: crate::state::keyed_state_table::StateValue;
    /// What an update yields.
    type Result;
    /// What is emitted after each update.
    type Output;
    /// The first record of a key: the initial state and the first result.
    fn init(&mut self, record: I) -> (Self::State, Self::Result);
    /// A later record: updates the state in place and returns the new result.
    fn update(&mut self, state: &mut Self::State, record: I) -> Self::Result;
    /// The record emitted for `key`'s result (the key is moved in, never copied).
    fn emit(key: K, result: Self::Result) -> Self::Output;
}

/// Name of the value state that holds the accumulator, so a restored job finds it.
pub const AGGREGATE_STATE_NAME: &str = "rolling-aggregate";

/// Applies a [`RollingAggregator`] per key, keeping accumulators in keyed value state.
pub(crate) struct RollingAggregateOperator<K, I, A: RollingAggregator<K, I>> {
    core: OperatorCore,
    key_selector: Arc<dyn KeySelector<I, Key = K>>,
    backend: KeyedStateStore<K>,
    state: usize,
    aggregator: A,
}

impl<K: Key, I, A: RollingAggregator<K, I>> RollingAggregateOperator<K, I, A> {
    /// An aggregation with `aggregator` over records keyed by `key_selector`.
    pub fn new(
        setup: &OperatorSetup,
        key_selector: Arc<dyn KeySelector<I, Key = K>>,
        aggregator: A,
    ) -> Result<Self, TaskError> {
        let mut backend: KeyedStateStore<K> = OperatorCore::keyed_backend(setup)?;
        let state = backend.register::<A::State>(AGGREGATE_STATE_NAME, StateKind::Value, None)?;
        Ok(Self {
            core: OperatorCore::new(setup),
            key_selector,
            backend,
            state,
            aggregator,
        })
    }
}

impl<K: Key, I: Record, A: RollingAggregator<K, I>> StreamOperator
    for RollingAggregateOperator<K, I, A>
{
    fn snapshot_state(
        &mut self,
        barrier: CheckpointBarrier,
        into: &mut Vec<OperatorSnapshot>,
    ) -> Result<(), TaskError> {
        snapshot_keyed(&self.core, &mut self.backend, barrier, into)
    }

    fn notify_checkpoint(&mut self, notification: CheckpointNotification) -> Result<(), TaskError> {
        notify_keyed(&self.core, &mut self.backend, notification)
    }
}

impl<K, I, A> OneInputStreamOperator<I, A::Output> for RollingAggregateOperator<K, I, A>
where
    K: Key,
    I: Record,
    A: RollingAggregator<K, I>,
    A::Output: Record,
{
    #[inline]
    fn process_element(
        &mut self,
        record: I,
        out: &mut ChainOutput<'_, A::Output>,
    ) -> Result<(), TaskError> {
        self.process(record, None, out)
    }

    #[inline]
    fn process_element_in_key_group(
        &mut self,
        record: I,
        key_group: u32,
        out: &mut ChainOutput<'_, A::Output>,
    ) -> Result<(), TaskError> {
        self.process(record, Some(key_group), out)
    }
}

impl<K: Key, I: Record, A> RollingAggregateOperator<K, I, A>
where
    A: RollingAggregator<K, I>,
    A::Output: Record,
{
    /// Folds `record` into its key's accumulator and emits the result; `key_group` is the
    /// record's if its sender computed it.
    #[inline]
    fn process(
        &mut self,
        record: I,
        key_group: Option<u32>,
        out: &mut ChainOutput<'_, A::Output>,
    ) -> Result<(), TaskError> {
        let name = &self.core.name;
        let selector = &self.key_selector;
        // Owned, once: the aggregator takes the record, and the output takes the key.
        let key = call_user(name, || selector.key_ref(&record).into_owned())?;
        let state_error = |e: crate::error::StateError| in_operator(name, e.into());
        let slot = self.backend.resolve(&key, key_group).map_err(state_error)?;
        let aggregator = &mut self.aggregator;
        let result = self
            .backend
            .upsert::<A::State, _, _>(self.state, &key, slot, |acc| match acc {
                Some(acc) => {
                    Ok::<_, TaskError>((None, call_user(name, || aggregator.update(acc, record))?))
                }
                None => {
                    let (acc, result) = call_user(name, || aggregator.init(record))?;
                    Ok((Some(acc), result))
                }
            })
            .map_err(state_error)??;
        out.collect(A::emit(key, result))
    }
}

/// `count()`: the number of records per key so far.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CountAggregator;

impl<K: Key, I> RollingAggregator<K, I> for CountAggregator {
    type State = u64;
    type Result = u64;
    type Output = (K, u64);
    fn init(&mut self, _record: I) -> (u64, u64) {
        (1, 1)
    }
    fn update(&mut self, state: &mut u64, _record: I) -> u64 {
        *state += 1;
        *state
    }
    fn emit(key: K, count: u64) -> (K, u64) {
        (key, count)
    }
}

/// `sum(f)`: the sum of `f(record)` per key so far.
#[derive(Debug, Clone)]
pub(crate) struct SumAggregator<F> {
    field: F,
}

impl<F> SumAggregator<F> {
    /// Sums the values `field` extracts.
    pub fn new(field: F) -> Self {
        Self { field }
    }
}

impl<K, I, V, F> RollingAggregator<K, I> for SumAggregator<F>
where
    K: Key,
    V: Record + std::ops::AddAssign,
    F: FnMut(&I) -> V + Clone + Send + 'static,
{
    type State = V;
    type Result = V;
    type Output = (K, V);
    fn init(&mut self, record: I) -> (V, V) {
        let v = (self.field)(&record);
        (v.clone(), v)
    }
    fn update(&mut self, state: &mut V, record: I) -> V {
        *state += (self.field)(&record);
        state.clone()
    }
    fn emit(key: K, sum: V) -> (K, V) {
        (key, sum)
    }
}

/// `reduce(f)`: folds each key's records with `f(accumulated, next)`.
#[derive(Debug, Clone)]
pub(crate) struct ReduceAggregator<F> {
    f: F,
}

impl<F> ReduceAggregator<F> {
    /// Reduces with `f`.
    pub fn new(f: F) -> Self {
        Self { f }
    }
}

impl<K, T, F> RollingAggregator<K, T> for ReduceAggregator<F>
where
    K: Key,
    T: Record,
    F: FnMut(T, T) -> T + Clone + Send + 'static,
{
    type State = T;
    type Result = T;
    type Output = T;
    fn init(&mut self, record: T) -> (T, T) {
        (record.clone(), record)
    }
    fn update(&mut self, state: &mut T, record: T) -> T {
        let reduced = (self.f)(state.clone(), record);
        *state = reduced.clone();
        reduced
    }
    fn emit(_key: K, reduced: T) -> T {
        reduced
    }
}

/// `aggregate(f)`: a user's [`AggregateFunction`] per key, emitting `(key, result)` after
/// each record.
pub(crate) struct FunctionAggregator<A, ACC, OUT> {
    function: A,
    _types: PhantomData<fn() -> (ACC, OUT)>,
}

impl<A, ACC, OUT> FunctionAggregator<A, ACC, OUT> {
    /// Aggregates with `function`.
    pub(crate) fn new(function: A) -> Self {
        Self {
            function,
            _types: PhantomData,
        }
    }
}

impl<A: Clone, ACC, OUT> Clone for FunctionAggregator<A, ACC, OUT> {
    fn clone(&self) -> Self {
        Self::new(self.function.clone())
    }
}

impl<K, I, ACC, OUT, A> RollingAggregator<K, I> for FunctionAggregator<A, ACC, OUT>
where
    K: Key,
    ACC: Record,
    OUT: 'static,
    A: AggregateFunction<I, ACC, OUT>,
{
    type State = ACC;
    type Result = OUT;
    type Output = (K, OUT);
    fn init(&mut self, record: I) -> (ACC, OUT) {
        let mut acc = self.function.create_accumulator();
        self.function.add(record, &mut acc);
        let result = self.function.get_result(&acc);
        (acc, result)
    }
    fn update(&mut self, state: &mut ACC, record: I) -> OUT {
        self.function.add(record, state);
        self.function.get_result(state)
    }
    fn emit(key: K, result: OUT) -> (K, OUT) {
        (key, result)
    }
}
