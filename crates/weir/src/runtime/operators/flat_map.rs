//! `flat_map`: any number of outputs per input.

use std::marker::PhantomData;

use crate::error::TaskError;
use crate::record::Record;
use crate::runtime::operators::{pass_events_through, OperatorCore};
use crate::runtime::output::{call_user, Output};
use crate::runtime::task::OperatorSetup;

/// Emits every item of the collection a function returns for each record.
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

impl<I, O, F, It> Output<I> for FlatMapOperator<I, O, F>
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
