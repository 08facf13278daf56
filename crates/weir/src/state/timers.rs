//! Timers of a keyed operator (Flink's `InternalTimerService`): event-time and
//! processing-time timers, at most one per key and timestamp. The timers of each key are
//! keyed state, so they are snapshotted per key group and redistributed on rescaling with
//! the rest of the state; an in-memory index by timestamp, rebuilt on restore, finds the due
//! ones.

use std::collections::BTreeMap;

use crate::error::StateError;
use crate::record::Key;
use crate::state::backend::StateKind;
use crate::state::heap_keyed_state_backend::KeyGroupSlot;
use crate::state::keyed_state_store::KeyedStateStore;

/// Which clock a timer follows; `on_timer` reads it from
/// [`KeyedContext::time_domain`](crate::api::functions::KeyedContext::time_domain).
///
/// ```
/// use weir::prelude::*;
///
/// /// Reports which kind of timer fired for each key.
/// #[derive(Clone)]
/// struct Both;
///
/// impl KeyedProcessFunction<u64, u64, (u64, TimeDomain)> for Both {
///     fn process_element(
///         &mut self,
///         value: u64,
///         ctx: &mut KeyedContext<'_, u64>,
///         _out: &mut Collector<'_, (u64, TimeDomain)>,
///     ) -> Result<(), BoxError> {
///         // Fires at the end of the input, when event time ends.
///         Ok(ctx.timer_service().register_event_time_timer(value as i64)?)
///     }
///     fn on_timer(
///         &mut self,
///         _timestamp: i64,
///         ctx: &mut KeyedContext<'_, u64>,
///         out: &mut Collector<'_, (u64, TimeDomain)>,
///     ) -> Result<(), BoxError> {
///         out.collect((*ctx.current_key(), ctx.time_domain().expect("in on_timer")));
///         Ok(())
///     }
/// }
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// let fired = env.generate(2, |i| i).key_by(|i: &u64| *i).process(Both).collect();
/// env.execute("domains")?;
/// assert_eq!(fired.take(), vec![(0, TimeDomain::EventTime), (1, TimeDomain::EventTime)]);
/// # Ok::<(), WeirError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum TimeDomain {
    /// Event time: the timer fires when the watermark reaches its timestamp.
    EventTime,
    /// Processing time: the timer fires when the wall clock reaches its timestamp.
    ProcessingTime,
}

/// Names of the keyed states holding each key's timer timestamps.
const EVENT_TIMERS: &str = "weir.timers.event-time";
const PROCESSING_TIMERS: &str = "weir.timers.processing-time";

/// One domain's timers: per key its timestamps (in the backend), and the index.
struct TimerQueue<K> {
    state: usize,
    by_time: BTreeMap<i64, Vec<K>>,
    len: usize,
}

impl<K: Key> TimerQueue<K> {
    fn open(backend: &mut KeyedStateStore<K>, name: &str) -> Result<Self, StateError> {
        let state = backend.register::<Vec<i64>>(name, StateKind::Value, None)?;
        let mut by_time: BTreeMap<i64, Vec<K>> = BTreeMap::new();
        let mut len = 0;
        for (key, slot) in backend.keys::<Vec<i64>>(state)? {
            for timestamp in backend
                .get::<Vec<i64>>(state, &key, slot)?
                .into_iter()
                .flatten()
            {
                by_time.entry(timestamp).or_default().push(key.clone());
                len += 1;
            }
        }
        Ok(Self {
            state,
            by_time,
            len,
        })
    }

    fn register(
        &mut self,
        backend: &mut KeyedStateStore<K>,
        key: &K,
        slot: KeyGroupSlot,
        timestamp: i64,
    ) -> Result<(), StateError> {
        self.register_all(backend, key, slot, &[timestamp])
    }

    /// Registers `key`'s timers at `timestamps` with one lookup of the key's timers.
    fn register_all(
        &mut self,
        backend: &mut KeyedStateStore<K>,
        key: &K,
        slot: KeyGroupSlot,
        timestamps: &[i64],
    ) -> Result<(), StateError> {
        let mut added = Vec::new();
        let existed = backend.modify::<Vec<i64>, _>(self.state, key, slot, |existing| {
            let Some(existing) = existing else {
                return false;
            };
            for &t in timestamps {
                if !existing.contains(&t) {
                    existing.push(t);
                    added.push(t);
                }
            }
            true
        })?;
        match existed {
            true => {}
            false => {
                let mut fresh: Vec<i64> = Vec::with_capacity(timestamps.len());
                for &t in timestamps {
                    if !fresh.contains(&t) {
                        fresh.push(t);
                    }
                }
                added.clone_from(&fresh);
                backend.put(self.state, key, slot, fresh)?;
            }
        }
        for t in added {
            self.by_time.entry(t).or_default().push(key.clone());
            self.len += 1;
        }
        Ok(())
    }

    /// Removes `key`'s timer at `timestamp` from the key's state; whether it was there.
    fn remove_from_state(
        &mut self,
        backend: &mut KeyedStateStore<K>,
        key: &K,
        slot: KeyGroupSlot,
        timestamp: i64,
    ) -> Result<bool, StateError> {
        let (removed, now_empty) =
            backend.modify::<Vec<i64>, _>(self.state, key, slot, |timestamps| {
                let Some(timestamps) = timestamps else {
                    return (false, false);
                };
                match timestamps.iter().position(|t| *t == timestamp) {
                    Some(at) => {
                        timestamps.swap_remove(at);
                        (true, timestamps.is_empty())
                    }
                    None => (false, false),
                }
            })?;
        if now_empty {
            backend.delete::<Vec<i64>>(self.state, key, slot)?;
        }
        Ok(removed)
    }

    fn delete(
        &mut self,
        backend: &mut KeyedStateStore<K>,
        key: &K,
        slot: KeyGroupSlot,
        timestamp: i64,
    ) -> Result<(), StateError> {
        if !self.remove_from_state(backend, key, slot, timestamp)? {
            return Ok(());
        }
        if let Some(keys) = self.by_time.get_mut(&timestamp) {
            if let Some(at) = keys.iter().position(|k| k == key) {
                keys.swap_remove(at);
                self.len -= 1;
            }
            if keys.is_empty() {
                self.by_time.remove(&timestamp);
            }
        }
        Ok(())
    }

    /// Takes the earliest timer at or before `time`, if any.
    fn pop_due(
        &mut self,
        backend: &mut KeyedStateStore<K>,
        time: i64,
    ) -> Result<Option<(i64, K)>, StateError> {
        let Some(mut entry) = self.by_time.first_entry() else {
            return Ok(None);
        };
        let timestamp = *entry.key();
        if timestamp > time {
            return Ok(None);
        }
        // Keys fire in the order their timers were registered.
        let keys = entry.get_mut();
        let key = keys.remove(0);
        if keys.is_empty() {
            entry.remove();
        }
        self.len -= 1;
        let slot = backend.resolve_key(&key)?;
        self.remove_from_state(backend, &key, slot, timestamp)?;
        Ok(Some((timestamp, key)))
    }

    fn earliest(&self) -> Option<i64> {
        self.by_time.keys().next().copied()
    }
}

/// The event-time and processing-time timers of one keyed operator subtask, and its view of
/// event time.
pub struct InternalTimerService<K> {
    event: TimerQueue<K>,
    processing: TimerQueue<K>,
    watermark: i64,
}

impl<K: Key> InternalTimerService<K> {
    /// The timers kept in `backend` (restored ones included).
    pub fn open(backend: &mut KeyedStateStore<K>) -> Result<Self, StateError> {
        Ok(Self {
            event: TimerQueue::open(backend, EVENT_TIMERS)?,
            processing: TimerQueue::open(backend, PROCESSING_TIMERS)?,
            watermark: i64::MIN,
        })
    }

    fn queue(&mut self, domain: TimeDomain) -> &mut TimerQueue<K> {
        match domain {
            TimeDomain::EventTime => &mut self.event,
            TimeDomain::ProcessingTime => &mut self.processing,
        }
    }

    /// Registers `key`'s timer at `timestamp` (once: a second registration is a no-op).
    pub fn register(
        &mut self,
        backend: &mut KeyedStateStore<K>,
        domain: TimeDomain,
        key: &K,
        slot: KeyGroupSlot,
        timestamp: i64,
    ) -> Result<(), StateError> {
        self.queue(domain).register(backend, key, slot, timestamp)
    }

    /// Registers `key`'s timers at every one of `timestamps` (one lookup of its timers).
    pub fn register_all(
        &mut self,
        backend: &mut KeyedStateStore<K>,
        domain: TimeDomain,
        key: &K,
        slot: KeyGroupSlot,
        timestamps: &[i64],
    ) -> Result<(), StateError> {
        if timestamps.is_empty() {
            return Ok(());
        }
        self.queue(domain)
            .register_all(backend, key, slot, timestamps)
    }

    /// Deletes `key`'s timer at `timestamp`, if there is one.
    pub fn delete(
        &mut self,
        backend: &mut KeyedStateStore<K>,
        domain: TimeDomain,
        key: &K,
        slot: KeyGroupSlot,
        timestamp: i64,
    ) -> Result<(), StateError> {
        self.queue(domain).delete(backend, key, slot, timestamp)
    }

    /// Takes the earliest timer of `domain` due at `time`, removing it.
    pub fn pop_due(
        &mut self,
        backend: &mut KeyedStateStore<K>,
        domain: TimeDomain,
        time: i64,
    ) -> Result<Option<(i64, K)>, StateError> {
        self.queue(domain).pop_due(backend, time)
    }

    /// The earliest processing-time timer, if any.
    pub fn next_processing_time(&self) -> Option<i64> {
        self.processing.earliest()
    }

    /// The earliest event-time timer, if any.
    pub fn next_event_time(&self) -> Option<i64> {
        self.event.earliest()
    }

    /// Number of timers of `domain`.
    pub fn len(&self, domain: TimeDomain) -> usize {
        match domain {
            TimeDomain::EventTime => self.event.len,
            TimeDomain::ProcessingTime => self.processing.len,
        }
    }

    /// The operator's current watermark.
    pub fn current_watermark(&self) -> i64 {
        self.watermark
    }

    /// Advances the operator's watermark.
    pub fn set_watermark(&mut self, watermark: i64) {
        self.watermark = self.watermark.max(watermark);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::key_group::KeyGroupRange;
    use crate::state::HeapKeyedStateBackend;

    fn backend() -> KeyedStateStore<String> {
        KeyedStateStore::Heap(HeapKeyedStateBackend::new(
            16,
            KeyGroupRange { start: 0, end: 15 },
        ))
    }

    fn register(
        timers: &mut InternalTimerService<String>,
        backend: &mut KeyedStateStore<String>,
        key: &str,
        at: i64,
    ) {
        let key = key.to_string();
        let slot = backend.resolve_key(&key).unwrap();
        timers
            .register(backend, TimeDomain::EventTime, &key, slot, at)
            .unwrap();
    }

    fn due(
        timers: &mut InternalTimerService<String>,
        backend: &mut KeyedStateStore<String>,
        upto: i64,
    ) -> Vec<(i64, String)> {
        std::iter::from_fn(|| {
            timers
                .pop_due(backend, TimeDomain::EventTime, upto)
                .unwrap()
        })
        .collect()
    }

    #[test]
    fn timers_fire_in_time_order_once_per_key_and_timestamp() {
        let mut backend = backend();
        let mut timers = InternalTimerService::open(&mut backend).unwrap();
        register(&mut timers, &mut backend, "b", 20);
        register(&mut timers, &mut backend, "a", 10);
        register(&mut timers, &mut backend, "a", 10);
        register(&mut timers, &mut backend, "c", 20);
        register(&mut timers, &mut backend, "a", 30);
        assert_eq!(timers.len(TimeDomain::EventTime), 4);
        assert_eq!(
            due(&mut timers, &mut backend, 20),
            [(10, "a".into()), (20, "b".into()), (20, "c".into())]
        );
        assert_eq!(timers.next_event_time(), Some(30));
        assert_eq!(due(&mut timers, &mut backend, i64::MAX), [(30, "a".into())]);
        assert_eq!(timers.len(TimeDomain::EventTime), 0);
    }

    #[test]
    fn a_deleted_timer_does_not_fire() {
        let mut backend = backend();
        let mut timers = InternalTimerService::open(&mut backend).unwrap();
        register(&mut timers, &mut backend, "a", 10);
        register(&mut timers, &mut backend, "b", 10);
        let key = "a".to_string();
        let slot = backend.resolve_key(&key).unwrap();
        timers
            .delete(&mut backend, TimeDomain::EventTime, &key, slot, 10)
            .unwrap();
        assert_eq!(due(&mut timers, &mut backend, 100), [(10, "b".into())]);
    }

    #[test]
    fn timers_survive_a_snapshot_and_restore_split_by_key_group() {
        let mut backend = backend();
        let mut timers = InternalTimerService::open(&mut backend).unwrap();
        for (i, key) in ["a", "b", "c", "d", "e"].iter().enumerate() {
            register(&mut timers, &mut backend, key, 100 + i as i64);
        }
        let KeyedStateStore::Heap(heap) = &mut backend else {
            unreachable!("a heap store")
        };
        let (bytes, entries) = heap.snapshot().write().unwrap();
        // Two subtasks after rescaling: each restores the key groups it owns.
        let mut fired = Vec::new();
        for range in [
            KeyGroupRange { start: 0, end: 7 },
            KeyGroupRange { start: 8, end: 15 },
        ] {
            let blocks = entries
                .iter()
                .filter(|e| range.contains(e.key_group))
                .map(|e| {
                    let block = &bytes[e.offset as usize..(e.offset + e.length) as usize];
                    crate::state::keyed_state_snapshot::decode_key_group_block(e, block, "t")
                        .unwrap()
                })
                .collect();
            let mut heap = HeapKeyedStateBackend::<String>::new(16, range);
            heap.restore(blocks).unwrap();
            let mut restored = KeyedStateStore::Heap(heap);
            let mut timers = InternalTimerService::open(&mut restored).unwrap();
            fired.extend(due(&mut timers, &mut restored, i64::MAX));
        }
        fired.sort();
        assert_eq!(
            fired,
            [
                (100, "a".into()),
                (101, "b".into()),
                (102, "c".into()),
                (103, "d".into()),
                (104, "e".into())
            ]
        );
    }
}
