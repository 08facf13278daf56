//! What keyed functions see: the current key with its state and timers
//! ([`KeyedContext`]), and every key at the end of the input ([`KeyedEndContext`]).

use crate::api::functions::RuntimeContext;
use crate::api::output_tag::OutputTag;
use crate::error::{BoxError, StateError, TaskError};
use crate::record::Key;
use crate::record::Record;
use crate::runtime::chain::SideOutputs;
use crate::runtime::snapshot::now_millis;
use crate::state::heap_keyed_state_backend::KeyGroupSlot;
use crate::state::keyed_state_store::KeyedStateStore;
use crate::state::state_handles::KeyedState;
use crate::state::timers::{InternalTimerService, TimeDomain};

/// The context of one keyed record: its key, its key group, and the keyed state scoped to
/// that key (see [`crate::ValueState`]).
///
/// ```
/// use weir::prelude::*;
///
/// /// Emits each key with the key group its state lives in.
/// #[derive(Clone)]
/// struct Where;
///
/// impl KeyedProcessFunction<String, String, (String, u32)> for Where {
///     fn process_element(
///         &mut self,
///         _value: String,
///         ctx: &mut KeyedContext<'_, String>,
///         out: &mut Collector<'_, (String, u32)>,
///     ) -> Result<(), BoxError> {
///         out.collect((ctx.current_key().clone(), ctx.key_group()));
///         Ok(())
///     }
/// }
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_max_parallelism(16))?;
/// let groups = env
///     .from_collection(vec!["a".to_string(), "a".to_string()])
///     .key_by(|k: &String| k.clone())
///     .process(Where)
///     .collect();
/// env.execute("key groups")?;
/// let groups = groups.take();
/// assert_eq!(groups.len(), 2);
/// assert_eq!(groups[0], groups[1]);
/// assert!(groups[0].1 < 16);
/// # Ok::<(), WeirError>(())
/// ```
pub struct KeyedContext<'a, K> {
    pub(crate) key: &'a K,
    pub(crate) slot: KeyGroupSlot,
    pub(crate) backend: &'a mut KeyedStateStore<K>,
    pub(crate) timers: &'a mut InternalTimerService<K>,
    pub(crate) runtime: &'a RuntimeContext,
    /// The event timestamp of the record being processed, or the firing timer's.
    pub(crate) timestamp: Option<i64>,
    /// In `on_timer`: the clock of the firing timer.
    pub(crate) time_domain: Option<TimeDomain>,
    /// The operator's side outputs.
    pub(crate) side: Option<&'a mut SideOutputs>,
}

impl<K: Key> KeyedContext<'_, K> {
    /// The event timestamp of the record being processed (`None` if it has none); in
    /// `on_timer`, the timer's timestamp.
    pub fn timestamp(&self) -> Option<i64> {
        self.timestamp
    }
    /// In `on_timer`, whether an event-time or a processing-time timer fired; `None` while
    /// processing a record.
    pub fn time_domain(&self) -> Option<TimeDomain> {
        self.time_domain
    }
    /// Emits `value` to side output `tag`, with the current timestamp.
    pub fn output<T: Record>(&mut self, tag: &OutputTag<T>, value: T) -> Result<(), TaskError> {
        match &mut self.side {
            Some(side) => side.emit(tag.id(), value, self.timestamp),
            None => Ok(()),
        }
    }
    /// The timers of the current key, and the operator's view of time (Flink's
    /// `TimerService`).
    pub fn timer_service(&mut self) -> TimerService<'_, K> {
        TimerService {
            key: self.key,
            slot: self.slot,
            backend: self.backend,
            timers: self.timers,
        }
    }
    /// The key of the record being processed.
    pub fn current_key(&self) -> &K {
        self.key
    }
    /// The key group of the current key.
    pub fn key_group(&self) -> u32 {
        self.slot.key_group
    }
    /// The subtask this function runs in.
    pub fn runtime(&self) -> &RuntimeContext {
        self.runtime
    }
}

/// What a [`KeyedProcessFunction`] sees when its bounded input has ended: the subtask, and
/// its keys with their state, to emit final results per key (what Flink's batch execution
/// does for keyed operators at the end of input).
///
/// ```
/// use weir::prelude::*;
///
/// /// The largest value per key, emitted once at the end of the input.
/// #[derive(Clone)]
/// struct MaxAtEnd {
///     max: ValueState<u64>,
/// }
///
/// impl KeyedProcessFunction<u64, u64, (u64, u64)> for MaxAtEnd {
///     fn process_element(
///         &mut self,
///         value: u64,
///         ctx: &mut KeyedContext<'_, u64>,
///         _out: &mut Collector<'_, (u64, u64)>,
///     ) -> Result<(), BoxError> {
///         let max = self.max.value(ctx)?.map_or(value, |m| m.max(value));
///         Ok(self.max.update(ctx, max)?)
///     }
///     fn end_input(
///         &mut self,
///         ctx: &mut KeyedEndContext<'_, u64>,
///         out: &mut Collector<'_, (u64, u64)>,
///     ) -> Result<(), BoxError> {
///         ctx.for_each_key(&self.max, |key| {
///             if let Some(max) = self.max.value(key)? {
///                 out.collect((*key.current_key(), max));
///             }
///             Ok(())
///         })
///     }
/// }
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))?;
/// let maxima = env
///     .generate(100, |i| i)
///     .key_by(|v: &u64| v % 3)
///     .process(MaxAtEnd { max: ValueState::new("max") })
///     .collect();
/// env.execute("maxima")?;
/// let mut maxima = maxima.take();
/// maxima.sort();
/// assert_eq!(maxima, vec![(0, 99), (1, 97), (2, 98)]);
/// # Ok::<(), WeirError>(())
/// ```
pub struct KeyedEndContext<'a, K> {
    pub(crate) backend: &'a mut KeyedStateStore<K>,
    pub(crate) timers: &'a mut InternalTimerService<K>,
    pub(crate) runtime: &'a RuntimeContext,
    pub(crate) side: Option<&'a mut SideOutputs>,
}

impl<K: Key> KeyedEndContext<'_, K> {
    /// The subtask this function runs in.
    pub fn runtime(&self) -> &RuntimeContext {
        self.runtime
    }

    /// Calls `f` once for every key of this subtask that has a value in `state` (Flink's
    /// `applyToAllKeys`), with a [`KeyedContext`] scoped to that key: read its state, clear
    /// it, emit its result. Keys come in key-group order.
    pub fn for_each_key<S: KeyedState>(
        &mut self,
        state: &S,
        mut f: impl FnMut(&mut KeyedContext<'_, K>) -> Result<(), BoxError>,
    ) -> Result<(), BoxError> {
        for (key, slot) in state.keys(self.backend)? {
            let mut ctx = KeyedContext {
                key: &key,
                slot,
                backend: self.backend,
                timers: self.timers,
                runtime: self.runtime,
                timestamp: None,
                time_domain: None,
                side: self.side.as_deref_mut(),
            };
            f(&mut ctx)?;
        }
        Ok(())
    }
}

/// The timers of the current key and the operator's clocks (Flink's `TimerService`), from
/// [`KeyedContext::timer_service`]. A key has at most one timer per timestamp and domain;
/// timers are keyed state, in every checkpoint and redistributed with their keys.
///
/// ```
/// use weir::prelude::*;
///
/// /// Emits `(key, count)` one second of event time after a key's first record.
/// #[derive(Clone)]
/// struct CountForASecond {
///     count: ValueState<u64>,
/// }
///
/// impl KeyedProcessFunction<String, (String, i64), (String, u64)> for CountForASecond {
///     fn process_element(
///         &mut self,
///         _event: (String, i64),
///         ctx: &mut KeyedContext<'_, String>,
///         _out: &mut Collector<'_, (String, u64)>,
///     ) -> Result<(), BoxError> {
///         let count = self.count.value(ctx)?.unwrap_or(0);
///         if count == 0 {
///             let at = ctx.timestamp().unwrap_or(0) + 1_000;
///             ctx.timer_service().register_event_time_timer(at)?;
///         }
///         Ok(self.count.update(ctx, count + 1)?)
///     }
///     fn on_timer(
///         &mut self,
///         _timestamp: i64,
///         ctx: &mut KeyedContext<'_, String>,
///         out: &mut Collector<'_, (String, u64)>,
///     ) -> Result<(), BoxError> {
///         let count = self.count.value(ctx)?.unwrap_or(0);
///         out.collect((ctx.current_key().clone(), count));
///         Ok(self.count.clear(ctx)?)
///     }
/// }
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// let events = vec![("a".to_string(), 0), ("a".into(), 500), ("b".into(), 700), ("a".into(), 1_500)];
/// let strategy = WatermarkStrategy::for_monotonous_timestamps()
///     .with_timestamp_assigner(|e: &(String, i64), _| e.1);
/// let counts = env
///     .from_source(CollectionSource::new(events), strategy, "events")
///     .key_by(|e: &(String, i64)| e.0.clone())
///     .process(CountForASecond { count: ValueState::new("count") })
///     .collect();
/// env.execute("counts")?;
/// // The collection is read in one go, before the first periodic watermark: every record
/// // is in before the timers fire at the end of the input.
/// assert_eq!(counts.take(), vec![("a".into(), 3), ("b".into(), 1)]);
/// # Ok::<(), WeirError>(())
/// ```
pub struct TimerService<'a, K> {
    key: &'a K,
    slot: KeyGroupSlot,
    backend: &'a mut KeyedStateStore<K>,
    timers: &'a mut InternalTimerService<K>,
}

impl<K: Key> TimerService<'_, K> {
    /// Registers a timer that fires when the watermark reaches `timestamp`.
    pub fn register_event_time_timer(&mut self, timestamp: i64) -> Result<(), StateError> {
        self.timers.register(
            self.backend,
            TimeDomain::EventTime,
            self.key,
            self.slot,
            timestamp,
        )
    }

    /// Registers a timer that fires when the wall clock reaches `timestamp` (milliseconds
    /// since the Unix epoch).
    pub fn register_processing_time_timer(&mut self, timestamp: i64) -> Result<(), StateError> {
        self.timers.register(
            self.backend,
            TimeDomain::ProcessingTime,
            self.key,
            self.slot,
            timestamp,
        )
    }

    /// Deletes the current key's event-time timer at `timestamp`, if any.
    pub fn delete_event_time_timer(&mut self, timestamp: i64) -> Result<(), StateError> {
        self.timers.delete(
            self.backend,
            TimeDomain::EventTime,
            self.key,
            self.slot,
            timestamp,
        )
    }

    /// Deletes the current key's processing-time timer at `timestamp`, if any.
    pub fn delete_processing_time_timer(&mut self, timestamp: i64) -> Result<(), StateError> {
        self.timers.delete(
            self.backend,
            TimeDomain::ProcessingTime,
            self.key,
            self.slot,
            timestamp,
        )
    }

    /// The operator's current watermark (`i64::MIN` before the first).
    pub fn current_watermark(&self) -> i64 {
        self.timers.current_watermark()
    }

    /// The wall clock, in milliseconds since the Unix epoch.
    pub fn current_processing_time(&self) -> i64 {
        i64::try_from(now_millis()).unwrap_or(i64::MAX)
    }
}
