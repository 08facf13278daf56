//! `map`: one output per input.

use std::marker::PhantomData;

use crate::error::TaskError;
use crate::record::Record;
use crate::runtime::operators::{pass_events_through, OperatorCore};
use crate::runtime::output::{call_user, Output};
use crate::runtime::task::OperatorSetup;

/// Applies a function to each record.
pub struct MapOperator<I, O, F> {
    core: OperatorCore,
    f: F,
    output: Box<dyn Output<O>>,
    _input: PhantomData<fn(I)>,
}

impl<I, O, F> MapOperator<I, O, F> {
    /// A map with `f`, emitting into `output`.
    pub fn new(setup: &OperatorSetup, f: F, output: Box<dyn Output<O>>) -> Self {
        Self {
            core: OperatorCore::new(setup),
            f,
            output,
            _input: PhantomData,
        }
    }
}

impl<I: Record, O: Record, F: FnMut(I) -> O + Send> Output<I> for MapOperator<I, O, F> {
    #[inline]
    fn collect(&mut self, record: I) -> Result<(), TaskError> {
        self.core.records_in += 1;
        let f = &mut self.f;
        let result = call_user(&self.core.name, || f(record))?;
        self.core.records_out += 1;
        self.output.collect(result)
    }
    pass_events_through!();
}
