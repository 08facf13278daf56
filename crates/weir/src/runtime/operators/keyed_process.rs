//! `process` on a keyed stream: a [`KeyedProcessFunction`] with the current key, keyed state
//! and operator state.

use std::sync::Arc;

use crate::api::functions::{KeyedContext, KeyedEndContext, KeyedProcessFunction};
use crate::error::TaskError;
use crate::record::{Key, Record};
use crate::runtime::chain::ChainOutput;
use crate::runtime::key_selector::KeySelector;
use crate::runtime::operators::{
    call_hook, notify_hook, snapshot_operator, state_hook, EndOfInput, OneInputStreamOperator,
    OperatorCore, StreamOperator,
};
use crate::runtime::output::{call_user, call_with_collector, in_operator};
use crate::runtime::snapshot::{CheckpointNotification, OperatorSnapshot};
use crate::runtime::stream_element::InputEnd;
use crate::runtime::task::OperatorSetup;
use crate::state::heap_keyed_state_backend::HeapKeyedStateBackend;
use crate::state::operator_state::OperatorStateBackend;

/// Runs a keyed process function over the key groups of its subtask.
pub struct KeyedProcessOperator<K, I, O, P> {
    core: OperatorCore,
    key_selector: Arc<dyn KeySelector<I, Key = K>>,
    backend: HeapKeyedStateBackend<K>,
    operator_state: OperatorStateBackend,
    end_of_input: EndOfInput,
    function: P,
    _output: std::marker::PhantomData<fn() -> O>,
}

impl<K: Key, I, O, P> KeyedProcessOperator<K, I, O, P> {
    /// An operator running `function` on records keyed by `key_selector`.
    pub fn new(
        setup: &OperatorSetup,
        key_selector: Arc<dyn KeySelector<I, Key = K>>,
        function: P,
    ) -> Result<Self, TaskError> {
        Ok(Self {
            core: OperatorCore::new(setup),
            key_selector,
            backend: OperatorCore::keyed_backend(setup)?,
            operator_state: OperatorCore::operator_state(setup),
            end_of_input: EndOfInput::default(),
            function,
            _output: std::marker::PhantomData,
        })
    }
}

impl<K: Key, I: Record, O: Record, P: KeyedProcessFunction<K, I, O>> StreamOperator
    for KeyedProcessOperator<K, I, O, P>
{
    fn open(&mut self) -> Result<(), TaskError> {
        self.end_of_input = EndOfInput::restore(&self.core, &mut self.operator_state)?;
        let (function, core) = (&mut self.function, &self.core);
        state_hook(core, &mut self.operator_state, None, |ctx| {
            function.initialize_state(ctx)
        })?;
        call_hook(&core.name, || function.open(&core.runtime))
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
            Some(self.backend.snapshot()),
            into,
            |ctx| function.snapshot_state(ctx),
        )
    }

    fn notify_checkpoint(&mut self, notification: CheckpointNotification) -> Result<(), TaskError> {
        notify_hook(
            &self.core.name,
            notification,
            &mut self.function,
            |f, id| f.notify_checkpoint_complete(id),
            |f, id| f.notify_checkpoint_aborted(id),
        )
    }
}

impl<K: Key, I: Record, O: Record, P: KeyedProcessFunction<K, I, O>> OneInputStreamOperator<I, O>
    for KeyedProcessOperator<K, I, O, P>
{
    fn process_element(
        &mut self,
        record: I,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        let selector = &self.key_selector;
        let key = call_user(&self.core.name, || selector.key(&record))?;
        let slot = self
            .backend
            .resolve_key(&key)
            .map_err(|e| in_operator(&self.core.name, e.into()))?;
        let (function, core, backend) = (&mut self.function, &self.core, &mut self.backend);
        call_with_collector(&core.name, out, |out| {
            let mut ctx = KeyedContext {
                key: &key,
                slot,
                backend,
                runtime: &core.runtime,
            };
            function.process_element(record, &mut ctx, out)
        })
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
            let (function, core, backend) = (&mut self.function, &self.core, &mut self.backend);
            call_with_collector(&core.name, out, |out| {
                let mut ctx = KeyedEndContext {
                    backend,
                    runtime: &core.runtime,
                };
                function.end_input(&mut ctx, out)
            })?;
        }
        Ok(())
    }
}
