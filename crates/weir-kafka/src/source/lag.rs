//! Consumer lag per partition: librdkafka reports each partition's last stable offset in its
//! statistics (every second, on the reader's own poll), and the reader knows its position;
//! their difference is published as the source's `recordsLag` gauge per topic and partition,
//! with `currentOffset` beside it and `pendingRecords` (FLIP-33) summed over them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rdkafka::consumer::ConsumerContext;
use rdkafka::ClientContext;
use weir::metrics::{Gauge, MetricGroup};

/// How often librdkafka sends statistics.
pub(crate) const STATISTICS_INTERVAL_MS: &str = "1000";

/// High watermarks per `(topic, partition)`, as the last statistics reported them.
pub(crate) type HighWatermarks = Arc<Mutex<BTreeMap<(String, i32), i64>>>;

/// The consumer's context: keeps the high watermarks its statistics carry.
#[derive(Clone, Default)]
pub(crate) struct LagContext {
    pub(crate) high_watermarks: HighWatermarks,
}

impl ClientContext for LagContext {
    fn stats(&self, statistics: rdkafka::Statistics) {
        let mut high = self
            .high_watermarks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (topic, stats) in statistics.topics {
            for (partition, p) in stats.partitions {
                // The reader reads committed records only: its end is the last stable offset
                // (records of open transactions are not yet readable). -1001 is
                // librdkafka's "internal" partition; -1 an unknown offset.
                if partition >= 0 && p.ls_offset >= 0 {
                    high.insert((topic.clone(), partition), p.ls_offset);
                }
            }
        }
    }
}

impl ConsumerContext for LagContext {}

/// The gauges of the partitions a reader reads.
pub(crate) struct LagMetrics {
    group: MetricGroup,
    partitions: BTreeMap<(String, i32), (Gauge, Gauge)>,
    pending: Gauge,
}

impl LagMetrics {
    pub(crate) fn new(group: &MetricGroup) -> Self {
        Self {
            group: group.clone(),
            partitions: BTreeMap::new(),
            pending: group.gauge("pendingRecords"),
        }
    }

    /// Publishes each partition's position and lag behind `high` (where known).
    pub(crate) fn update<'a>(
        &mut self,
        positions: impl Iterator<Item = (&'a (String, i32), i64)>,
        high: &BTreeMap<(String, i32), i64>,
    ) {
        let mut pending = 0;
        for (key, next_offset) in positions {
            let (offset, lag) = self.partitions.entry(key.clone()).or_insert_with(|| {
                let group = self
                    .group
                    .add_group("topic", key.0.clone())
                    .add_group("partition", key.1.to_string());
                (group.gauge("currentOffset"), group.gauge("recordsLag"))
            });
            offset.set(next_offset);
            if let Some(high) = high.get(key) {
                let behind = (high - next_offset).max(0);
                lag.set(behind);
                pending += behind;
            }
        }
        self.pending.set(pending);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_is_the_distance_to_the_high_watermark() {
        let group = MetricGroup::detached();
        let mut lag = LagMetrics::new(&group);
        let positions =
            BTreeMap::from([(("t".to_string(), 0), 10_i64), (("t".to_string(), 1), 50)]);
        let high = BTreeMap::from([(("t".to_string(), 0), 25_i64), (("t".to_string(), 1), 40)]);
        lag.update(positions.iter().map(|(k, v)| (k, *v)), &high);
        let p0 = group.add_group("topic", "t").add_group("partition", "0");
        assert_eq!(p0.gauge("recordsLag").get(), 15);
        assert_eq!(p0.gauge("currentOffset").get(), 10);
        let p1 = group.add_group("topic", "t").add_group("partition", "1");
        assert_eq!(p1.gauge("recordsLag").get(), 0, "never negative");
        assert_eq!(group.gauge("pendingRecords").get(), 15);
    }
}
