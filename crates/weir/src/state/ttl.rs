//! State time-to-live (Flink's `StateTtlConfig`): a keyed state's entries expire a while after
//! they were last written (or read), in processing time. Expired entries are never returned,
//! are left out of snapshots, and are removed as they are accessed and, key group by key
//! group, in the background of accesses.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What refreshes an entry's time to live.
///
/// ```
/// use std::time::Duration;
/// use weir::prelude::*;
///
/// // A session's state lives while the session is read or written: reads refresh it too.
/// let ttl = StateTtlConfig::new(Duration::from_secs(1_800))
///     .with_update_type(TtlUpdateType::OnReadAndWrite);
/// let sessions: ValueState<u64> = ValueState::new("session").with_ttl(ttl);
/// # let _ = sessions;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TtlUpdateType {
    /// Creating and writing the entry (Flink's default).
    OnCreateAndWrite,
    /// Reading it too.
    OnReadAndWrite,
}

/// How long a keyed state's entries live (Flink's `StateTtlConfig`), set on a state handle
/// with `with_ttl`. The time is processing time; one entry is one key's value (for list and
/// map state, the key's whole list or map).
///
/// ```
/// use std::time::Duration;
/// use weir::prelude::*; // StateTtlConfig and TtlUpdateType included
///
/// /// Counts a user's clicks, forgetting users idle for an hour.
/// #[derive(Clone)]
/// struct RecentClicks {
///     clicks: ValueState<u64>,
/// }
///
/// let ttl = StateTtlConfig::new(Duration::from_secs(3_600))
///     .with_update_type(TtlUpdateType::OnReadAndWrite);
/// let function = RecentClicks { clicks: ValueState::new("clicks").with_ttl(ttl) };
/// # let _ = function;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateTtlConfig {
    pub(crate) ttl_millis: i64,
    pub(crate) update_type: TtlUpdateType,
    pub(crate) cleanup_in_full_snapshot: bool,
    pub(crate) incremental_cleanup: bool,
}

impl StateTtlConfig {
    /// Entries live `ttl` after their last write; expired ones are left out of snapshots and
    /// removed incrementally as the state is accessed.
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl_millis: i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
            update_type: TtlUpdateType::OnCreateAndWrite,
            cleanup_in_full_snapshot: true,
            incremental_cleanup: true,
        }
    }

    /// What refreshes an entry.
    pub fn with_update_type(mut self, update_type: TtlUpdateType) -> Self {
        self.update_type = update_type;
        self
    }

    /// Whether snapshots leave expired entries out (on by default).
    pub fn with_cleanup_in_full_snapshot(mut self, enabled: bool) -> Self {
        self.cleanup_in_full_snapshot = enabled;
        self
    }

    /// Whether accesses also sweep one key group's expired entries (on by default).
    pub fn with_incremental_cleanup(mut self, enabled: bool) -> Self {
        self.incremental_cleanup = enabled;
        self
    }

    /// The time to live.
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_millis.max(0) as u64)
    }
}

/// The processing-time clock of state TTL: the wall clock, or one a test sets.
#[derive(Debug, Clone, Default)]
pub enum TtlClock {
    /// Milliseconds since the Unix epoch.
    #[default]
    Wall,
    /// A clock set by hand.
    Manual(Arc<AtomicI64>),
}

impl TtlClock {
    /// The current time in milliseconds.
    pub fn now(&self) -> i64 {
        match self {
            TtlClock::Wall => {
                i64::try_from(crate::runtime::snapshot::now_millis()).unwrap_or(i64::MAX)
            }
            TtlClock::Manual(t) => t.load(Ordering::Relaxed),
        }
    }
}

/// The TTL of one state table: its configuration and clock.
#[derive(Debug, Clone)]
pub(crate) struct TableTtl {
    pub(crate) config: StateTtlConfig,
    pub(crate) clock: TtlClock,
}

impl TableTtl {
    /// Whether an entry last touched at `touched` has expired at `now`.
    pub(crate) fn expired(&self, touched: i64, now: i64) -> bool {
        touched.saturating_add(self.config.ttl_millis) <= now
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::api::functions::{KeyedContext, RuntimeContext};
    use crate::runtime::task::OperatorSetup;
    use crate::state::heap_keyed_state_backend::HeapKeyedStateBackend;
    use crate::state::key_group::KeyGroupRange;
    use crate::state::keyed_state_store::KeyedStateStore;
    use crate::state::timers::InternalTimerService;
    use crate::state::StateKind;
    use crate::state::ValueState;

    struct Harness {
        backend: KeyedStateStore<u64>,
        timers: InternalTimerService<u64>,
        runtime: RuntimeContext,
        clock: Arc<AtomicI64>,
    }

    impl Harness {
        fn new() -> Self {
            let clock = Arc::new(AtomicI64::new(0));
            let mut backend = KeyedStateStore::Heap(HeapKeyedStateBackend::new(
                16,
                KeyGroupRange { start: 0, end: 15 },
            ));
            backend.set_ttl_clock(TtlClock::Manual(clock.clone()));
            let timers = InternalTimerService::open(&mut backend).unwrap();
            let runtime = RuntimeContext::of(&OperatorSetup::for_test(0, "ttl"));
            Self {
                backend,
                timers,
                runtime,
                clock,
            }
        }

        fn heap(&mut self) -> &mut HeapKeyedStateBackend<u64> {
            match &mut self.backend {
                KeyedStateStore::Heap(heap) => heap,
                KeyedStateStore::Serialized(_) => {
                    unreachable!("the harness keeps state on the heap")
                }
            }
        }

        fn at(&self, millis: i64) {
            self.clock.store(millis, Ordering::Relaxed);
        }

        fn with<R>(&mut self, key: u64, f: impl FnOnce(&mut KeyedContext<'_, u64>) -> R) -> R {
            let slot = self.backend.resolve_key(&key).unwrap();
            let mut ctx = KeyedContext {
                key: &key,
                slot,
                backend: &mut self.backend,
                timers: &mut self.timers,
                runtime: &self.runtime,
                timestamp: None,
                time_domain: None,
                side: None,
            };
            f(&mut ctx)
        }

        fn stored(&mut self, state: &str, ttl: &StateTtlConfig) -> usize {
            let index = self
                .backend
                .register::<u64>(state, StateKind::Value, Some(ttl.clone()))
                .unwrap();
            self.backend.len::<u64>(index).unwrap()
        }
    }

    #[test]
    fn the_state_shrinks_as_keys_expire_and_expired_values_are_never_returned() {
        let ttl = StateTtlConfig::new(Duration::from_millis(100));
        let state = ValueState::<u64>::new("seen").with_ttl(ttl.clone());
        let mut h = Harness::new();
        for key in 0..50 {
            h.with(key, |ctx| state.update(ctx, key)).unwrap();
        }
        h.at(60);
        for key in 50..100 {
            h.with(key, |ctx| state.update(ctx, key)).unwrap();
        }
        assert_eq!(h.stored("seen", &ttl), 100);
        h.at(120);
        // Keys written at 0 have expired, those written at 60 have not.
        assert_eq!(h.with(3, |ctx| state.value(ctx)).unwrap(), None);
        assert_eq!(h.with(70, |ctx| state.value(ctx)).unwrap(), Some(70));
        // Accesses sweep the key groups one by one: the expired half goes.
        for key in 50..100 {
            h.with(key, |ctx| state.value(ctx)).unwrap();
        }
        assert_eq!(h.stored("seen", &ttl), 50);
        // A snapshot leaves expired entries out.
        h.at(200);
        let (bytes, entries) = h.heap().snapshot().write().unwrap();
        assert!(entries.is_empty(), "{} bytes of expired state", bytes.len());
        for key in 0..40 {
            h.with(key, |ctx| state.value(ctx)).unwrap();
        }
        assert_eq!(h.stored("seen", &ttl), 0);
    }

    #[test]
    fn reads_refresh_the_time_to_live_only_when_configured() {
        for (update, alive) in [
            (TtlUpdateType::OnCreateAndWrite, false),
            (TtlUpdateType::OnReadAndWrite, true),
        ] {
            let ttl = StateTtlConfig::new(Duration::from_millis(100)).with_update_type(update);
            let state = ValueState::<u64>::new("v").with_ttl(ttl);
            let mut h = Harness::new();
            h.with(1, |ctx| state.update(ctx, 7)).unwrap();
            h.at(80);
            assert_eq!(h.with(1, |ctx| state.value(ctx)).unwrap(), Some(7));
            h.at(150);
            assert_eq!(
                h.with(1, |ctx| state.value(ctx)).unwrap().is_some(),
                alive,
                "{update:?}"
            );
        }
    }

    #[test]
    fn ttl_state_keeps_its_timestamps_across_a_restore() {
        let ttl = StateTtlConfig::new(Duration::from_millis(100));
        let state = ValueState::<u64>::new("v").with_ttl(ttl.clone());
        let mut h = Harness::new();
        h.with(1, |ctx| state.update(ctx, 1)).unwrap();
        h.at(50);
        h.with(2, |ctx| state.update(ctx, 2)).unwrap();
        let (bytes, entries) = h.heap().snapshot().write().unwrap();
        let blocks = entries
            .iter()
            .map(|e| {
                let block = &bytes[e.offset as usize..(e.offset + e.length) as usize];
                crate::state::keyed_state_snapshot::decode_key_group_block(e, block, "t").unwrap()
            })
            .collect();
        let mut restored = Harness::new();
        restored.heap().restore(blocks).unwrap();
        let state = ValueState::<u64>::new("v").with_ttl(ttl);
        restored.at(120);
        // Written at 0 on the old backend: expired; at 50: alive until 150.
        assert_eq!(restored.with(1, |ctx| state.value(ctx)).unwrap(), None);
        assert_eq!(restored.with(2, |ctx| state.value(ctx)).unwrap(), Some(2));
    }
}
