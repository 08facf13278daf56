//! Joins of two streams (Flink's DataStream joins): the window join, which pairs the records
//! of equal keys that fall into the same window, and the interval join, which pairs each
//! record with the other stream's records of the same key within a time interval of it.

use std::marker::PhantomData;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::api::connected_streams::KeyedConnectedStreams;
use crate::api::data_stream::DataStream;
use crate::api::functions::{KeyedCoProcessFunction, KeyedContext};
use crate::api::keyed_stream::KeyedStream;
use crate::error::{BoxError, GraphError};
use crate::record::{Key, Record};
use crate::runtime::output::Collector;
use crate::state::state_handles::ValueState;
use crate::windowing::assigners::WindowAssigner;
use crate::windowing::function::WindowContext;
use crate::windowing::trigger::Trigger;
use crate::windowing::window::Window;

/// A record of either input of a window join, in the one keyed stream that the window
/// operator reads (Flink's `TaggedUnion`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum JoinSide<A, B> {
    /// A record of the first stream.
    First(A),
    /// A record of the second stream.
    Second(B),
}

/// The start of a window join: `a.join(&b)`, then `where_`, `equal_to`, `window`, `apply`
/// (Flink's `JoinedStreams`).
///
/// ```
/// use std::time::Duration;
/// use weir::prelude::*;
/// use weir::windowing::TumblingEventTimeWindows;
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))?;
/// let clicks = env.from_source(CollectionSource::new(vec![(1u64, 100i64), (2, 150), (1, 1_200)]),
///     WatermarkStrategy::for_monotonous_timestamps().with_timestamp_assigner(|c: &(u64, i64), _| c.1), "clicks");
/// let views = env.from_source(CollectionSource::new(vec![(1u64, 300i64), (1, 500), (2, 1_100)]),
///     WatermarkStrategy::for_monotonous_timestamps().with_timestamp_assigner(|v: &(u64, i64), _| v.1), "views");
/// let pairs = clicks
///     .join(&views)
///     .where_(|c: &(u64, i64)| c.0)
///     .equal_to(|v: &(u64, i64)| v.0)
///     .window(TumblingEventTimeWindows::of(Duration::from_secs(1)))
///     .apply(|c: (u64, i64), v: (u64, i64)| (c.0, c.1, v.1))
///     .collect();
/// env.execute("clicks and views")?;
/// let mut pairs = pairs.take();
/// pairs.sort();
/// // In [0, 1 s): user 1's click with both views; user 2's click and view are in different windows.
/// assert_eq!(pairs, vec![(1, 100, 300), (1, 100, 500)]);
/// # Ok::<(), WeirError>(())
/// ```
pub struct JoinedStreams<A, B> {
    first: DataStream<A>,
    second: DataStream<B>,
}

impl<A: Record, B: Record> JoinedStreams<A, B> {
    pub(crate) fn new(first: DataStream<A>, second: DataStream<B>) -> Self {
        Self { first, second }
    }

    /// The key of the first stream's records.
    pub fn where_<K, F>(self, key: F) -> JoinWhere<A, B, K, F>
    where
        K: Key,
        F: Fn(&A) -> K + Clone + Send + Sync + 'static,
    {
        JoinWhere {
            streams: self,
            first_key: key,
            _key: PhantomData,
        }
    }
}

/// A window join with the first stream's key; next, the second's with
/// [`JoinWhere::equal_to`].
pub struct JoinWhere<A, B, K, F> {
    streams: JoinedStreams<A, B>,
    first_key: F,
    _key: PhantomData<fn() -> K>,
}

impl<A: Record, B: Record, K: Key, F> JoinWhere<A, B, K, F>
where
    F: Fn(&A) -> K + Clone + Send + Sync + 'static,
{
    /// The key of the second stream's records; records join when their keys are equal.
    pub fn equal_to<G>(self, key: G) -> JoinEqualTo<A, B, K>
    where
        G: Fn(&B) -> K + Clone + Send + Sync + 'static,
    {
        let first_key = self.first_key;
        let tagged = self
            .streams
            .first
            .map(|a: A| JoinSide::<A, B>::First(a))
            .name("Join: first input")
            .union(
                &self
                    .streams
                    .second
                    .map(|b: B| JoinSide::<A, B>::Second(b))
                    .name("Join: second input"),
            );
        JoinEqualTo {
            tagged,
            key: Arc::new(move |side: &JoinSide<A, B>| match side {
                JoinSide::First(a) => first_key(a),
                JoinSide::Second(b) => key(b),
            }),
        }
    }
}

type SideKey<A, B, K> = Arc<dyn Fn(&JoinSide<A, B>) -> K + Send + Sync>;

/// A window join with both keys; next, its windows with [`JoinEqualTo::window`].
pub struct JoinEqualTo<A, B, K> {
    tagged: DataStream<JoinSide<A, B>>,
    key: SideKey<A, B, K>,
}

impl<A: Record, B: Record, K: Key> JoinEqualTo<A, B, K> {
    /// The windows in which records join.
    pub fn window<W>(self, assigner: W) -> JoinWindowed<A, B, K, W>
    where
        W: WindowAssigner,
        W::DefaultTrigger: Trigger<W::Window>,
    {
        JoinWindowed {
            tagged: self.tagged,
            key: self.key,
            assigner,
        }
    }
}

/// A window join ready for its join function ([`JoinWindowed::apply`]).
pub struct JoinWindowed<A, B, K, W> {
    tagged: DataStream<JoinSide<A, B>>,
    key: SideKey<A, B, K>,
    assigner: W,
}

impl<A, B, K, W> JoinWindowed<A, B, K, W>
where
    A: Record,
    B: Record,
    K: Key,
    W: WindowAssigner,
    W::DefaultTrigger: Trigger<W::Window>,
{
    /// Calls `join` with every pair of records of equal key, one from each stream, that
    /// share a window; the results carry the window's last millisecond (its end minus one)
    /// as their timestamp, as in Flink.
    pub fn apply<O, F>(self, join: F) -> DataStream<O>
    where
        O: Record,
        F: FnMut(A, B) -> O + Clone + Send + 'static,
    {
        let key = self.key;
        self.tagged
            .key_by(move |side: &JoinSide<A, B>| key(side))
            .window(self.assigner)
            .process(WindowJoin {
                join,
                _types: PhantomData,
            })
    }
}

/// The window function of a window join: the cross product of a window's two sides.
struct WindowJoin<A, B, O, F> {
    join: F,
    _types: PhantomData<fn(A, B) -> O>,
}

impl<A, B, O, F: Clone> Clone for WindowJoin<A, B, O, F> {
    fn clone(&self) -> Self {
        Self {
            join: self.join.clone(),
            _types: PhantomData,
        }
    }
}

impl<K, A, B, O, W, F> crate::windowing::function::ProcessWindowFunction<K, JoinSide<A, B>, O, W>
    for WindowJoin<A, B, O, F>
where
    A: Record,
    B: Record,
    O: Record,
    W: Window,
    F: FnMut(A, B) -> O + Clone + Send + 'static,
{
    fn process(
        &mut self,
        _key: &K,
        _ctx: &WindowContext<'_, W>,
        elements: &[JoinSide<A, B>],
        out: &mut Collector<'_, O>,
    ) -> Result<(), BoxError> {
        let seconds: Vec<&B> = elements
            .iter()
            .filter_map(|e| match e {
                JoinSide::Second(b) => Some(b),
                JoinSide::First(_) => None,
            })
            .collect();
        for first in elements.iter().filter_map(|e| match e {
            JoinSide::First(a) => Some(a),
            JoinSide::Second(_) => None,
        }) {
            for second in &seconds {
                out.collect((self.join)(first.clone(), (*second).clone()));
            }
        }
        Ok(())
    }
}

/// An interval join of two keyed streams (Flink's `IntervalJoin`): each record `a` of the
/// first joins each record `b` of the second with the same key and
/// `a.timestamp + lower <= b.timestamp <= a.timestamp + upper`. Set the bounds with
/// [`IntervalJoin::between`].
///
/// ```
/// use weir::prelude::*;
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))?;
/// let time = |r: &(u64, i64), _: Option<i64>| r.1;
/// let orders = env.from_source(CollectionSource::new(vec![(1u64, 1_000i64), (2, 1_000)]),
///     WatermarkStrategy::for_monotonous_timestamps().with_timestamp_assigner(time), "orders");
/// let shipments = env.from_source(CollectionSource::new(vec![(1u64, 1_500i64), (1, 9_000), (2, 900)]),
///     WatermarkStrategy::for_monotonous_timestamps().with_timestamp_assigner(time), "shipments");
/// let shipped_soon = orders
///     .key_by(|o: &(u64, i64)| o.0)
///     .interval_join(&shipments.key_by(|s: &(u64, i64)| s.0))
///     .between(0, 2_000)
///     .process(|order: (u64, i64), shipment: (u64, i64)| (order.0, shipment.1 - order.1))
///     .collect();
/// env.execute("shipped within 2 s")?;
/// assert_eq!(shipped_soon.take(), vec![(1, 500)]);
/// # Ok::<(), WeirError>(())
/// ```
pub struct IntervalJoin<A, B, K> {
    first: KeyedStream<A, K>,
    second: KeyedStream<B, K>,
}

impl<A: Record, B: Record, K: Key> IntervalJoin<A, B, K> {
    pub(crate) fn new(first: KeyedStream<A, K>, second: KeyedStream<B, K>) -> Self {
        Self { first, second }
    }

    /// Joins `a` with the `b`s from `a`'s timestamp plus `lower` to plus `upper`
    /// milliseconds, both inclusive (`lower <= upper`; either may be negative).
    pub fn between(self, lower: i64, upper: i64) -> IntervalJoinBounded<A, B, K> {
        IntervalJoinBounded {
            join: self,
            lower,
            upper,
        }
    }
}

/// An interval join with its bounds, ready for its function
/// ([`IntervalJoinBounded::process`]).
pub struct IntervalJoinBounded<A, B, K> {
    join: IntervalJoin<A, B, K>,
    lower: i64,
    upper: i64,
}

impl<A: Record, B: Record, K: Key> IntervalJoinBounded<A, B, K> {
    /// Calls `join` with every matching pair; the results carry the later of the two
    /// timestamps, as in Flink.
    pub fn process<O, F>(self, join: F) -> DataStream<O>
    where
        O: Record,
        F: FnMut(A, B) -> O + Clone + Send + 'static,
    {
        let (lower, upper) = (self.lower, self.upper);
        if lower > upper {
            let stream = self.join.first.clone().into_stream();
            stream
                .builder
                .borrow_mut()
                .error(GraphError::InvalidApiUse(format!(
                    "interval join: the lower bound ({lower} ms) is above the upper bound \
                 ({upper} ms)"
                )));
        }
        let joined = KeyedConnectedStreams::from_keyed(self.join.first, self.join.second)
            .process(IntervalJoinFunction {
                lower,
                upper,
                join,
                firsts: ValueState::new("weir.interval-join.first"),
                seconds: ValueState::new("weir.interval-join.second"),
            })
            .name("Interval Join");
        crate::api::data_stream::configure_node(
            &joined.builder,
            joined.own_node(),
            "interval_join",
            |n| n.requires_event_time = Some("an interval join"),
        );
        joined
    }
}

/// The keyed co-process function behind an interval join: both sides buffered per key by
/// timestamp, until the watermark makes a match impossible.
struct IntervalJoinFunction<A, B, F> {
    lower: i64,
    upper: i64,
    join: F,
    firsts: ValueState<Vec<(i64, A)>>,
    seconds: ValueState<Vec<(i64, B)>>,
}

impl<A: Record, B: Record, F: Clone> Clone for IntervalJoinFunction<A, B, F> {
    fn clone(&self) -> Self {
        Self {
            lower: self.lower,
            upper: self.upper,
            join: self.join.clone(),
            firsts: self.firsts.clone(),
            seconds: self.seconds.clone(),
        }
    }
}

impl<A: Record, B: Record, F> IntervalJoinFunction<A, B, F> {
    fn timestamp<K: Key>(ctx: &KeyedContext<'_, K>) -> Result<i64, BoxError> {
        ctx.timestamp().ok_or_else(|| {
            crate::error::TaskError::MissingTimestamp {
                what: "an interval join",
            }
            .into()
        })
    }
}

impl<K, A, B, O, F> KeyedCoProcessFunction<K, A, B, O> for IntervalJoinFunction<A, B, F>
where
    K: Key,
    A: Record,
    B: Record,
    O: Record,
    F: FnMut(A, B) -> O + Clone + Send + 'static,
{
    fn process_element1(
        &mut self,
        a: A,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<'_, O>,
    ) -> Result<(), BoxError> {
        let t = Self::timestamp(ctx)?;
        // A record the watermark has passed is late: its matches may already be gone.
        if t < ctx.timer_service().current_watermark() {
            return Ok(());
        }
        let (low, high) = (t.saturating_add(self.lower), t.saturating_add(self.upper));
        for (tb, b) in self.seconds.value(ctx)?.unwrap_or_default() {
            if low <= tb && tb <= high {
                out.collect_with_timestamp((self.join)(a.clone(), b), t.max(tb));
            }
        }
        let mut firsts = self.firsts.value(ctx)?.unwrap_or_default();
        firsts.push((t, a));
        self.firsts.update(ctx, firsts)?;
        // No second record can match it once the watermark passes `t + upper`.
        ctx.timer_service().register_event_time_timer(high)?;
        Ok(())
    }

    fn process_element2(
        &mut self,
        b: B,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<'_, O>,
    ) -> Result<(), BoxError> {
        let t = Self::timestamp(ctx)?;
        if t < ctx.timer_service().current_watermark() {
            return Ok(());
        }
        // `a` matches when a + lower <= t <= a + upper.
        let (low, high) = (t.saturating_sub(self.upper), t.saturating_sub(self.lower));
        for (ta, a) in self.firsts.value(ctx)?.unwrap_or_default() {
            if low <= ta && ta <= high {
                out.collect_with_timestamp((self.join)(a, b.clone()), t.max(ta));
            }
        }
        let mut seconds = self.seconds.value(ctx)?.unwrap_or_default();
        seconds.push((t, b));
        self.seconds.update(ctx, seconds)?;
        // No first record can match it once the watermark passes `t - lower`.
        ctx.timer_service().register_event_time_timer(high)?;
        Ok(())
    }

    fn on_timer(
        &mut self,
        timestamp: i64,
        ctx: &mut KeyedContext<'_, K>,
        _out: &mut Collector<'_, O>,
    ) -> Result<(), BoxError> {
        let upper = self.upper;
        let mut firsts = self.firsts.value(ctx)?.unwrap_or_default();
        firsts.retain(|(t, _)| t.saturating_add(upper) > timestamp);
        if firsts.is_empty() {
            self.firsts.clear(ctx)?;
        } else {
            self.firsts.update(ctx, firsts)?;
        }
        let lower = self.lower;
        let mut seconds = self.seconds.value(ctx)?.unwrap_or_default();
        seconds.retain(|(t, _)| t.saturating_sub(lower) > timestamp);
        if seconds.is_empty() {
            self.seconds.clear(ctx)?;
        } else {
            self.seconds.update(ctx, seconds)?;
        }
        Ok(())
    }
}
