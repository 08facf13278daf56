//! `process` on connected streams: a [`CoProcessFunction`] over two inputs, or, keyed on both
//! sides, a [`KeyedCoProcessFunction`] sharing keyed state and timers across them.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::api::functions::{CoProcessFunction, KeyedCoProcessFunction, ProcessContext};
use crate::error::{BoxError, TaskError};
use crate::record::{Key, Record};
use crate::runtime::chain::ChainOutput;
use crate::runtime::key_selector::KeySelector;
use crate::runtime::operators::keyed_harness::KeyedHarness;
use crate::runtime::operators::{
    function_lifecycle, keyed_function_lifecycle, keyed_function_timer_hooks, EndOfInput,
    OperatorCore, StreamOperator, TwoInputStreamOperator,
};
use crate::runtime::output::{call_with_collector, Collector};
use crate::runtime::stream_element::InputEnd;
use crate::runtime::task::OperatorSetup;
use crate::state::operator_state::OperatorStateBackend;

/// Runs a co-process function with its lifecycle and operator state.
pub struct CoProcessOperator<I1, I2, O, P> {
    core: OperatorCore,
    function: P,
    operator_state: OperatorStateBackend,
    end_of_input: EndOfInput,
    _types: PhantomData<fn(I1, I2) -> O>,
}

impl<I1, I2, O, P> CoProcessOperator<I1, I2, O, P> {
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

    /// Calls `f` with a context over the record being processed.
    fn call<Out: Record>(
        &mut self,
        out: &mut ChainOutput<'_, Out>,
        f: impl FnOnce(&mut P, &mut ProcessContext<'_>, &mut Collector<'_, Out>) -> Result<(), BoxError>,
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
            f(function, &mut ctx, out)
        });
        out.return_side_outputs(side);
        result
    }
}

impl<I1: Record, I2: Record, O: Record, P: CoProcessFunction<I1, I2, O>> StreamOperator
    for CoProcessOperator<I1, I2, O, P>
{
    function_lifecycle!();
}

impl<I1: Record, I2: Record, O: Record, P: CoProcessFunction<I1, I2, O>>
    TwoInputStreamOperator<I1, I2, O> for CoProcessOperator<I1, I2, O, P>
{
    fn process_element1(
        &mut self,
        record: I1,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        self.call(out, |f, ctx, out| f.process_element1(record, ctx, out))
    }

    fn process_element2(
        &mut self,
        record: I2,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        self.call(out, |f, ctx, out| f.process_element2(record, ctx, out))
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

/// Runs a keyed co-process function: both inputs keyed alike, one keyed state and one timer
/// service for both.
pub struct KeyedCoProcessOperator<K, I1, I2, O, P> {
    keyed: KeyedHarness<K>,
    first_key: Arc<dyn KeySelector<I1, Key = K>>,
    second_key: Arc<dyn KeySelector<I2, Key = K>>,
    function: P,
    _output: PhantomData<fn() -> O>,
}

impl<K: Key, I1, I2, O, P> KeyedCoProcessOperator<K, I1, I2, O, P> {
    /// An operator running `function` on inputs keyed by `first_key` and `second_key`.
    pub fn new(
        setup: &OperatorSetup,
        first_key: Arc<dyn KeySelector<I1, Key = K>>,
        second_key: Arc<dyn KeySelector<I2, Key = K>>,
        function: P,
    ) -> Result<Self, TaskError> {
        Ok(Self {
            keyed: KeyedHarness::new(setup)?,
            first_key,
            second_key,
            function,
            _output: PhantomData,
        })
    }
}

impl<K, I1, I2, O, P> StreamOperator for KeyedCoProcessOperator<K, I1, I2, O, P>
where
    K: Key,
    I1: Record,
    I2: Record,
    O: Record,
    P: KeyedCoProcessFunction<K, I1, I2, O>,
{
    keyed_function_lifecycle!();
}

impl<K, I1, I2, O, P> TwoInputStreamOperator<I1, I2, O> for KeyedCoProcessOperator<K, I1, I2, O, P>
where
    K: Key,
    I1: Record,
    I2: Record,
    O: Record,
    P: KeyedCoProcessFunction<K, I1, I2, O>,
{
    fn process_element1(
        &mut self,
        record: I1,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        let function = &mut self.function;
        self.keyed
            .process_keyed(&self.first_key, record, None, out, |record, ctx, out| {
                function.process_element1(record, ctx, out)
            })
    }

    fn process_element2(
        &mut self,
        record: I2,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        let function = &mut self.function;
        self.keyed
            .process_keyed(&self.second_key, record, None, out, |record, ctx, out| {
                function.process_element2(record, ctx, out)
            })
    }

    fn process_element1_in_key_group(
        &mut self,
        record: I1,
        key_group: u32,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        let function = &mut self.function;
        let group = Some(key_group);
        self.keyed
            .process_keyed(&self.first_key, record, group, out, |record, ctx, out| {
                function.process_element1(record, ctx, out)
            })
    }

    fn process_element2_in_key_group(
        &mut self,
        record: I2,
        key_group: u32,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        let function = &mut self.function;
        let group = Some(key_group);
        self.keyed
            .process_keyed(&self.second_key, record, group, out, |record, ctx, out| {
                function.process_element2(record, ctx, out)
            })
    }

    keyed_function_timer_hooks!(O);
}
