//! What a window keeps until it fires, and how it turns that into results: one accumulator
//! (`reduce`, `aggregate`) or every record (`process`).

use std::marker::PhantomData;

use crate::api::functions::AggregateFunction;
use crate::error::BoxError;
use crate::record::Record;
use crate::runtime::output::Collector;
use crate::state::keyed_state_table::StateValue;
use crate::windowing::function::{ProcessWindowFunction, WindowContext};
use crate::windowing::window::Window;

/// A window's contents and result.
pub trait WindowContents<K, T, W: Window>: Clone + Send + 'static {
    /// What is kept per window.
    type Acc: StateValue;
    /// What the window emits.
    type Out: Record;
    /// Adds a record to the window's contents.
    fn add(&mut self, acc: Option<Self::Acc>, value: T) -> Self::Acc;
    /// Combines two windows' contents (merging windows).
    fn merge(&mut self, a: Self::Acc, b: Self::Acc) -> Self::Acc;
    /// Emits the window's results.
    fn emit(
        &mut self,
        key: &K,
        ctx: &WindowContext<'_, W>,
        acc: &Self::Acc,
        out: &mut Collector<'_, Self::Out>,
    ) -> Result<(), BoxError>;
}

/// `reduce(f)`: one value per window, folded with `f`.
#[derive(Clone)]
pub struct ReduceContents<F> {
    f: F,
}

impl<F> ReduceContents<F> {
    pub(crate) fn new(f: F) -> Self {
        Self { f }
    }
}

impl<K, T, W, F> WindowContents<K, T, W> for ReduceContents<F>
where
    T: Record,
    W: Window,
    F: FnMut(T, T) -> T + Clone + Send + 'static,
{
    type Acc = T;
    type Out = T;
    fn add(&mut self, acc: Option<T>, value: T) -> T {
        match acc {
            Some(acc) => (self.f)(acc, value),
            None => value,
        }
    }
    fn merge(&mut self, a: T, b: T) -> T {
        (self.f)(a, b)
    }
    fn emit(
        &mut self,
        _key: &K,
        _ctx: &WindowContext<'_, W>,
        acc: &T,
        out: &mut Collector<'_, T>,
    ) -> Result<(), BoxError> {
        out.collect(acc.clone());
        Ok(())
    }
}

/// `aggregate(f)`: an [`AggregateFunction`]'s accumulator per window.
pub struct AggregateContents<A, ACC, OUT> {
    function: A,
    _types: PhantomData<fn() -> (ACC, OUT)>,
}

impl<A: Clone, ACC, OUT> Clone for AggregateContents<A, ACC, OUT> {
    fn clone(&self) -> Self {
        Self::new(self.function.clone())
    }
}

impl<A, ACC, OUT> AggregateContents<A, ACC, OUT> {
    pub(crate) fn new(function: A) -> Self {
        Self {
            function,
            _types: PhantomData,
        }
    }
}

impl<K, T, W, ACC, OUT, A> WindowContents<K, T, W> for AggregateContents<A, ACC, OUT>
where
    W: Window,
    ACC: Record,
    OUT: Record,
    A: AggregateFunction<T, ACC, OUT>,
{
    type Acc = ACC;
    type Out = OUT;
    fn add(&mut self, acc: Option<ACC>, value: T) -> ACC {
        let mut acc = acc.unwrap_or_else(|| self.function.create_accumulator());
        self.function.add(value, &mut acc);
        acc
    }
    fn merge(&mut self, a: ACC, b: ACC) -> ACC {
        self.function.merge(a, b)
    }
    fn emit(
        &mut self,
        _key: &K,
        _ctx: &WindowContext<'_, W>,
        acc: &ACC,
        out: &mut Collector<'_, OUT>,
    ) -> Result<(), BoxError> {
        out.collect(self.function.get_result(acc));
        Ok(())
    }
}

/// `process(f)`: every record of the window, given to a [`ProcessWindowFunction`].
pub struct ProcessContents<P, OUT> {
    function: P,
    _out: PhantomData<fn() -> OUT>,
}

impl<P: Clone, OUT> Clone for ProcessContents<P, OUT> {
    fn clone(&self) -> Self {
        Self::new(self.function.clone())
    }
}

impl<P, OUT> ProcessContents<P, OUT> {
    pub(crate) fn new(function: P) -> Self {
        Self {
            function,
            _out: PhantomData,
        }
    }
}

impl<K, T, W, OUT, P> WindowContents<K, T, W> for ProcessContents<P, OUT>
where
    T: Record,
    W: Window,
    OUT: Record,
    P: ProcessWindowFunction<K, T, OUT, W>,
{
    type Acc = Vec<T>;
    type Out = OUT;
    fn add(&mut self, acc: Option<Vec<T>>, value: T) -> Vec<T> {
        let mut acc = acc.unwrap_or_default();
        acc.push(value);
        acc
    }
    fn merge(&mut self, mut a: Vec<T>, b: Vec<T>) -> Vec<T> {
        a.extend(b);
        a
    }
    fn emit(
        &mut self,
        key: &K,
        ctx: &WindowContext<'_, W>,
        acc: &Vec<T>,
        out: &mut Collector<'_, OUT>,
    ) -> Result<(), BoxError> {
        self.function.process(key, ctx, acc, out)
    }
}

/// `aggregate_with(f, p)`: an accumulator per window, whose result a
/// [`ProcessWindowFunction`] receives with the window's metadata.
pub struct AggregateProcessContents<A, ACC, R, P, OUT> {
    aggregate: A,
    process: P,
    _types: PhantomData<fn(ACC, R) -> OUT>,
}

impl<A: Clone, ACC, R, P: Clone, OUT> Clone for AggregateProcessContents<A, ACC, R, P, OUT> {
    fn clone(&self) -> Self {
        Self::new(self.aggregate.clone(), self.process.clone())
    }
}

impl<A, ACC, R, P, OUT> AggregateProcessContents<A, ACC, R, P, OUT> {
    pub(crate) fn new(aggregate: A, process: P) -> Self {
        Self {
            aggregate,
            process,
            _types: PhantomData,
        }
    }
}

impl<K, T, W, ACC, R, OUT, A, P> WindowContents<K, T, W>
    for AggregateProcessContents<A, ACC, R, P, OUT>
where
    W: Window,
    ACC: Record,
    R: 'static,
    OUT: Record,
    A: AggregateFunction<T, ACC, R>,
    P: ProcessWindowFunction<K, R, OUT, W>,
{
    type Acc = ACC;
    type Out = OUT;
    fn add(&mut self, acc: Option<ACC>, value: T) -> ACC {
        let mut acc = acc.unwrap_or_else(|| self.aggregate.create_accumulator());
        self.aggregate.add(value, &mut acc);
        acc
    }
    fn merge(&mut self, a: ACC, b: ACC) -> ACC {
        self.aggregate.merge(a, b)
    }
    fn emit(
        &mut self,
        key: &K,
        ctx: &WindowContext<'_, W>,
        acc: &ACC,
        out: &mut Collector<'_, OUT>,
    ) -> Result<(), BoxError> {
        let result = self.aggregate.get_result(acc);
        self.process
            .process(key, ctx, std::slice::from_ref(&result), out)
    }
}
