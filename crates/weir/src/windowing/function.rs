//! Window functions that see a whole window: [`ProcessWindowFunction`] and its
//! [`WindowContext`].

use crate::error::BoxError;
use crate::runtime::output::Collector;
use crate::windowing::window::Window;

/// What a window function knows when its window fires.
#[derive(Debug)]
pub struct WindowContext<'a, W> {
    pub(crate) window: &'a W,
    pub(crate) watermark: i64,
    pub(crate) processing_time: i64,
}

impl<W: Window> WindowContext<'_, W> {
    /// The window that fired.
    pub fn window(&self) -> &W {
        self.window
    }
    /// The operator's current watermark.
    pub fn current_watermark(&self) -> i64 {
        self.watermark
    }
    /// The wall clock, in milliseconds since the Unix epoch.
    pub fn current_processing_time(&self) -> i64 {
        self.processing_time
    }
}

/// A function over all the records of a window, with its key and metadata (Flink's
/// `ProcessWindowFunction`). With `aggregate_with`, it receives the single aggregated result
/// instead, keeping one accumulator per window rather than every record.
///
/// ```
/// use std::time::Duration;
/// use weir::prelude::*;
/// use weir::windowing::{TimeWindow, TumblingEventTimeWindows, WindowContext};
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// let clicks: Vec<(String, i64)> = [("home", 1_000), ("home", 1_500), ("cart", 2_500), ("home", 3_000)]
///     .into_iter()
///     .map(|(page, t)| (page.to_string(), t))
///     .collect();
/// let strategy = WatermarkStrategy::for_monotonous_timestamps()
///     .with_timestamp_assigner(|c: &(String, i64), _| c.1);
/// let per_window = env
///     .from_source(CollectionSource::new(clicks), strategy, "clicks")
///     .key_by(|c: &(String, i64)| c.0.clone())
///     .window(TumblingEventTimeWindows::of(Duration::from_secs(2)))
///     .process(
///         |page: &String,
///          ctx: &WindowContext<'_, TimeWindow>,
///          clicks: &[(String, i64)],
///          out: &mut Collector<'_, (String, i64, usize)>| {
///             out.collect((page.clone(), ctx.window().start, clicks.len()));
///             Ok(())
///         },
///     )
///     .collect();
/// env.execute("clicks per window")?;
/// let mut got = per_window.take();
/// got.sort();
/// assert_eq!(got, vec![
///     ("cart".into(), 2_000, 1),
///     ("home".into(), 0, 2),
///     ("home".into(), 2_000, 1),
/// ]);
/// # Ok::<(), WeirError>(())
/// ```
pub trait ProcessWindowFunction<K, IN, OUT, W: Window>: Clone + Send + 'static {
    /// Called when `ctx.window()` fires for `key`, with its records (or aggregate).
    fn process(
        &mut self,
        key: &K,
        ctx: &WindowContext<'_, W>,
        elements: &[IN],
        out: &mut Collector<'_, OUT>,
    ) -> Result<(), BoxError>;
}

impl<K, IN, OUT, W, F> ProcessWindowFunction<K, IN, OUT, W> for F
where
    W: Window,
    F: FnMut(&K, &WindowContext<'_, W>, &[IN], &mut Collector<'_, OUT>) -> Result<(), BoxError>
        + Clone
        + Send
        + 'static,
{
    fn process(
        &mut self,
        key: &K,
        ctx: &WindowContext<'_, W>,
        elements: &[IN],
        out: &mut Collector<'_, OUT>,
    ) -> Result<(), BoxError> {
        self(key, ctx, elements, out)
    }
}
