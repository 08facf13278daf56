//! `process` on a keyed stream: a [`KeyedProcessFunction`] with the current key, keyed state,
//! timers and operator state.

use std::sync::Arc;

use crate::api::functions::KeyedProcessFunction;
use crate::error::TaskError;
use crate::record::{Key, Record};
use crate::runtime::chain::ChainOutput;
use crate::runtime::key_selector::KeySelector;
use crate::runtime::operators::keyed_harness::KeyedHarness;
use crate::runtime::operators::{
    keyed_function_lifecycle, keyed_function_timer_hooks, OneInputStreamOperator, StreamOperator,
};
use crate::runtime::task::OperatorSetup;

/// Runs a keyed process function over the key groups of its subtask.
pub struct KeyedProcessOperator<K, I, O, P> {
    keyed: KeyedHarness<K>,
    key_selector: Arc<dyn KeySelector<I, Key = K>>,
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
            keyed: KeyedHarness::new(setup)?,
            key_selector,
            function,
            _output: std::marker::PhantomData,
        })
    }
}

impl<K: Key, I: Record, O: Record, P: KeyedProcessFunction<K, I, O>> StreamOperator
    for KeyedProcessOperator<K, I, O, P>
{
    keyed_function_lifecycle!();
}

impl<K: Key, I: Record, O: Record, P: KeyedProcessFunction<K, I, O>> OneInputStreamOperator<I, O>
    for KeyedProcessOperator<K, I, O, P>
{
    fn process_element(
        &mut self,
        record: I,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        let function = &mut self.function;
        self.keyed
            .process_keyed(&self.key_selector, record, None, out, |record, ctx, out| {
                function.process_element(record, ctx, out)
            })
    }

    fn process_element_in_key_group(
        &mut self,
        record: I,
        key_group: u32,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        let function = &mut self.function;
        let group = Some(key_group);
        self.keyed.process_keyed(
            &self.key_selector,
            record,
            group,
            out,
            |record, ctx, out| function.process_element(record, ctx, out),
        )
    }

    keyed_function_timer_hooks!(O);
}
