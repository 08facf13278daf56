//! `process` on a keyed stream: a [`KeyedProcessFunction`] with the current key, keyed state,
//! timers and operator state.

use std::sync::Arc;

use crate::api::functions::KeyedProcessFunction;
use crate::error::TaskError;
use crate::record::{Key, Record};
use crate::runtime::chain::ChainOutput;
use crate::runtime::key_selector::KeySelector;
use crate::runtime::operators::keyed_harness::KeyedHarness;
use crate::runtime::operators::{keyed_function_lifecycle, OneInputStreamOperator, StreamOperator};
use crate::runtime::output::call_user;
use crate::runtime::stream_element::InputEnd;
use crate::runtime::task::OperatorSetup;
use crate::state::timers::TimeDomain;
use crate::time::Watermark;

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
        let selector = &self.key_selector;
        let key = call_user(&self.keyed.core.name, || selector.key(&record))?;
        let function = &mut self.function;
        let timestamp = out.timestamp();
        self.keyed
            .call_keyed(&key, timestamp, None, out, |ctx, out| {
                function.process_element(record, ctx, out)
            })
    }

    fn process_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        let function = &mut self.function;
        self.keyed
            .advance_watermark(watermark.timestamp, out, |t, ctx, out| {
                function.on_timer(t, ctx, out)
            })?;
        out.emit_watermark(watermark)
    }

    fn next_processing_time(&self) -> Option<i64> {
        self.keyed.next_processing_time()
    }

    fn on_processing_time(
        &mut self,
        time: i64,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        let function = &mut self.function;
        self.keyed
            .fire_timers(TimeDomain::ProcessingTime, time, out, |t, ctx, out| {
                function.on_timer(t, ctx, out)
            })
    }

    fn end_input(
        &mut self,
        _cause: InputEnd,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        let function = &mut self.function;
        self.keyed
            .end_input(out, |ctx, out| function.end_input(ctx, out))
    }
}
