//! `flat_map`: any number of outputs per input, emitted into a collector (Flink's
//! `FlatMapFunction`) or returned as a collection (`flat_map_iter`).

use std::marker::PhantomData;

use crate::error::TaskError;
use crate::record::Record;
use crate::runtime::operators::{pass_events_through, OperatorCore};
use crate::runtime::output::{call_user, call_with_collector, Collector, Output};
use crate::runtime::task::OperatorSetup;

/// Calls a function with each record and a [`Collector`] it emits into.
pub struct FlatMapOperator<I, O, F> {
    core: OperatorCore,
    f: F,
    output: Box<dyn Output<O>>,
    _input: PhantomData<fn(I)>,
}

impl<I, O, F> FlatMapOperator<I, O, F> {
    /// A flat map with `f`, emitting into `output`.
    pub fn new(setup: &OperatorSetup, f: F, output: Box<dyn Output<O>>) -> Self {
        Self {
            core: OperatorCore::new(setup),
            f,
            output,
            _input: PhantomData,
        }
    }
}

impl<I, O, F> Output<I> for FlatMapOperator<I, O, F>
where
    I: Record,
    O: Record,
    F: FnMut(I, &mut Collector<'_, O>) + Send,
{
    fn collect(&mut self, record: I) -> Result<(), TaskError> {
        self.core.records_in += 1;
        let (f, core) = (&mut self.f, &mut self.core);
        call_with_collector(
            &core.name,
            &mut *self.output,
            &mut core.records_out,
            |out| {
                f(record, out);
                Ok(())
            },
        )
    }
    pass_events_through!();
}

/// Emits every item of the collection a function returns for each record.
pub struct FlatMapIterOperator<I, O, F> {
    core: OperatorCore,
    f: F,
    output: Box<dyn Output<O>>,
    _input: PhantomData<fn(I)>,
}

impl<I, O, F> FlatMapIterOperator<I, O, F> {
    /// A flat map with `f`, emitting into `output`.
    pub fn new(setup: &OperatorSetup, f: F, output: Box<dyn Output<O>>) -> Self {
        Self {
            core: OperatorCore::new(setup),
            f,
            output,
            _input: PhantomData,
        }
    }
}

impl<I, O, F, It> Output<I> for FlatMapIterOperator<I, O, F>
where
    I: Record,
    O: Record,
    It: IntoIterator<Item = O>,
    F: FnMut(I) -> It + Send,
{
    fn collect(&mut self, record: I) -> Result<(), TaskError> {
        self.core.records_in += 1;
        let f = &mut self.f;
        let items = call_user(&self.core.name, || f(record))?;
        for item in items {
            self.core.records_out += 1;
            self.output.collect(item)?;
        }
        Ok(())
    }
    pass_events_through!();
}
