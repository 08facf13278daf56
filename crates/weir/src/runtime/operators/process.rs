//! `process`: a [`ProcessFunction`] over each record.

use std::marker::PhantomData;

use crate::api::functions::{ProcessContext, ProcessFunction};
use crate::error::TaskError;
use crate::record::Record;
use crate::runtime::chain::ChainOutput;
use crate::runtime::operators::{
    function_lifecycle, EndOfInput, OneInputStreamOperator, OperatorCore, StreamOperator,
};
use crate::runtime::output::call_with_collector;
use crate::runtime::stream_element::InputEnd;
use crate::runtime::task::OperatorSetup;
use crate::state::operator_state::OperatorStateBackend;

/// Runs a process function with its lifecycle and operator state.
pub struct ProcessOperator<I, O, P> {
    core: OperatorCore,
    function: P,
    operator_state: OperatorStateBackend,
    end_of_input: EndOfInput,
    _types: PhantomData<fn(I) -> O>,
}

impl<I, O, P> ProcessOperator<I, O, P> {
    /// An operator running `function`.
    pub fn new(setup: &OperatorSetup, function: P) -> Self {
        Self {
            core: OperatorCore::new(setup),
            operator_state: OperatorCore::operator_state(setup),
            end_of_input: EndOfInput::default(),
            function,
            _types: PhantomData,
        }
    }
}

impl<I: Record, O: Record, P: ProcessFunction<I, O>> StreamOperator for ProcessOperator<I, O, P> {
    function_lifecycle!();
}

impl<I: Record, O: Record, P: ProcessFunction<I, O>> OneInputStreamOperator<I, O>
    for ProcessOperator<I, O, P>
{
    fn process_element(
        &mut self,
        record: I,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        let (function, core) = (&mut self.function, &self.core);
        let timestamp = out.timestamp();
        let mut side = out.take_side_outputs();
        let result = call_with_collector(&core.name, out, |out| {
            let mut ctx = ProcessContext {
                runtime: &core.runtime,
                timestamp,
                side: side.as_deref_mut(),
            };
            function.process_element(record, &mut ctx, out)
        });
        out.return_side_outputs(side);
        result
    }

    fn end_input(
        &mut self,
        _cause: InputEnd,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        if self
            .end_of_input
            .ends_now(&self.core, &mut self.operator_state)?
        {
            let (function, core) = (&mut self.function, &self.core);
            call_with_collector(&core.name, out, |out| {
                function.end_input(&core.runtime, out)
            })?;
        }
        Ok(())
    }
}
