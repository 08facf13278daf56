//! How a stream gets event time: where each record's timestamp comes from, and how
//! watermarks follow from the timestamps (Flink's `WatermarkStrategy`).

use std::sync::Arc;
use std::time::Duration;

use crate::time::generator::{BoundedOutOfOrderness, WatermarkGenerator};

/// Extracts a record's event timestamp (milliseconds), given the timestamp the source
/// attached to it, if any (a Kafka record's timestamp, for instance).
pub type TimestampAssigner<T> = Arc<dyn Fn(&T, Option<i64>) -> i64 + Send + Sync>;

type GeneratorFactory = Arc<dyn Fn() -> Box<dyn WatermarkGenerator> + Send + Sync>;

/// Where a stream's event time comes from: a timestamp assigner and a watermark generator,
/// given at the source (`from_source(source, strategy, name)`, Flink's `fromSource`) or later
/// with `assign_timestamps_and_watermarks`. Each split of a source gets its own generator; the
/// source emits the minimum over its active splits.
///
/// ```
/// use std::time::Duration;
/// use weir::prelude::*;
///
/// #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
/// struct Bid { auction: u64, price: u64, date_time: i64 }
///
/// let strategy = WatermarkStrategy::<Bid>::for_bounded_out_of_orderness(Duration::from_secs(4))
///     .with_timestamp_assigner(|bid, _| bid.date_time)
///     .with_idleness(Duration::from_secs(30));
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// let bids = vec![
///     Bid { auction: 1, price: 10, date_time: 1_000 },
///     Bid { auction: 1, price: 12, date_time: 3_000 },
/// ];
/// let prices = env
///     .from_source(CollectionSource::new(bids), strategy, "bids")
///     .map(|bid| bid.price)
///     .collect();
/// let result = env.execute("bids")?;
/// assert_eq!(prices.take(), vec![10, 12]);
/// // A bounded input ends event time: every window would fire.
/// assert_eq!(result.operator("Map").unwrap().watermark, Some(Watermark::MAX));
/// # Ok::<(), WeirError>(())
/// ```
pub struct WatermarkStrategy<T> {
    generator: Option<GeneratorFactory>,
    assigner: Option<TimestampAssigner<T>>,
    idleness: Option<Duration>,
}

impl<T> Clone for WatermarkStrategy<T> {
    fn clone(&self) -> Self {
        Self {
            generator: self.generator.clone(),
            assigner: self.assigner.clone(),
            idleness: self.idleness,
        }
    }
}

impl<T> std::fmt::Debug for WatermarkStrategy<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatermarkStrategy")
            .field("watermarks", &self.generator.is_some())
            .field("timestamp_assigner", &self.assigner.is_some())
            .field("idleness", &self.idleness)
            .finish()
    }
}

impl<T> WatermarkStrategy<T> {
    /// No event time: records keep the timestamps the source gives them, and no watermarks
    /// are generated (the end of a bounded input still ends event time).
    pub fn no_watermarks() -> Self {
        Self {
            generator: None,
            assigner: None,
            idleness: None,
        }
    }

    /// Timestamps that never go back: the watermark is the highest timestamp minus one.
    pub fn for_monotonous_timestamps() -> Self {
        Self::for_bounded_out_of_orderness(Duration::ZERO)
    }

    /// Events up to `max_out_of_orderness` late: the watermark trails the highest timestamp
    /// by that much.
    pub fn for_bounded_out_of_orderness(max_out_of_orderness: Duration) -> Self {
        Self::for_generator(move || BoundedOutOfOrderness::new(max_out_of_orderness))
    }

    /// A custom generator, created once per split (or subtask).
    pub fn for_generator<G: WatermarkGenerator + 'static>(
        create: impl Fn() -> G + Send + Sync + 'static,
    ) -> Self {
        Self {
            generator: Some(Arc::new(move || Box::new(create()))),
            assigner: None,
            idleness: None,
        }
    }

    /// Takes each record's timestamp from `assigner(record, timestamp_from_source)`.
    /// Without one, records keep the timestamp the source attached.
    pub fn with_timestamp_assigner(
        mut self,
        assigner: impl Fn(&T, Option<i64>) -> i64 + Send + Sync + 'static,
    ) -> Self {
        self.assigner = Some(Arc::new(assigner));
        self
    }

    /// Marks a split or input idle after `timeout` without records, so that it does not hold
    /// event time back; it becomes active with its next record.
    pub fn with_idleness(mut self, timeout: Duration) -> Self {
        self.idleness = Some(timeout);
        self
    }

    /// Whether watermarks are generated.
    pub fn has_watermarks(&self) -> bool {
        self.generator.is_some()
    }

    /// Whether the strategy assigns timestamps itself.
    pub fn has_timestamp_assigner(&self) -> bool {
        self.assigner.is_some()
    }

    /// The idleness timeout, if set.
    pub fn idleness(&self) -> Option<Duration> {
        self.idleness
    }

    /// A new generator (for a split or a subtask), if the strategy generates watermarks.
    pub(crate) fn create_generator(&self) -> Option<Box<dyn WatermarkGenerator>> {
        self.generator.as_ref().map(|create| create())
    }

    /// The timestamp assigner, if any.
    pub(crate) fn assigner(&self) -> Option<&TimestampAssigner<T>> {
        self.assigner.as_ref()
    }

    /// A one-line description for plans.
    pub fn describe(&self) -> String {
        let timestamps = if self.assigner.is_some() {
            "timestamps assigned"
        } else {
            "timestamps from the source"
        };
        match (&self.generator, self.idleness) {
            (None, _) => format!("{timestamps}, no watermarks"),
            (Some(_), None) => format!("{timestamps}, watermarks"),
            (Some(_), Some(idle)) => format!("{timestamps}, watermarks, idle after {idle:?}"),
        }
    }
}
