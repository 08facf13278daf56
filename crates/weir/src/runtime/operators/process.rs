//! `process`: a [`ProcessFunction`] over each record.

use std::marker::PhantomData;

use crate::api::functions::ProcessFunction;
use crate::error::TaskError;
use crate::record::Record;
use crate::runtime::operators::OperatorCore;
use crate::runtime::output::{call_user, call_with_collector, user_error, OperatorMetrics, Output};
use crate::runtime::stream_element::StreamEvent;
use crate::runtime::task::OperatorSetup;

/// Runs a process function; calls `end_input` when the input ends.
pub struct ProcessOperator<I, O, P> {
    core: OperatorCore,
    function: P,
    output: Box<dyn Output<O>>,
    opened: bool,
    _input: PhantomData<fn(I)>,
}

impl<I, O, P> ProcessOperator<I, O, P> {
    /// An operator running `function`, emitting into `output`.
    pub fn new(setup: &OperatorSetup, function: P, output: Box<dyn Output<O>>) -> Self {
        Self {
            core: OperatorCore::new(setup),
            function,
            output,
            opened: false,
            _input: PhantomData,
        }
    }
}

impl<I: Record, O: Record, P: ProcessFunction<I, O>> ProcessOperator<I, O, P> {
    fn open_once(&mut self) -> Result<(), TaskError> {
        if !self.opened {
            self.opened = true;
            let (function, runtime) = (&mut self.function, &self.core.runtime);
            call_user(&self.core.name, || function.open(runtime))?
                .map_err(|e| user_error(&self.core.name, e))?;
        }
        Ok(())
    }
}

impl<I: Record, O: Record, P: ProcessFunction<I, O>> Output<I> for ProcessOperator<I, O, P> {
    fn collect(&mut self, record: I) -> Result<(), TaskError> {
        self.open_once()?;
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
        if *event == StreamEvent::EndOfStream {
            self.open_once()?;
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

    fn report_metrics(&self, into: &mut Vec<OperatorMetrics>) {
        into.push(self.core.metrics());
        self.output.report_metrics(into);
    }
}
