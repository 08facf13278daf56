//! The window operator (Flink's `WindowOperator`): assigns each record of a key to windows,
//! keeps their contents and trigger states as keyed state, fires them on triggers and timers,
//! and removes a window once the watermark passes its end plus the allowed lateness.
//!
//! A key's windows are one keyed value — the list of its windows with their contents — so
//! they are snapshotted and redistributed with the key. Timers are the key's timers; when one
//! fires, every window of the key is offered it, and each trigger decides whether the time is
//! its own.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{StateError, TaskError};
use crate::record::{Key, Record};
use crate::runtime::chain::ChainOutput;
use crate::runtime::key_selector::KeySelector;
use crate::runtime::operators::{
    notify_keyed, snapshot_keyed, OneInputStreamOperator, OperatorCore, StreamOperator,
};
use crate::runtime::output::{call_user, call_with_collector, in_operator, OperatorMetrics};
use crate::runtime::snapshot::{now_millis, CheckpointNotification, OperatorSnapshot};
use crate::runtime::stream_element::CheckpointBarrier;
use crate::runtime::task::OperatorSetup;
use crate::state::backend::StateKind;
use crate::state::heap_keyed_state_backend::KeyGroupSlot;
use crate::state::keyed_state_store::KeyedStateStore;
use crate::state::timers::{InternalTimerService, TimeDomain};
use crate::time::Watermark;
use crate::windowing::assigners::{WindowAssigner, WindowTime};
use crate::windowing::contents::WindowContents;
use crate::windowing::function::WindowContext;
use crate::windowing::trigger::{Trigger, TriggerContext};
use crate::windowing::window::Window;

/// Name of the keyed state holding each key's windows.
pub const WINDOW_STATE: &str = "weir.window-contents";

/// One window of a key: its contents (none after a purge) and its trigger's state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WindowEntry<W, A, S> {
    window: W,
    acc: Option<A>,
    trigger: S,
}

type Entries<W, A, S> = Vec<WindowEntry<W, A, S>>;

/// How late records of event-time windows are handled.
#[derive(Debug, Clone, Copy, Default)]
pub struct Lateness {
    /// How long after its end a window keeps its contents for late records, in milliseconds.
    pub allowed: i64,
}

/// Runs windows of one kind over a keyed stream.
pub struct WindowOperator<K, T, A, Tr, C>
where
    A: WindowAssigner,
    Tr: Trigger<A::Window>,
    C: WindowContents<K, T, A::Window>,
{
    core: OperatorCore,
    key_selector: Arc<dyn KeySelector<T, Key = K>>,
    backend: KeyedStateStore<K>,
    timers: InternalTimerService<K>,
    state: usize,
    assigner: A,
    trigger: Tr,
    contents: C,
    lateness: Lateness,
    late_side_output: Option<Arc<str>>,
    late_records_dropped: u64,
    _types: std::marker::PhantomData<fn(T)>,
}

impl<K, T, A, Tr, C> WindowOperator<K, T, A, Tr, C>
where
    K: Key,
    T: Record,
    A: WindowAssigner,
    Tr: Trigger<A::Window>,
    C: WindowContents<K, T, A::Window>,
{
    /// Windows of `assigner` over records keyed by `key_selector`, fired by `trigger`, with
    /// `contents`; records too late for every window go to side output `late_side_output`,
    /// or are dropped and counted without one.
    pub fn new(
        setup: &OperatorSetup,
        key_selector: Arc<dyn KeySelector<T, Key = K>>,
        assigner: A,
        trigger: Tr,
        contents: C,
        lateness: Lateness,
        late_side_output: Option<Arc<str>>,
    ) -> Result<Self, TaskError> {
        let mut backend = OperatorCore::keyed_backend(setup)?;
        let timers = InternalTimerService::open(&mut backend)?;
        let state = backend.register::<Entries<A::Window, C::Acc, Tr::State>>(
            WINDOW_STATE,
            StateKind::Value,
            None,
        )?;
        Ok(Self {
            core: OperatorCore::new(setup),
            key_selector,
            backend,
            timers,
            state,
            assigner,
            trigger,
            contents,
            lateness,
            late_side_output,
            late_records_dropped: 0,
            _types: std::marker::PhantomData,
        })
    }

    fn is_event_time(&self) -> bool {
        self.assigner.time() == WindowTime::EventTime
    }

    /// When a window's contents are removed: the end plus the allowed lateness in event
    /// time, the end in processing time, never for global windows.
    fn cleanup_time(&self, window: &A::Window) -> Option<i64> {
        match self.assigner.time() {
            WindowTime::EventTime => {
                Some(window.max_timestamp().saturating_add(self.lateness.allowed))
            }
            WindowTime::ProcessingTime => Some(window.max_timestamp()),
            WindowTime::None => None,
        }
    }

    /// The clock of cleanup timers.
    fn cleanup_domain(&self) -> TimeDomain {
        match self.assigner.time() {
            WindowTime::ProcessingTime => TimeDomain::ProcessingTime,
            _ => TimeDomain::EventTime,
        }
    }

    /// Whether an event-time window is past its cleanup time.
    fn is_window_late(&self, window: &A::Window) -> bool {
        self.is_event_time()
            && self
                .cleanup_time(window)
                .is_some_and(|t| t <= self.timers.current_watermark())
    }

    // The entry type spells out the operator's generics; an alias cannot name them here.
    #[allow(clippy::type_complexity)]
    fn takes_entries(
        &mut self,
        key: &K,
        slot: KeyGroupSlot,
    ) -> Result<Entries<A::Window, C::Acc, Tr::State>, TaskError> {
        let state = self.state;
        self.backend
            .take::<Entries<A::Window, C::Acc, Tr::State>>(state, key, slot)
            .map_err(|e| in_operator(&self.core.name, e.into()))
    }

    fn put_entries(
        &mut self,
        key: &K,
        slot: KeyGroupSlot,
        entries: Entries<A::Window, C::Acc, Tr::State>,
    ) -> Result<(), TaskError> {
        let state = self.state;
        let result = if entries.is_empty() {
            self.backend
                .delete::<Entries<A::Window, C::Acc, Tr::State>>(state, key, slot)
        } else {
            self.backend.put(state, key, slot, entries)
        };
        result.map_err(|e| in_operator(&self.core.name, e.into()))
    }

    /// Registers the timers triggers asked for, and the windows' cleanup timers, with one
    /// lookup of the key's timers per clock.
    fn register_timers(
        &mut self,
        key: &K,
        slot: KeyGroupSlot,
        ctx: TriggerContext,
        cleanups: &[i64],
    ) -> Result<(), TaskError> {
        let mut event = ctx.event_timers;
        let mut processing = ctx.processing_timers;
        // The end of event time fires everything anyway.
        let cleanups = cleanups.iter().copied().filter(|c| *c < i64::MAX);
        match self.cleanup_domain() {
            TimeDomain::EventTime => event.extend(cleanups),
            TimeDomain::ProcessingTime => processing.extend(cleanups),
        }
        let name = self.core.name.clone();
        let error = |e: StateError| in_operator(&name, e.into());
        self.timers
            .register_all(&mut self.backend, TimeDomain::EventTime, key, slot, &event)
            .map_err(error)?;
        self.timers
            .register_all(
                &mut self.backend,
                TimeDomain::ProcessingTime,
                key,
                slot,
                &processing,
            )
            .map_err(error)
    }

    fn trigger_context(&self) -> TriggerContext {
        TriggerContext::new(self.timers.current_watermark(), current_processing_time())
    }

    /// Emits the results of `entry`'s window for `key`, stamped with the window's end.
    fn emit(
        &mut self,
        key: &K,
        entry: &WindowEntry<A::Window, C::Acc, Tr::State>,
        out: &mut ChainOutput<'_, C::Out>,
    ) -> Result<(), TaskError> {
        let Some(acc) = &entry.acc else {
            return Ok(());
        };
        let ctx = WindowContext {
            window: &entry.window,
            watermark: self.timers.current_watermark(),
            processing_time: current_processing_time(),
        };
        out.set_timestamp(Some(entry.window.max_timestamp()));
        let contents = &mut self.contents;
        call_with_collector(&self.core.name, out, |out| {
            contents.emit(key, &ctx, acc, out)
        })
    }

    /// Merges `window` into the overlapping windows among `entries` (sessions); returns the
    /// index of the merged entry.
    fn merge_into(
        &mut self,
        entries: &mut Entries<A::Window, C::Acc, Tr::State>,
        window: A::Window,
        ctx: &mut TriggerContext,
    ) -> usize {
        let windows: Vec<A::Window> = entries.iter().map(|e| e.window.clone()).collect();
        let (merged, mut replaced) = self
            .assigner
            .merge(&windows, &window)
            .unwrap_or((window, Vec::new()));
        replaced.sort_unstable();
        let mut removed: Vec<_> = replaced
            .into_iter()
            .rev()
            .map(|i| entries.remove(i))
            .collect();
        // In the order the windows were created, so a process function sees records in order.
        removed.reverse();
        let mut acc: Option<C::Acc> = None;
        let mut states = Vec::with_capacity(removed.len());
        for old in removed {
            states.push(old.trigger);
            acc = match (acc, old.acc) {
                (Some(a), Some(b)) => Some(self.contents.merge(a, b)),
                (a, b) => a.or(b),
            };
        }
        let trigger = if states.is_empty() {
            Tr::State::default()
        } else {
            self.trigger.on_merge(&merged, states, ctx)
        };
        entries.push(WindowEntry {
            window: merged,
            acc,
            trigger,
        });
        entries.len() - 1
    }

    /// A timer of `key` fired at `time` in `domain`: offers it to each of the key's windows,
    /// then removes the windows whose cleanup time it is.
    fn on_timer(
        &mut self,
        key: K,
        time: i64,
        domain: TimeDomain,
        out: &mut ChainOutput<'_, C::Out>,
    ) -> Result<(), TaskError> {
        let slot = self
            .backend
            .resolve_key(&key)
            .map_err(|e| in_operator(&self.core.name, e.into()))?;
        let mut entries = self.takes_entries(&key, slot)?;
        let mut ctx = self.trigger_context();
        let mut index = 0;
        while index < entries.len() {
            let entry = &mut entries[index];
            let result = match domain {
                TimeDomain::EventTime => {
                    self.trigger
                        .on_event_time(time, &entry.window, &mut entry.trigger, &mut ctx)
                }
                TimeDomain::ProcessingTime => self.trigger.on_processing_time(
                    time,
                    &entry.window,
                    &mut entry.trigger,
                    &mut ctx,
                ),
            };
            if result.is_fire() {
                self.emit(&key, &entries[index], out)?;
            }
            if result.is_purge() {
                entries[index].acc = None;
            }
            let cleanup = self.cleanup_time(&entries[index].window);
            if domain == self.cleanup_domain() && cleanup.is_some_and(|c| c <= time) {
                entries.remove(index);
            } else {
                index += 1;
            }
        }
        self.register_timers(&key, slot, ctx, &[])?;
        self.put_entries(&key, slot, entries)
    }

    fn fire_timers(
        &mut self,
        domain: TimeDomain,
        time: i64,
        out: &mut ChainOutput<'_, C::Out>,
    ) -> Result<(), TaskError> {
        while let Some((timestamp, key)) = self
            .timers
            .pop_due(&mut self.backend, domain, time)
            .map_err(|e| in_operator(&self.core.name, e.into()))?
        {
            self.on_timer(key, timestamp, domain, out)?;
        }
        Ok(())
    }

    /// Number of windows held, over all keys (for tests of state cleanup).
    #[cfg(test)]
    pub(crate) fn windows_held(&mut self) -> usize {
        let keys = self
            .backend
            .keys::<Entries<A::Window, C::Acc, Tr::State>>(self.state)
            .expect("registered");
        keys.iter()
            .map(|(k, slot)| {
                self.backend
                    .get::<Entries<A::Window, C::Acc, Tr::State>>(self.state, k, *slot)
                    .expect("readable")
                    .map_or(0, |e| e.len())
            })
            .sum()
    }

    /// Assigns `record` to its windows, folds it in and fires what its triggers say;
    /// `key_group` is the record's if its sender computed it.
    fn process(
        &mut self,
        record: T,
        key_group: Option<u32>,
        out: &mut ChainOutput<'_, C::Out>,
    ) -> Result<(), TaskError> {
        let timestamp = match self.assigner.time() {
            WindowTime::EventTime => out.timestamp().ok_or_else(|| {
                in_operator(
                    &self.core.name,
                    TaskError::MissingTimestamp {
                        what: "an event-time window",
                    },
                )
            })?,
            WindowTime::ProcessingTime => current_processing_time(),
            WindowTime::None => out.timestamp().unwrap_or(i64::MIN),
        };
        let selector = &self.key_selector;
        let key = call_user(&self.core.name, || selector.key_ref(&record).into_owned())?;
        let slot = self
            .backend
            .resolve(&key, key_group)
            .map_err(|e| in_operator(&self.core.name, e.into()))?;
        let windows = self.assigner.assign_windows(timestamp);
        let mut entries = self.takes_entries(&key, slot)?;
        let mut ctx = self.trigger_context();
        let mut cleanups = Vec::new();
        let mut skipped_everywhere = true;
        let mut record = Some(record);
        let last = windows.len().saturating_sub(1);
        for (n, window) in windows.into_iter().enumerate() {
            let index = if self.assigner.is_merging() {
                self.merge_into(&mut entries, window, &mut ctx)
            } else {
                match entries.iter().position(|e| e.window == window) {
                    Some(index) => index,
                    None => {
                        entries.push(WindowEntry {
                            window,
                            acc: None,
                            trigger: Tr::State::default(),
                        });
                        entries.len() - 1
                    }
                }
            };
            if self.is_window_late(&entries[index].window) {
                // Past its cleanup: the window is gone (Flink retires it, merged or not).
                entries.remove(index);
                continue;
            }
            skipped_everywhere = false;
            let value = if n == last {
                record.take()
            } else {
                record.clone()
            };
            let Some(value) = value else {
                continue;
            };
            let entry = &mut entries[index];
            entry.acc = Some(self.contents.add(entry.acc.take(), value));
            let result =
                self.trigger
                    .on_element(timestamp, &entry.window, &mut entry.trigger, &mut ctx);
            cleanups.extend(self.cleanup_time(&entries[index].window));
            if result.is_fire() {
                self.emit(&key, &entries[index], out)?;
            }
            if result.is_purge() {
                entries[index].acc = None;
            }
        }
        let late = skipped_everywhere
            && self.is_event_time()
            && timestamp.saturating_add(self.lateness.allowed) <= self.timers.current_watermark();
        if late {
            match (&self.late_side_output, record) {
                (Some(tag), Some(record)) => out.emit_side(tag, record)?,
                _ => self.late_records_dropped += 1,
            }
        }
        self.register_timers(&key, slot, ctx, &cleanups)?;
        self.put_entries(&key, slot, entries)
    }
}

fn current_processing_time() -> i64 {
    i64::try_from(now_millis()).unwrap_or(i64::MAX)
}

impl<K, T, A, Tr, C> StreamOperator for WindowOperator<K, T, A, Tr, C>
where
    K: Key,
    T: Record,
    A: WindowAssigner,
    Tr: Trigger<A::Window>,
    C: WindowContents<K, T, A::Window>,
{
    fn snapshot_state(
        &mut self,
        barrier: CheckpointBarrier,
        into: &mut Vec<OperatorSnapshot>,
    ) -> Result<(), TaskError> {
        snapshot_keyed(&self.core, &mut self.backend, barrier, into)
    }

    fn notify_checkpoint(&mut self, notification: CheckpointNotification) -> Result<(), TaskError> {
        notify_keyed(&self.core, &mut self.backend, notification)
    }

    fn add_metrics(&self, metrics: &mut OperatorMetrics) {
        metrics.late_records_dropped = self.late_records_dropped;
    }
}

impl<K, T, A, Tr, C> OneInputStreamOperator<T, C::Out> for WindowOperator<K, T, A, Tr, C>
where
    K: Key,
    T: Record,
    A: WindowAssigner,
    Tr: Trigger<A::Window>,
    C: WindowContents<K, T, A::Window>,
{
    fn process_element(
        &mut self,
        record: T,
        out: &mut ChainOutput<'_, C::Out>,
    ) -> Result<(), TaskError> {
        self.process(record, None, out)
    }

    fn process_element_in_key_group(
        &mut self,
        record: T,
        key_group: u32,
        out: &mut ChainOutput<'_, C::Out>,
    ) -> Result<(), TaskError> {
        self.process(record, Some(key_group), out)
    }

    fn process_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut ChainOutput<'_, C::Out>,
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
        out: &mut ChainOutput<'_, C::Out>,
    ) -> Result<(), TaskError> {
        self.fire_timers(TimeDomain::ProcessingTime, time, out)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::runtime::batch::RecordBatch;
    use crate::runtime::key_selector::FnKeySelector;
    use crate::windowing::contents::ReduceContents;
    use crate::windowing::{EventTimeTrigger, TumblingEventTimeWindows};

    type Op = WindowOperator<
        u64,
        (u64, u64),
        TumblingEventTimeWindows,
        EventTimeTrigger,
        ReduceContents<fn((u64, u64), (u64, u64)) -> (u64, u64)>,
    >;

    fn sum(a: (u64, u64), b: (u64, u64)) -> (u64, u64) {
        (a.0, a.1 + b.1)
    }

    /// Drives the operator directly, with an output that keeps nothing.
    fn drive(op: &mut Op, f: impl FnOnce(&mut Op, &mut ChainOutput<'_, (u64, u64)>)) -> u64 {
        let (mut buffer, mut emitted) = (RecordBatch::default(), 0);
        let mut out = ChainOutput::new(&mut buffer, &[], &mut [], &mut emitted, 64);
        f(op, &mut out);
        out.flush().unwrap();
        emitted
    }

    #[test]
    fn window_state_is_removed_once_the_watermark_passes_end_plus_lateness() {
        let setup = OperatorSetup::for_test(0, "windows");
        let mut op: Op = WindowOperator::new(
            &setup,
            Arc::new(FnKeySelector::new(|r: &(u64, u64)| r.0)),
            TumblingEventTimeWindows::of(Duration::from_millis(10)),
            EventTimeTrigger,
            ReduceContents::new(sum as fn(_, _) -> _),
            Lateness { allowed: 5 },
            None,
        )
        .unwrap();
        drive(&mut op, |op, out| {
            for (key, t) in [(1, 1), (2, 3), (1, 12), (1, 25)] {
                out.set_timestamp(Some(t));
                op.process_element((key, 1), out).unwrap();
            }
        });
        assert_eq!(op.windows_held(), 4);
        // [0, 10) fires at 9 for both keys, but stays for late records until 14.
        let fired = drive(&mut op, |op, out| {
            op.process_watermark(Watermark::new(9), out).unwrap()
        });
        assert_eq!((fired, op.windows_held()), (2, 4));
        drive(&mut op, |op, out| {
            op.process_watermark(Watermark::new(14), out).unwrap()
        });
        assert_eq!(op.windows_held(), 2);
        // A record for the removed window is late: dropped and counted.
        drive(&mut op, |op, out| {
            out.set_timestamp(Some(4));
            op.process_element((1, 1), out).unwrap();
        });
        assert_eq!((op.windows_held(), op.late_records_dropped), (2, 1));
        let fired = drive(&mut op, |op, out| {
            op.process_watermark(Watermark::MAX, out).unwrap()
        });
        assert_eq!((fired, op.windows_held()), (2, 0));
    }
}
