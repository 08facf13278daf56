//! `process` on a keyed stream: a [`KeyedProcessFunction`] with the current key and keyed
//! state.

use std::sync::Arc;

use crate::api::functions::{KeyedContext, KeyedProcessFunction};
use crate::error::TaskError;
use crate::record::{Key, Record};
use crate::runtime::key_selector::KeySelector;
use crate::runtime::operators::OperatorCore;
use crate::runtime::output::{
    call_user, call_with_collector, in_operator, user_error, OperatorMetrics, Output,
};
use crate::runtime::stream_element::StreamEvent;
use crate::runtime::task::OperatorSetup;
use crate::state::heap_keyed_state_backend::HeapKeyedStateBackend;

/// Runs a keyed process function over the key groups of its subtask.
pub struct KeyedProcessOperator<K, I, O, P> {
    core: OperatorCore,
    key_selector: Arc<dyn KeySelector<I, Key = K>>,
    backend: HeapKeyedStateBackend<K>,
    function: P,
    output: Box<dyn Output<O>>,
    opened: bool,
}

impl<K: Key, I, O, P> KeyedProcessOperator<K, I, O, P> {
    /// An operator running `function` on records keyed by `key_selector`.
    pub fn new(
        setup: &OperatorSetup,
        key_selector: Arc<dyn KeySelector<I, Key = K>>,
        function: P,
        output: Box<dyn Output<O>>,
    ) -> Self {
        Self {
            core: OperatorCore::new(setup),
            key_selector,
            backend: HeapKeyedStateBackend::new(setup.max_parallelism, setup.key_groups),
            function,
            output,
            opened: false,
        }
    }
}

impl<K: Key, I: Record, O: Record, P: KeyedProcessFunction<K, I, O>>
    KeyedProcessOperator<K, I, O, P>
{
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

impl<K: Key, I: Record, O: Record, P: KeyedProcessFunction<K, I, O>> Output<I>
    for KeyedProcessOperator<K, I, O, P>
{
    fn collect(&mut self, record: I) -> Result<(), TaskError> {
        self.open_once()?;
        self.core.records_in += 1;
        let selector = &self.key_selector;
        let key = call_user(&self.core.name, || selector.key(&record))?;
        let slot = self
            .backend
            .resolve_key(&key)
            .map_err(|e| in_operator(&self.core.name, e.into()))?;
        let (function, core, backend) = (&mut self.function, &mut self.core, &mut self.backend);
        call_with_collector(
            &core.name,
            &mut *self.output,
            &mut core.records_out,
            |out| {
                let mut ctx = KeyedContext {
                    key: &key,
                    slot,
                    backend,
                    runtime: &core.runtime,
                };
                function.process_element(record, &mut ctx, out)
            },
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
