//! Live metrics of running jobs, named as Flink names them so that dashboards and alerts
//! carry over: per subtask `numRecordsIn`/`Out`, `numBytesIn`/`Out`,
//! `busyTimeMsPerSecond`, `idleTimeMsPerSecond`, `backPressuredTimeMsPerSecond`,
//! `inputQueueLength`, `outputQueueLength`, `currentInputWatermark`; per job `uptime`,
//! `numRestarts` and the checkpoint counts and sizes; and what operators and connectors
//! register in their [`MetricGroup`].
//!
//! Tasks update atomics; each process's [`MetricRegistry`] samples them into plain
//! [`SubtaskSample`]s, which TaskManagers send to the JobManager; its [`MetricStore`]
//! derives rates and history, serves the REST API and is exposed to Prometheus
//! ([`PrometheusExport`]).

mod handles;
mod prometheus;
mod registry;
mod sample;
mod store;
mod task_metrics;

pub use handles::{Counter, Gauge, MetricGroup};
pub use prometheus::{JobExport, JobMetrics, PrometheusExport};
pub use registry::MetricRegistry;
pub use sample::{MetricKind, OperatorSample, SubtaskSample, SubtaskState, UserMetricSample};
pub use store::{
    BackpressureLevel, MetricStore, StoredSubtask, SubtaskRates, ThroughputPoint, VertexMetrics,
    VertexThroughput,
};
pub(crate) use task_metrics::{CurrentTask, TaskOutcome};
pub use task_metrics::{OperatorMetricGroup, TaskMetrics};
