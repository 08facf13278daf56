//! Metric values at one moment, as plain data: what a TaskManager sends to the
//! JobManager, and what the JobManager's [`MetricStore`](super::MetricStore) keeps.

use serde::{Deserialize, Serialize};

use super::handles::{RegisteredMetric, UserMetric};

/// Where a subtask is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SubtaskState {
    /// Running.
    Running,
    /// Ended after its input ended (or its job stopped).
    Finished,
    /// Failed.
    Failed,
    /// Cancelled.
    Canceled,
}

/// The metrics of one subtask at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubtaskSample {
    /// Its job vertex (index in the JobGraph).
    pub vertex: u32,
    /// Zero-based subtask index.
    pub subtask: u32,
    /// The task's name, `chain (i/p)`.
    pub name: String,
    /// The run attempt it belongs to.
    pub attempt: u64,
    /// Where it is in its life.
    pub state: SubtaskState,
    /// Milliseconds since it was deployed.
    pub uptime_ms: u64,
    /// Records received (a source: records its reader emitted) — Flink's `numRecordsIn`.
    pub records_in: u64,
    /// Records sent downstream — `numRecordsOut`.
    pub records_out: u64,
    /// Bytes received over the network — `numBytesIn` (channels inside a process carry
    /// records, not bytes, and count none).
    pub bytes_in: u64,
    /// Bytes sent over the network — `numBytesOut`.
    pub bytes_out: u64,
    /// Milliseconds spent waiting for input since it started.
    pub idle_ms: u64,
    /// Milliseconds spent waiting for room downstream since it started.
    pub backpressured_ms: u64,
    /// Elements waiting in its input channels — `inputQueueLength`.
    pub input_queue: u64,
    /// Elements waiting in its output channels — `outputQueueLength`.
    pub output_queue: u64,
    /// The watermark of its chain's head — `currentInputWatermark`.
    pub input_watermark: Option<i64>,
    /// Its chain's operators.
    pub operators: Vec<OperatorSample>,
}

/// The metrics of one operator of a subtask's chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperatorSample {
    /// The operator's node (index in the StreamGraph).
    pub node: u32,
    /// Its name.
    pub name: String,
    /// Records received.
    pub records_in: u64,
    /// Records emitted.
    pub records_out: u64,
    /// The last watermark received (a source: emitted).
    pub watermark: Option<i64>,
    /// What its code registered (connectors' lag, commit latency, …).
    pub user: Vec<UserMetricSample>,
}

/// The kind of a user metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricKind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
}

/// One registered metric's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserMetricSample {
    /// Its name.
    pub name: String,
    /// Its labels (`addGroup(key, value)`).
    pub labels: Vec<(String, String)>,
    /// Counter or gauge.
    pub kind: MetricKind,
    /// The value.
    pub value: i64,
}

impl UserMetricSample {
    pub(crate) fn of(metric: &RegisteredMetric) -> Self {
        let (kind, value) = match &metric.metric {
            UserMetric::Counter(c) => (
                MetricKind::Counter,
                i64::try_from(c.get()).unwrap_or(i64::MAX),
            ),
            UserMetric::Gauge(g) => (MetricKind::Gauge, g.get()),
        };
        Self {
            name: metric.name.clone(),
            labels: metric.labels.clone(),
            kind,
            value,
        }
    }
}
