//! `flat_map`: any number of outputs per input, emitted into a collector (Flink's
//! `FlatMapFunction`) or returned as a collection (`flat_map_iter`).

use std::marker::PhantomData;

use crate::error::TaskError;
use crate::record::Record;
use crate::runtime::chain::ChainOutput;
use crate::runtime::operators::{OneInputStreamOperator, OperatorCore, StreamOperator};
use crate::runtime::output::{call_user, call_with_collector, Collector};
use crate::runtime::task::OperatorSetup;

/// Calls a function with each record and a [`Collector`] it emits into.
pub struct FlatMapOperator<I, O, F> {
    core: OperatorCore,
    f: F,
    _types: PhantomData<fn(I) -> O>,
}

impl<I, O, F> FlatMapOperator<I, O, F> {
    /// A flat map with `f`.
    pub fn new(setup: &OperatorSetup, f: F) -> Self {
        Self {
            core: OperatorCore::new(setup),
            f,
            _types: PhantomData,
        }
    }
}

impl<I, O, F: Send> StreamOperator for FlatMapOperator<I, O, F> {}

impl<I, O, F> OneInputStreamOperator<I, O> for FlatMapOperator<I, O, F>
where
    I: Record,
    O: Record,
    F: FnMut(I, &mut Collector<'_, O>) + Send,
{
    fn process_element(
        &mut self,
        record: I,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        let f = &mut self.f;
        call_with_collector(&self.core.name, out, |out| {
            f(record, out);
            Ok(())
        })
    }
}

/// Emits every item of the collection a function returns for each record.
pub struct FlatMapIterOperator<I, O, F> {
    core: OperatorCore,
    f: F,
    _types: PhantomData<fn(I) -> O>,
}

impl<I, O, F> FlatMapIterOperator<I, O, F> {
    /// A flat map with `f`.
    pub fn new(setup: &OperatorSetup, f: F) -> Self {
        Self {
            core: OperatorCore::new(setup),
            f,
            _types: PhantomData,
        }
    }
}

impl<I, O, F: Send> StreamOperator for FlatMapIterOperator<I, O, F> {}

impl<I, O, F, It> OneInputStreamOperator<I, O> for FlatMapIterOperator<I, O, F>
where
    I: Record,
    O: Record,
    It: IntoIterator<Item = O>,
    F: FnMut(I) -> It + Send,
{
    fn process_element(
        &mut self,
        record: I,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        let f = &mut self.f;
        let items = call_user(&self.core.name, || f(record))?;
        items.into_iter().try_for_each(|item| out.collect(item))
    }
}
