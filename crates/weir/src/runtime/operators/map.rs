//! `map`: one output per input.

use std::marker::PhantomData;

use crate::error::TaskError;
use crate::record::Record;
use crate::runtime::chain::ChainOutput;
use crate::runtime::operators::{OneInputStreamOperator, OperatorCore, StreamOperator};
use crate::runtime::output::call_user;
use crate::runtime::task::OperatorSetup;

/// Applies a function to each record.
pub struct MapOperator<I, O, F> {
    core: OperatorCore,
    f: F,
    _types: PhantomData<fn(I) -> O>,
}

impl<I, O, F> MapOperator<I, O, F> {
    /// A map with `f`.
    pub fn new(setup: &OperatorSetup, f: F) -> Self {
        Self {
            core: OperatorCore::new(setup),
            f,
            _types: PhantomData,
        }
    }
}

impl<I, O, F: Send> StreamOperator for MapOperator<I, O, F> {}

impl<I: Record, O: Record, F: FnMut(I) -> O + Send> OneInputStreamOperator<I, O>
    for MapOperator<I, O, F>
{
    #[inline]
    fn process_element(
        &mut self,
        record: I,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        let f = &mut self.f;
        let result = call_user(&self.core.name, || f(record))?;
        out.collect(result)
    }
}
