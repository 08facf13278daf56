//! `process`: a [`ProcessFunction`] over each record.

use std::marker::PhantomData;

use crate::api::functions::ProcessFunction;
use crate::error::TaskError;
use crate::record::Record;
use crate::runtime::operators::{
    call_hook, notify_hook, snapshot_operator, state_hook, EndOfInput, OperatorCore,
};
use crate::runtime::output::{call_with_collector, OperatorMetrics, Output};
use crate::runtime::snapshot::{CheckpointNotification, OperatorSnapshot};
use crate::runtime::stream_element::StreamEvent;
use crate::runtime::task::OperatorSetup;
use crate::state::operator_state::OperatorStateBackend;

/// Runs a process function with its lifecycle and operator state.
pub struct ProcessOperator<I, O, P> {
    core: OperatorCore,
    function: P,
    operator_state: OperatorStateBackend,
    end_of_input: EndOfInput,
    output: Box<dyn Output<O>>,
    _input: PhantomData<fn(I)>,
}

impl<I, O, P> ProcessOperator<I, O, P> {
    /// An operator running `function`, emitting into `output`.
    pub fn new(setup: &OperatorSetup, function: P, output: Box<dyn Output<O>>) -> Self {
        Self {
            core: OperatorCore::new(setup),
            operator_state: OperatorCore::operator_state(setup),
            end_of_input: EndOfInput::default(),
            function,
            output,
            _input: PhantomData,
        }
    }
}

impl<I: Record, O: Record, P: ProcessFunction<I, O>> Output<I> for ProcessOperator<I, O, P> {
    fn open(&mut self) -> Result<(), TaskError> {
        self.end_of_input = EndOfInput::restore(&self.core, &mut self.operator_state)?;
        let (function, core) = (&mut self.function, &self.core);
        state_hook(core, &mut self.operator_state, None, |ctx| {
            function.initialize_state(ctx)
        })?;
        call_hook(&core.name, || function.open(&core.runtime))?;
        self.output.open()
    }

    fn collect(&mut self, record: I) -> Result<(), TaskError> {
        self.core.records_in += 1;
        let (function, core) = (&mut self.function, &mut self.core);
        call_with_collector(
            &core.name,
            &mut *self.output,
            &mut core.records_out,
            |out| function.process_element(record, &core.runtime, out),
        )
    }

    fn emit_event(&mut self, event: &StreamEvent) -> Result<(), TaskError> {
        if event.ends_input()
            && self
                .end_of_input
                .ends_now(&self.core, &mut self.operator_state)?
        {
            let (function, core) = (&mut self.function, &mut self.core);
            call_with_collector(
                &core.name,
                &mut *self.output,
                &mut core.records_out,
                |out| function.end_input(&core.runtime, out),
            )?;
        }
        self.output.emit_event(event)
    }

    fn flush(&mut self) -> Result<(), TaskError> {
        self.output.flush()
    }

    fn snapshot_state(
        &mut self,
        checkpoint_id: u64,
        into: &mut Vec<OperatorSnapshot>,
    ) -> Result<(), TaskError> {
        let function = &mut self.function;
        snapshot_operator(
            &self.core,
            &mut self.operator_state,
            checkpoint_id,
            None,
            into,
            |ctx| function.snapshot_state(ctx),
        )?;
        self.output.snapshot_state(checkpoint_id, into)
    }

    fn notify_checkpoint(&mut self, notification: CheckpointNotification) -> Result<(), TaskError> {
        notify_hook(
            &self.core.name,
            notification,
            &mut self.function,
            |f, id| f.notify_checkpoint_complete(id),
            |f, id| f.notify_checkpoint_aborted(id),
        )?;
        self.output.notify_checkpoint(notification)
    }

    fn report_metrics(&self, into: &mut Vec<OperatorMetrics>) {
        into.push(self.core.metrics());
        self.output.report_metrics(into);
    }
}
