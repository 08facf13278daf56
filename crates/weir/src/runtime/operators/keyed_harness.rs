//! What a keyed function's operator holds besides its function — keyed state, timers,
//! operator state, the end-of-input mark — and the calls that scope a user function to one
//! key. Shared by `process` on keyed streams and on keyed connected streams.

use std::sync::Arc;

use crate::api::functions::{FunctionStateContext, KeyedContext, KeyedEndContext, RuntimeContext};
use crate::error::{BoxError, StateError, TaskError};
use crate::record::{Key, Record};
use crate::runtime::chain::ChainOutput;
use crate::runtime::key_selector::KeySelector;
use crate::runtime::operators::{
    call_hook, snapshot_operator, state_hook, EndOfInput, OperatorCore,
};
use crate::runtime::output::{call_user, call_with_collector, in_operator, Collector};
use crate::runtime::snapshot::{CheckpointNotification, OperatorSnapshot};
use crate::runtime::stream_element::CheckpointBarrier;
use crate::runtime::task::OperatorSetup;
use crate::state::keyed_state_store::KeyedStateStore;
use crate::state::operator_state::OperatorStateBackend;
use crate::state::timers::{InternalTimerService, TimeDomain};

/// The keyed side of a keyed function's operator.
pub(crate) struct KeyedHarness<K> {
    pub(crate) core: OperatorCore,
    backend: KeyedStateStore<K>,
    operator_state: OperatorStateBackend,
    end_of_input: EndOfInput,
    timers: InternalTimerService<K>,
}

impl<K: Key> KeyedHarness<K> {
    /// The harness of the operator set up by `setup`, with restored state and timers.
    pub(crate) fn new(setup: &OperatorSetup) -> Result<Self, TaskError> {
        let mut backend = OperatorCore::keyed_backend(setup)?;
        let timers = InternalTimerService::open(&mut backend)?;
        Ok(Self {
            core: OperatorCore::new(setup),
            backend,
            operator_state: OperatorCore::operator_state(setup),
            end_of_input: EndOfInput::default(),
            timers,
        })
    }

    fn state_error(&self, e: StateError) -> TaskError {
        in_operator(&self.core.name, e.into())
    }

    /// Passes a checkpoint notification to the keyed state backend.
    pub(crate) fn notify_backend(
        &mut self,
        notification: CheckpointNotification,
    ) -> Result<(), TaskError> {
        super::notify_keyed(&self.core, &mut self.backend, notification)
    }

    /// Restores the end-of-input mark, then runs the function's `initialize_state`.
    pub(crate) fn initialize(
        &mut self,
        initialize: impl FnOnce(&mut FunctionStateContext<'_>) -> Result<(), BoxError>,
    ) -> Result<(), TaskError> {
        self.end_of_input = EndOfInput::restore(&self.core, &mut self.operator_state)?;
        state_hook(&self.core, &mut self.operator_state, None, initialize)
    }

    /// Runs the function's `open`.
    pub(crate) fn open(
        &self,
        open: impl FnOnce(&RuntimeContext) -> Result<(), BoxError>,
    ) -> Result<(), TaskError> {
        let core = &self.core;
        call_hook(&core.name, || open(&core.runtime))
    }

    /// Calls `f` scoped to `key`, with the record's or timer's `timestamp`, emitting into
    /// `out` (and its side outputs).
    pub(crate) fn call_keyed<O: Record>(
        &mut self,
        key: &K,
        key_group: Option<u32>,
        timestamp: Option<i64>,
        time_domain: Option<TimeDomain>,
        out: &mut ChainOutput<'_, O>,
        f: impl FnOnce(&mut KeyedContext<'_, K>, &mut Collector<'_, O>) -> Result<(), BoxError>,
    ) -> Result<(), TaskError> {
        let slot = self
            .backend
            .resolve(key, key_group)
            .map_err(|e| self.state_error(e))?;
        let (core, backend, timers) = (&self.core, &mut self.backend, &mut self.timers);
        let mut side = out.take_side_outputs();
        let result = call_with_collector(&core.name, out, |out| {
            let mut ctx = KeyedContext {
                key,
                slot,
                backend,
                timers,
                runtime: &core.runtime,
                timestamp,
                time_domain,
                side: side.as_deref_mut(),
            };
            f(&mut ctx, out)
        });
        out.return_side_outputs(side);
        result
    }

    /// Processes `record`: its key from `selector`, then `f` scoped to that key with the
    /// record's timestamp; `key_group` is the record's if its sender computed it.
    pub(crate) fn process_keyed<I: 'static, O: Record>(
        &mut self,
        selector: &Arc<dyn KeySelector<I, Key = K>>,
        record: I,
        key_group: Option<u32>,
        out: &mut ChainOutput<'_, O>,
        f: impl FnOnce(I, &mut KeyedContext<'_, K>, &mut Collector<'_, O>) -> Result<(), BoxError>,
    ) -> Result<(), TaskError> {
        // Owned: the function takes the record, and the context lends it the key meanwhile.
        let key = call_user(&self.core.name, || selector.key_ref(&record).into_owned())?;
        let timestamp = out.timestamp();
        self.call_keyed(&key, key_group, timestamp, None, out, |ctx, out| {
            f(record, ctx, out)
        })
    }

    /// Fires every timer of `domain` due at `time`, in time order, including those that the
    /// firing ones register at or before `time`, through `on_timer`. What it emits carries
    /// the timer's timestamp for event time, none for processing time (as in Flink).
    pub(crate) fn fire_timers<O: Record>(
        &mut self,
        domain: TimeDomain,
        time: i64,
        out: &mut ChainOutput<'_, O>,
        mut on_timer: impl FnMut(
            i64,
            &mut KeyedContext<'_, K>,
            &mut Collector<'_, O>,
        ) -> Result<(), BoxError>,
    ) -> Result<(), TaskError> {
        while let Some((timestamp, key)) = self
            .timers
            .pop_due(&mut self.backend, domain, time)
            .map_err(|e| self.state_error(e))?
        {
            out.set_timestamp((domain == TimeDomain::EventTime).then_some(timestamp));
            self.call_keyed(
                &key,
                None,
                Some(timestamp),
                Some(domain),
                out,
                |ctx, out| on_timer(timestamp, ctx, out),
            )?;
        }
        Ok(())
    }

    /// Advances the operator's watermark and fires the event-time timers it passes.
    pub(crate) fn advance_watermark<O: Record>(
        &mut self,
        watermark: i64,
        out: &mut ChainOutput<'_, O>,
        on_timer: impl FnMut(
            i64,
            &mut KeyedContext<'_, K>,
            &mut Collector<'_, O>,
        ) -> Result<(), BoxError>,
    ) -> Result<(), TaskError> {
        self.timers.set_watermark(watermark);
        self.fire_timers(TimeDomain::EventTime, watermark, out, on_timer)
    }

    /// The earliest processing-time timer.
    pub(crate) fn next_processing_time(&self) -> Option<i64> {
        self.timers.next_processing_time()
    }

    /// Ends the input once (not again after a restore of a snapshot taken after it), with
    /// every key visible to `f`.
    pub(crate) fn end_input<O: Record>(
        &mut self,
        out: &mut ChainOutput<'_, O>,
        f: impl FnOnce(&mut KeyedEndContext<'_, K>, &mut Collector<'_, O>) -> Result<(), BoxError>,
    ) -> Result<(), TaskError> {
        if !self
            .end_of_input
            .ends_now(&self.core, &mut self.operator_state)?
        {
            return Ok(());
        }
        let (core, backend, timers) = (&self.core, &mut self.backend, &mut self.timers);
        let mut side = out.take_side_outputs();
        let result = call_with_collector(&core.name, out, |out| {
            let mut ctx = KeyedEndContext {
                backend,
                timers,
                runtime: &core.runtime,
                side: side.as_deref_mut(),
            };
            f(&mut ctx, out)
        });
        out.return_side_outputs(side);
        result
    }

    /// Runs the function's `snapshot_state` and freezes operator and keyed state.
    pub(crate) fn snapshot(
        &mut self,
        barrier: CheckpointBarrier,
        into: &mut Vec<OperatorSnapshot>,
        hook: impl FnOnce(&mut FunctionStateContext<'_>) -> Result<(), BoxError>,
    ) -> Result<(), TaskError> {
        let keyed = self
            .backend
            .snapshot(barrier)
            .map_err(|e| self.state_error(e))?;
        snapshot_operator(
            &self.core,
            &mut self.operator_state,
            barrier.checkpoint_id,
            Some(keyed),
            into,
            hook,
        )
    }
}
