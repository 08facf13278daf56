//! The state handles' behaviour on typed state over a byte-level backend (the in-memory
//! test backend) against the heap backend: the conformance suite every backend runs, and a
//! keyed job computing the same on both.

use std::sync::Arc;
use std::time::Duration;

use crate::api::functions::{AggregateFunction, KeyedContext};
use crate::error::StateError;
use crate::state::backend_factory::StateBackendConfig;
use crate::state::conformance::StoreKind;
use crate::state::memory_backend::MemoryBackend;
use crate::state::{ListState, ValueState};

fn memory() -> StoreKind {
    StoreKind::Backend(Arc::new(MemoryFactory), StateBackendConfig::default())
}

crate::keyed_state_backend_conformance!(memory());

/// The heap against itself: its snapshots hold the barrier's state while the task writes on.
mod heap {
    crate::keyed_state_backend_conformance!(crate::state::conformance::StoreKind::Heap);
}

/// Registers the in-memory byte backend as `state.backend.type: memory-test`.
struct MemoryFactory;

impl crate::state::backend_factory::StateBackendFactory for MemoryFactory {
    fn name(&self) -> &'static str {
        "memory-test"
    }
    fn validate(
        &self,
        _config: &crate::state::backend_factory::StateBackendConfig,
    ) -> Result<(), StateError> {
        Ok(())
    }
    fn create(
        &self,
        context: crate::state::backend_factory::BackendContext<'_>,
    ) -> Result<Box<dyn crate::state::backend::KeyedStateBackend>, StateError> {
        Ok(Box::new(MemoryBackend::new(
            context.key_groups,
            context.restored,
        )))
    }
}

/// Counts each key's records and emits the count one event-time unit after its first.
#[derive(Clone)]
struct CountUntilTimer {
    count: ValueState<u64>,
    seen: ListState<i64>,
}

impl crate::api::functions::KeyedProcessFunction<u64, i64, (u64, u64, usize)> for CountUntilTimer {
    fn process_element(
        &mut self,
        value: i64,
        ctx: &mut KeyedContext<'_, u64>,
        _out: &mut crate::runtime::output::Collector<'_, (u64, u64, usize)>,
    ) -> Result<(), crate::error::BoxError> {
        let count = self.count.value(ctx)?.unwrap_or(0);
        if count == 0 {
            ctx.timer_service().register_event_time_timer(value + 1)?;
        }
        self.seen.add(ctx, value)?;
        Ok(self.count.update(ctx, count + 1)?)
    }
    fn on_timer(
        &mut self,
        _timestamp: i64,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut crate::runtime::output::Collector<'_, (u64, u64, usize)>,
    ) -> Result<(), crate::error::BoxError> {
        let count = self.count.value(ctx)?.unwrap_or(0);
        let seen = self.seen.get(ctx)?.len();
        out.collect((*ctx.current_key(), count, seen));
        self.seen.clear(ctx)?;
        Ok(self.count.clear(ctx)?)
    }
}

#[test]
fn a_keyed_job_computes_the_same_on_the_heap_and_on_a_registered_byte_backend() {
    use crate::prelude::*;
    use crate::state::backend_factory::{register_state_backend, StateBackendConfig};
    use crate::windowing::TumblingEventTimeWindows;

    register_state_backend(Arc::new(MemoryFactory));
    let run = |backend: &str| -> JobOutputs {
        let config = ExecutionConfig::default()
            .with_parallelism(2)
            .with_max_parallelism(16)
            .with_state_backend(StateBackendConfig {
                backend_type: backend.to_string(),
                ..StateBackendConfig::default()
            });
        let env = StreamExecutionEnvironment::new(config).unwrap();
        let events: Vec<i64> = (0..3_000).map(|i| (i * 7) % 1_000).collect();
        let strategy = WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(0))
            .with_timestamp_assigner(|t: &i64, _| *t);
        let stream = env.from_source(CollectionSource::new(events), strategy, "events");
        let sums = stream
            .key_by(|t: &i64| (*t % 13) as u64)
            .sum(|t: &i64| *t)
            .collect();
        let windows = stream
            .key_by(|t: &i64| (*t % 5) as u64)
            .window(TumblingEventTimeWindows::of(Duration::from_millis(100)))
            .aggregate(CountAll)
            .collect();
        let timers = stream
            .key_by(|t: &i64| (*t % 17) as u64)
            .process(CountUntilTimer {
                count: ValueState::new("count"),
                seen: ListState::new("seen"),
            })
            .collect();
        env.execute(backend).unwrap();
        let (mut sums, mut windows, mut timers) = (sums.take(), windows.take(), timers.take());
        sums.sort();
        windows.sort();
        timers.sort();
        (sums, windows, timers)
    };
    let heap = run("heap");
    assert!(!heap.0.is_empty() && !heap.1.is_empty() && !heap.2.is_empty());
    assert_eq!(run("memory-test"), heap);
    let err = std::panic::catch_unwind(|| run("no-such-backend"));
    assert!(err.is_err(), "an unknown backend fails the job");
}

/// The sorted outputs of the job: running sums, window counts, timer reports.
type JobOutputs = (Vec<(u64, i64)>, Vec<u64>, Vec<(u64, u64, usize)>);

#[derive(Clone)]
struct CountAll;

impl AggregateFunction<i64, u64, u64> for CountAll {
    fn create_accumulator(&self) -> u64 {
        0
    }
    fn add(&self, _: i64, acc: &mut u64) {
        *acc += 1;
    }
    fn get_result(&self, acc: &u64) -> u64 {
        *acc
    }
    fn merge(&self, a: u64, b: u64) -> u64 {
        a + b
    }
}
