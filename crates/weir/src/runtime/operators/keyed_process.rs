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
use crate::state::timers::{InternalTimerService, TimeDomain};
use crate::time::Watermark;

/// Runs a keyed process function over the key groups of its subtask.
pub struct KeyedProcessOperator<K, I, O, P> {
    core: OperatorCore,
    key_selector: Arc<dyn KeySelector<I, Key = K>>,
    backend: HeapKeyedStateBackend<K>,
    operator_state: OperatorStateBackend,
    end_of_input: EndOfInput,
    timers: InternalTimerService<K>,
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
        let mut backend = OperatorCore::keyed_backend(setup)?;
        let timers = InternalTimerService::open(&mut backend)?;
        Ok(Self {
            core: OperatorCore::new(setup),
            key_selector,
            backend,
            operator_state: OperatorCore::operator_state(setup),
            end_of_input: EndOfInput::default(),
            timers,
            function,
            _output: std::marker::PhantomData,
        })
    }
}

impl<K: Key, I: Record, O: Record, P: KeyedProcessFunction<K, I, O>>
    KeyedProcessOperator<K, I, O, P>
{
    /// Fires every timer of `domain` due at `time`, in time order, including those that
    /// the firing ones register at or before `time`. What `on_timer` emits carries the
    /// timer's timestamp for event time, none for processing time (as in Flink).
    fn fire_timers(
        &mut self,
        domain: TimeDomain,
        time: i64,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        let name = &self.core.name;
        let state_error = |e: crate::error::StateError| in_operator(name, e.into());
        while let Some((timestamp, key)) = self
            .timers
            .pop_due(&mut self.backend, domain, time)
            .map_err(state_error)?
        {
            let slot = self.backend.resolve_key(&key).map_err(state_error)?;
            let (function, core) = (&mut self.function, &self.core);
            let (backend, timers) = (&mut self.backend, &mut self.timers);
            out.set_timestamp((domain == TimeDomain::EventTime).then_some(timestamp));
            let mut side = out.take_side_outputs();
            let result = call_with_collector(&core.name, out, |out| {
                let mut ctx = KeyedContext {
                    key: &key,
                    slot,
                    backend,
                    timers,
                    runtime: &core.runtime,
                    timestamp: Some(timestamp),
                    time_domain: Some(domain),
                    side: side.as_deref_mut(),
                };
                function.on_timer(timestamp, &mut ctx, out)
            });
            out.return_side_outputs(side);
            result?;
        }
        Ok(())
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
        let (function, core) = (&mut self.function, &self.core);
        let (backend, timers) = (&mut self.backend, &mut self.timers);
        let timestamp = out.timestamp();
        let mut side = out.take_side_outputs();
        let result = call_with_collector(&core.name, out, |out| {
            let mut ctx = KeyedContext {
                key: &key,
                slot,
                backend,
                timers,
                runtime: &core.runtime,
                timestamp,
                time_domain: None,
                side: side.as_deref_mut(),
            };
            function.process_element(record, &mut ctx, out)
        });
        out.return_side_outputs(side);
        result
    }

    fn process_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        self.timers.set_watermark(watermark.timestamp);
        self.fire_timers(TimeDomain::EventTime, watermark.timestamp, out)?;
        out.emit_watermark(watermark)
    }

    fn next_processing_time(&self) -> Option<i64> {
        self.timers.next_processing_time()
    }

    fn on_processing_time(
        &mut self,
        time: i64,
        out: &mut ChainOutput<'_, O>,
    ) -> Result<(), TaskError> {
        self.fire_timers(TimeDomain::ProcessingTime, time, out)
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
            let (backend, timers) = (&mut self.backend, &mut self.timers);
            let mut side = out.take_side_outputs();
            let result = call_with_collector(&core.name, out, |out| {
                let mut ctx = KeyedEndContext {
                    backend,
                    timers,
                    runtime: &core.runtime,
                    side: side.as_deref_mut(),
                };
                function.end_input(&mut ctx, out)
            });
            out.return_side_outputs(side);
            result?;
        }
        Ok(())
    }
}
