//! The metric handles operators and user functions update: counters and gauges, kept in
//! the atomics of the `prometheus-client` crate so that reading them (a scrape, a sample for
//! the JobManager) never stops the thread that writes them.

use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::counter::Counter as PromCounter;
use prometheus_client::metrics::gauge::Gauge as PromGauge;

/// A count that only goes up (Flink's `Counter`): records, bytes, errors.
///
/// ```
/// use weir::metrics::Counter;
/// let counter = Counter::default();
/// counter.inc();
/// counter.inc_by(2);
/// assert_eq!(counter.get(), 3);
/// ```
#[derive(Debug, Clone, Default)]
pub struct Counter(PromCounter<u64, AtomicU64>);

impl Counter {
    /// Adds one.
    pub fn inc(&self) {
        self.0.inc();
    }

    /// Adds `n`.
    pub fn inc_by(&self, n: u64) {
        self.0.inc_by(n);
    }

    /// The count now.
    pub fn get(&self) -> u64 {
        self.0.get()
    }
}

/// A value that goes up and down (Flink's `Gauge`): a lag, a queue length, a timestamp.
///
/// ```
/// use weir::metrics::Gauge;
/// let gauge = Gauge::default();
/// gauge.set(42);
/// gauge.set(7);
/// assert_eq!(gauge.get(), 7);
/// ```
#[derive(Debug, Clone, Default)]
pub struct Gauge(PromGauge<i64, AtomicI64>);

impl Gauge {
    /// Sets the value.
    pub fn set(&self, value: i64) {
        self.0.set(value);
    }

    /// Adds `n` (which may be negative).
    pub fn add(&self, n: i64) {
        self.0.inc_by(n);
    }

    /// The value now.
    pub fn get(&self) -> i64 {
        self.0.get()
    }
}

/// What a user metric is.
#[derive(Debug, Clone)]
pub(crate) enum UserMetric {
    Counter(Counter),
    Gauge(Gauge),
}

/// One registered user metric: its labels (from [`MetricGroup::add_group`]), its name and
/// its handle.
#[derive(Debug, Clone)]
pub(crate) struct RegisteredMetric {
    pub(crate) labels: Vec<(String, String)>,
    pub(crate) name: String,
    pub(crate) metric: UserMetric,
}

/// The metrics of one operator subtask that its code registers (Flink's
/// `getRuntimeContext().getMetricGroup()`): connectors register their lag, commit latency
/// and pending transactions here, user functions whatever they count. They are sampled
/// with the task's built-in metrics, shown by the REST API and exposed to Prometheus
/// labelled with the job, the operator and the subtask.
///
/// ```
/// use weir::metrics::MetricGroup;
/// let group = MetricGroup::detached();
/// let late = group.counter("lateEvents");
/// late.inc();
/// // Flink's `addGroup(key, value)`: one gauge per partition, told apart by a label.
/// let lag = group.add_group("partition", "3").gauge("recordsLag");
/// lag.set(120);
/// // Registering a name again returns the same metric.
/// assert_eq!(group.counter("lateEvents").get(), 1);
/// ```
#[derive(Debug, Clone)]
pub struct MetricGroup {
    labels: Vec<(String, String)>,
    metrics: Arc<Mutex<Vec<RegisteredMetric>>>,
}

/// Two groups are equal when they register into the same place with the same labels.
impl PartialEq for MetricGroup {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.metrics, &other.metrics) && self.labels == other.labels
    }
}

impl MetricGroup {
    /// A group that belongs to no task (for tests and tools); what is registered in it is
    /// counted but reported nowhere.
    pub fn detached() -> Self {
        Self {
            labels: Vec::new(),
            metrics: Arc::default(),
        }
    }

    /// A sub-group whose metrics carry the label `key = value` (Flink's
    /// `addGroup(key, value)`).
    pub fn add_group(&self, key: impl Into<String>, value: impl Into<String>) -> Self {
        let mut labels = self.labels.clone();
        labels.push((key.into(), value.into()));
        Self {
            labels,
            metrics: self.metrics.clone(),
        }
    }

    /// The counter `name` of this group, registered on first use.
    pub fn counter(&self, name: impl Into<String>) -> Counter {
        let name = name.into();
        match self.register(&name, || UserMetric::Counter(Counter::default())) {
            UserMetric::Counter(counter) => counter,
            // The name is taken by a gauge: a working counter that is not reported beats
            // failing the job over a metric.
            UserMetric::Gauge(_) => {
                tracing::warn!(metric = %name, "a gauge has this name; the counter is not reported");
                Counter::default()
            }
        }
    }

    /// The gauge `name` of this group, registered on first use.
    pub fn gauge(&self, name: impl Into<String>) -> Gauge {
        let name = name.into();
        match self.register(&name, || UserMetric::Gauge(Gauge::default())) {
            UserMetric::Gauge(gauge) => gauge,
            UserMetric::Counter(_) => {
                tracing::warn!(metric = %name, "a counter has this name; the gauge is not reported");
                Gauge::default()
            }
        }
    }

    /// The metric registered as `name` with this group's labels, or a new one from `make`.
    fn register(&self, name: &str, make: impl FnOnce() -> UserMetric) -> UserMetric {
        let mut metrics = self
            .metrics
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(found) = metrics
            .iter()
            .find(|m| m.name == name && m.labels == self.labels)
        {
            return found.metric.clone();
        }
        let metric = make();
        metrics.push(RegisteredMetric {
            labels: self.labels.clone(),
            name: name.to_string(),
            metric: metric.clone(),
        });
        metric
    }

    /// Every metric registered so far.
    pub(crate) fn registered(&self) -> Vec<RegisteredMetric> {
        self.metrics
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_groups_share_the_registry_and_keep_their_labels() {
        let group = MetricGroup::detached();
        group.add_group("partition", "0").gauge("lag").set(5);
        group.add_group("partition", "1").gauge("lag").set(7);
        group.counter("n").inc_by(3);
        let mut seen: Vec<(Vec<(String, String)>, String)> = group
            .registered()
            .into_iter()
            .map(|m| (m.labels, m.name))
            .collect();
        seen.sort();
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[0].1, "n");
        assert_eq!(seen[1].0, vec![("partition".into(), "0".into())]);
        assert_eq!(group.add_group("partition", "1").gauge("lag").get(), 7);
    }

    #[test]
    fn a_name_taken_by_another_kind_gives_an_unreported_handle() {
        let group = MetricGroup::detached();
        group.counter("x").inc();
        let gauge = group.gauge("x");
        gauge.set(9);
        assert_eq!(group.registered().len(), 1);
        assert_eq!(group.counter("x").get(), 1);
    }
}
