//! `WindowedStream`: a keyed stream cut into windows, before its window function is chosen
//! (Flink's `WindowedStream`; `window_all` makes one over a whole stream).

use std::sync::Arc;
use std::time::Duration;

use crate::api::data_stream::DataStream;
use crate::api::functions::AggregateFunction;
use crate::api::output_tag::OutputTag;
use crate::error::GraphError;
use crate::graph::stream_graph::OperatorKind;
use crate::record::{Key, Record};
use crate::runtime::key_selector::KeySelector;
use crate::runtime::operators::window::{Lateness, WindowOperator};
use crate::windowing::assigners::WindowAssigner;
use crate::windowing::contents::{
    AggregateContents, AggregateProcessContents, ProcessContents, ReduceContents, WindowContents,
};
use crate::windowing::function::ProcessWindowFunction;
use crate::windowing::trigger::Trigger;

/// A keyed stream cut into windows by an assigner; choose a trigger, the allowed lateness,
/// then a window function (`reduce`, `aggregate`, `process`, `aggregate_with`).
///
/// ```
/// use std::time::Duration;
/// use weir::prelude::*;
/// use weir::windowing::SlidingEventTimeWindows;
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))?;
/// let bids = vec![(1u64, 10u64, 0i64), (1, 30, 4_000), (2, 20, 6_000), (1, 5, 9_000)];
/// let strategy = WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_secs(1))
///     .with_timestamp_assigner(|b: &(u64, u64, i64), _| b.2);
/// let highest = env
///     .from_source(CollectionSource::new(bids), strategy, "bids")
///     .key_by(|b: &(u64, u64, i64)| b.0)
///     .window(SlidingEventTimeWindows::of(Duration::from_secs(10), Duration::from_secs(5)))
///     .reduce(|a, b| if b.1 > a.1 { b } else { a })
///     .collect();
/// env.execute("highest bid per auction")?;
/// let mut highest = highest.take();
/// highest.sort();
/// assert_eq!(highest, vec![
///     (1, 5, 9_000),                  // auction 1, window [5 s, 15 s)
///     (1, 30, 4_000), (1, 30, 4_000), // auction 1, windows [-5 s, 5 s) and [0, 10 s)
///     (2, 20, 6_000), (2, 20, 6_000), // auction 2, windows [0, 10 s) and [5 s, 15 s)
/// ]);
/// # Ok::<(), WeirError>(())
/// ```
pub struct WindowedStream<T, K, A, Tr> {
    stream: DataStream<T>,
    selector: Arc<dyn KeySelector<T, Key = K>>,
    assigner: A,
    trigger: Tr,
    allowed_lateness: Duration,
    late_data: Option<Arc<str>>,
    /// `window_all`: one window operator over the whole stream.
    all: bool,
}

impl<T: Record, K: Key, A: WindowAssigner, Tr: Trigger<A::Window>> WindowedStream<T, K, A, Tr> {
    pub(crate) fn new(
        stream: DataStream<T>,
        selector: Arc<dyn KeySelector<T, Key = K>>,
        assigner: A,
        trigger: Tr,
        all: bool,
    ) -> Self {
        Self {
            stream,
            selector,
            assigner,
            trigger,
            allowed_lateness: Duration::ZERO,
            late_data: None,
            all,
        }
    }

    /// Fires windows with `trigger` instead of the assigner's default.
    pub fn trigger<Tr2: Trigger<A::Window>>(self, trigger: Tr2) -> WindowedStream<T, K, A, Tr2> {
        WindowedStream {
            stream: self.stream,
            selector: self.selector,
            assigner: self.assigner,
            trigger,
            allowed_lateness: self.allowed_lateness,
            late_data: self.late_data,
            all: self.all,
        }
    }

    /// Keeps event-time windows for `lateness` after their end: records that arrive that
    /// late still count, and fire the window again (Flink's `allowedLateness`). Records later
    /// than that are dropped, and counted in the operator's `late_records_dropped`.
    pub fn allowed_lateness(mut self, lateness: Duration) -> Self {
        self.allowed_lateness = lateness;
        self
    }

    /// Sends records too late for every window to side output `tag` instead of dropping
    /// them (Flink's `sideOutputLateData`); read them with
    /// [`DataStream::side_output`] on the window's result.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::prelude::*;
    /// use weir::windowing::TumblingEventTimeWindows;
    ///
    /// /// A watermark at each event's timestamp.
    /// struct AtEach;
    /// impl WatermarkGenerator for AtEach {
    ///     fn on_event(&mut self, t: i64, out: &mut WatermarkOutput) {
    ///         out.emit_watermark(Watermark::new(t));
    ///     }
    /// }
    ///
    /// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
    /// let late = OutputTag::<i64>::new("late");
    /// let strategy = WatermarkStrategy::for_generator(|| AtEach).with_timestamp_assigner(|t: &i64, _| *t);
    /// let sums = env
    ///     .from_source(CollectionSource::new(vec![1, 5, 12, 3, 14]), strategy, "times")
    ///     .key_by(|_: &i64| 0)
    ///     .window(TumblingEventTimeWindows::of(Duration::from_millis(10)))
    ///     .side_output_late_data(&late)
    ///     .reduce(|a, b| a + b);
    /// let too_late = sums.side_output(&late).collect();
    /// let sums = sums.collect();
    /// env.execute("late")?;
    /// // 3 came after the watermark reached 12: window [0, 10) had closed.
    /// assert_eq!(sums.take(), vec![6, 26]);
    /// assert_eq!(too_late.take(), vec![3]);
    /// # Ok::<(), WeirError>(())
    /// ```
    pub fn side_output_late_data(mut self, tag: &OutputTag<T>) -> Self {
        self.late_data = Some(tag.shared_id());
        self
    }

    fn apply<C: WindowContents<K, T, A::Window>>(
        self,
        name: &str,
        contents: C,
    ) -> DataStream<C::Out> {
        let Self {
            stream,
            selector,
            assigner,
            trigger,
            allowed_lateness,
            late_data,
            all,
        } = self;
        let operator_name = format!("Window({}, {name})", assigner.describe());
        if let Err(reason) = assigner.validate() {
            stream
                .builder
                .borrow_mut()
                .error(GraphError::InvalidWindow {
                    operator: operator_name.clone(),
                    reason,
                });
        }
        let event_time = assigner.time() == crate::windowing::assigners::WindowTime::EventTime;
        let lateness = Lateness {
            allowed: i64::try_from(allowed_lateness.as_millis()).unwrap_or(i64::MAX),
        };
        let out = stream.add_operator(&operator_name, OperatorKind::Operator, true, move |setup| {
            Ok(WindowOperator::new(
                setup,
                selector.clone(),
                assigner.clone(),
                trigger.clone(),
                contents.clone(),
                lateness,
                late_data.clone(),
            )?)
        });
        if event_time {
            crate::api::data_stream::configure_node(&out.builder, out.own_node(), "window", |n| {
                n.requires_event_time = Some("an event-time window")
            });
        }
        if all {
            // Flink's windowAll: one subtask sees the whole stream.
            out.parallelism(1)
        } else {
            out
        }
    }

    /// Folds each window's records with `f`, keeping one value per window.
    pub fn reduce<F: FnMut(T, T) -> T + Clone + Send + 'static>(self, f: F) -> DataStream<T> {
        self.apply("reduce", ReduceContents::new(f))
    }

    /// Aggregates each window with an [`AggregateFunction`], keeping one accumulator per
    /// window.
    pub fn aggregate<ACC, OUT, F>(self, function: F) -> DataStream<OUT>
    where
        ACC: Record,
        OUT: Record,
        F: AggregateFunction<T, ACC, OUT>,
    {
        self.apply("aggregate", AggregateContents::new(function))
    }

    /// Gives every record of a window, with its key and metadata, to a
    /// [`ProcessWindowFunction`] (the window keeps all its records until it fires).
    pub fn process<OUT, P>(self, function: P) -> DataStream<OUT>
    where
        OUT: Record,
        P: ProcessWindowFunction<K, T, OUT, A::Window>,
    {
        self.apply("process", ProcessContents::new(function))
    }

    /// Aggregates each window with `aggregate`, then gives the single result, with the key
    /// and the window, to `process` (Flink's `aggregate(aggFunction, windowFunction)`).
    pub fn aggregate_with<ACC, R, OUT, F, P>(self, aggregate: F, process: P) -> DataStream<OUT>
    where
        ACC: Record,
        R: 'static,
        OUT: Record,
        F: AggregateFunction<T, ACC, R>,
        P: ProcessWindowFunction<K, R, OUT, A::Window>,
    {
        self.apply(
            "aggregate",
            AggregateProcessContents::new(aggregate, process),
        )
    }
}
