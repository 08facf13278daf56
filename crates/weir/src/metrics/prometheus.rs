//! Prometheus text exposition of a job's metrics, encoded by the `prometheus-client` crate
//! from the JobManager's [`MetricStore`](super::MetricStore) at each scrape — the
//! subtasks of every TaskManager in one place, labelled as Flink's `PrometheusReporter`
//! labels them (`job_id`, `job_name`, `task_name`, `subtask_index`, `operator_name`).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};

use super::sample::MetricKind;
use super::store::StoredSubtask;

/// Job-level metrics, as the JobManager knows them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobMetrics {
    /// Milliseconds since the job started — Flink's `uptime`.
    pub uptime_ms: u64,
    /// Restarts so far — `numRestarts`.
    pub restarts: u64,
    /// Completed checkpoints — `numberOfCompletedCheckpoints`.
    pub completed_checkpoints: u64,
    /// Failed checkpoints — `numberOfFailedCheckpoints`.
    pub failed_checkpoints: u64,
    /// Checkpoints in progress — `numberOfInProgressCheckpoints`.
    pub in_progress_checkpoints: u64,
    /// Duration of the last completed checkpoint — `lastCheckpointDuration`.
    pub last_checkpoint_duration_ms: Option<u64>,
    /// State size of the last completed checkpoint — `lastCheckpointSize`.
    pub last_checkpoint_size_bytes: Option<u64>,
    /// Longest barrier alignment of the last completed checkpoint.
    pub last_checkpoint_alignment_ms: Option<u64>,
}

/// One job's metrics for a scrape.
#[derive(Debug, Clone)]
pub struct JobExport {
    /// The job's id.
    pub job_id: String,
    /// The job's name.
    pub job_name: String,
    /// Job-level values.
    pub job: JobMetrics,
    /// Every subtask's latest sample.
    pub subtasks: Vec<StoredSubtask>,
}

impl JobExport {
    fn labels(&self) -> Labels {
        vec![
            label("job_id", &self.job_id),
            label("job_name", &self.job_name),
        ]
    }

    fn task_labels(&self, s: &StoredSubtask) -> Labels {
        let mut labels = self.labels();
        labels.push(label("task_name", &s.sample.name));
        labels.push(label("subtask_index", &s.sample.subtask.to_string()));
        if let Some(tm) = &s.taskmanager {
            labels.push(label("tm_id", tm));
        }
        labels
    }
}

/// What one scrape exposes: the metrics of every job served, each family once.
#[derive(Debug, Clone, Default)]
pub struct PrometheusExport {
    /// The jobs.
    pub jobs: Vec<JobExport>,
}

impl PrometheusExport {
    /// The metrics in the Prometheus text format (OpenMetrics).
    pub fn encode(self) -> Result<String, std::fmt::Error> {
        let mut registry = Registry::with_prefix("weir");
        registry.register_collector(Box::new(self));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry)?;
        Ok(text)
    }
}

type Labels = Vec<(String, String)>;

/// The values of one user metric name over every operator subtask.
type UserFamily = (String, MetricKind, Vec<(Labels, f64)>);

/// One metric family: its name, help and per-label-set values.
struct Family<'a> {
    name: &'a str,
    help: &'a str,
    counter: bool,
    values: Vec<(Labels, f64)>,
}

impl Family<'_> {
    fn encode(&self, encoder: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        if self.values.is_empty() {
            return Ok(());
        }
        let kind = if self.counter {
            prometheus_client::metrics::MetricType::Counter
        } else {
            prometheus_client::metrics::MetricType::Gauge
        };
        let mut family = encoder.encode_descriptor(self.name, self.help, None, kind)?;
        for (labels, value) in &self.values {
            let metric = family.encode_family(labels)?;
            if self.counter {
                ConstCounter::new(*value as u64).encode(metric)?;
            } else {
                ConstGauge::new(*value).encode(metric)?;
            }
        }
        Ok(())
    }
}

type JobPick = fn(&JobMetrics) -> Option<f64>;
type TaskPick = fn(&StoredSubtask) -> Option<f64>;

const JOB_FAMILIES: [(&str, &str, bool, JobPick); 8] = [
    (
        "job_uptime",
        "Milliseconds since the job started.",
        false,
        |j| Some(j.uptime_ms as f64),
    ),
    ("job_numRestarts", "Restarts of the job.", true, |j| {
        Some(j.restarts as f64)
    }),
    (
        "job_numberOfCompletedCheckpoints",
        "Completed checkpoints.",
        true,
        |j| Some(j.completed_checkpoints as f64),
    ),
    (
        "job_numberOfFailedCheckpoints",
        "Failed checkpoints.",
        true,
        |j| Some(j.failed_checkpoints as f64),
    ),
    (
        "job_numberOfInProgressCheckpoints",
        "Checkpoints in progress.",
        false,
        |j| Some(j.in_progress_checkpoints as f64),
    ),
    (
        "job_lastCheckpointDuration",
        "Milliseconds the last completed checkpoint took.",
        false,
        |j| j.last_checkpoint_duration_ms.map(|v| v as f64),
    ),
    (
        "job_lastCheckpointSize",
        "Bytes of state in the last completed checkpoint.",
        false,
        |j| j.last_checkpoint_size_bytes.map(|v| v as f64),
    ),
    (
        "job_lastCheckpointAlignmentTime",
        "Longest barrier alignment, in milliseconds, of the last completed checkpoint.",
        false,
        |j| j.last_checkpoint_alignment_ms.map(|v| v as f64),
    ),
];

const TASK_FAMILIES: [(&str, &str, bool, TaskPick); 16] = [
    (
        "task_numRecordsIn",
        "Records the subtask received.",
        true,
        |s| Some(s.sample.records_in as f64),
    ),
    (
        "task_numRecordsOut",
        "Records the subtask sent downstream.",
        true,
        |s| Some(s.sample.records_out as f64),
    ),
    (
        "task_numBytesIn",
        "Bytes the subtask received over the network.",
        true,
        |s| Some(s.sample.bytes_in as f64),
    ),
    (
        "task_numBytesOut",
        "Bytes the subtask sent over the network.",
        true,
        |s| Some(s.sample.bytes_out as f64),
    ),
    (
        "task_numRecordsInPerSecond",
        "Records received per second.",
        false,
        |s| Some(s.rates.records_in_per_second),
    ),
    (
        "task_numRecordsOutPerSecond",
        "Records sent per second.",
        false,
        |s| Some(s.rates.records_out_per_second),
    ),
    (
        "task_numBytesInPerSecond",
        "Bytes received over the network per second.",
        false,
        |s| Some(s.rates.bytes_in_per_second),
    ),
    (
        "task_numBytesOutPerSecond",
        "Bytes sent over the network per second.",
        false,
        |s| Some(s.rates.bytes_out_per_second),
    ),
    (
        "task_busyTimeMsPerSecond",
        "Milliseconds per second neither idle nor backpressured.",
        false,
        |s| Some(s.rates.busy_time_ms_per_second),
    ),
    (
        "task_idleTimeMsPerSecond",
        "Milliseconds per second waiting for input.",
        false,
        |s| Some(s.rates.idle_time_ms_per_second),
    ),
    (
        "task_backPressuredTimeMsPerSecond",
        "Milliseconds per second waiting for room downstream.",
        false,
        |s| Some(s.rates.back_pressured_time_ms_per_second),
    ),
    (
        "task_inputQueueLength",
        "Elements waiting in the input channels.",
        false,
        |s| Some(s.sample.input_queue as f64),
    ),
    (
        "task_outputQueueLength",
        "Elements waiting in the output channels.",
        false,
        |s| Some(s.sample.output_queue as f64),
    ),
    (
        "task_uptime",
        "Milliseconds the subtask has run.",
        false,
        |s| Some(s.sample.uptime_ms as f64),
    ),
    (
        "task_attempt",
        "The run attempt of the subtask.",
        false,
        |s| Some(s.sample.attempt as f64),
    ),
    (
        "task_currentInputWatermark",
        "The watermark of the chain's head, in milliseconds.",
        false,
        |s| s.sample.input_watermark.map(|w| w as f64),
    ),
];

impl Collector for PrometheusExport {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        for (name, help, counter, pick) in JOB_FAMILIES {
            let values = self
                .jobs
                .iter()
                .filter_map(|j| pick(&j.job).map(|v| (j.labels(), v)))
                .collect();
            Family {
                name,
                help,
                counter,
                values,
            }
            .encode(&mut encoder)?;
        }
        for (name, help, counter, pick) in TASK_FAMILIES {
            let values = self
                .jobs
                .iter()
                .flat_map(|j| {
                    j.subtasks
                        .iter()
                        .filter_map(move |s| pick(s).map(|v| (j.task_labels(s), v)))
                })
                .collect();
            Family {
                name,
                help,
                counter,
                values,
            }
            .encode(&mut encoder)?;
        }
        // Operators: the built-in counts, then what their code registered, one family per
        // name.
        let mut records_in = Vec::new();
        let mut records_out = Vec::new();
        let mut records_in_rate = Vec::new();
        let mut records_out_rate = Vec::new();
        let mut watermarks = Vec::new();
        let mut user: Vec<UserFamily> = Vec::new();
        for j in &self.jobs {
            for s in &j.subtasks {
                for op in &s.sample.operators {
                    let mut labels = j.task_labels(s);
                    labels.push(label("operator_name", &op.name));
                    records_in.push((labels.clone(), op.records_in as f64));
                    records_out.push((labels.clone(), op.records_out as f64));
                    if let Some(rates) = s.operator_rates.iter().find(|r| r.node == op.node) {
                        records_in_rate.push((labels.clone(), rates.records_in_per_second));
                        records_out_rate.push((labels.clone(), rates.records_out_per_second));
                    }
                    if let Some(w) = op.watermark {
                        watermarks.push((labels.clone(), w as f64));
                    }
                    for m in &op.user {
                        let mut labels = labels.clone();
                        labels.extend(m.labels.iter().map(|(k, v)| label(k, v)));
                        let name = sanitize(&m.name);
                        match user.iter_mut().find(|(n, k, _)| *n == name && *k == m.kind) {
                            Some((_, _, values)) => values.push((labels, m.value as f64)),
                            None => user.push((name, m.kind, vec![(labels, m.value as f64)])),
                        }
                    }
                }
            }
        }
        let operator_families = [
            (
                "operator_numRecordsIn",
                "Records the operator received.",
                true,
                records_in,
            ),
            (
                "operator_numRecordsOut",
                "Records the operator emitted.",
                true,
                records_out,
            ),
            (
                "operator_numRecordsInPerSecond",
                "Records the operator received per second.",
                false,
                records_in_rate,
            ),
            (
                "operator_numRecordsOutPerSecond",
                "Records the operator emitted per second.",
                false,
                records_out_rate,
            ),
            (
                "operator_currentInputWatermark",
                "The operator's last watermark, in milliseconds.",
                false,
                watermarks,
            ),
        ];
        for (name, help, counter, values) in operator_families {
            Family {
                name,
                help,
                counter,
                values,
            }
            .encode(&mut encoder)?;
        }
        for (name, kind, values) in user {
            let name = format!("operator_{name}");
            let counter = kind == MetricKind::Counter;
            Family {
                name: &name,
                help: "Registered by the operator.",
                counter,
                values,
            }
            .encode(&mut encoder)?;
        }
        Ok(())
    }
}

/// A label, its value escaped as the text format requires (the encoder writes values as
/// they are).
fn label(key: &str, value: &str) -> (String, String) {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    (sanitize(key), escaped)
}

/// A metric name Prometheus accepts: letters, digits and underscores.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::sample::{OperatorSample, SubtaskSample, SubtaskState, UserMetricSample};
    use crate::metrics::store::{OperatorRates, SubtaskRates};

    #[test]
    fn exposes_job_task_operator_and_user_metrics_with_labels() {
        let sample = SubtaskSample {
            vertex: 0,
            subtask: 1,
            name: "Source: numbers -> map (2/2)".into(),
            attempt: 1,
            state: SubtaskState::Running,
            uptime_ms: 1000,
            records_in: 42,
            records_out: 40,
            bytes_in: 0,
            bytes_out: 0,
            idle_ms: 0,
            backpressured_ms: 0,
            input_queue: 3,
            output_queue: 0,
            input_watermark: None,
            operators: vec![OperatorSample {
                node: 1,
                name: "map".into(),
                records_in: 42,
                records_out: 40,
                watermark: Some(7),
                user: vec![UserMetricSample {
                    name: "records-lag".into(),
                    labels: vec![("partition".into(), "0".into())],
                    kind: MetricKind::Gauge,
                    value: 12,
                }],
            }],
        };
        let export = PrometheusExport {
            jobs: vec![JobExport {
                job_id: "abc".into(),
                job_name: "numbers \"quoted\"".into(),
                job: JobMetrics {
                    restarts: 2,
                    last_checkpoint_duration_ms: Some(15),
                    ..JobMetrics::default()
                },
                subtasks: vec![StoredSubtask {
                    sample,
                    rates: SubtaskRates {
                        records_in_per_second: 42.0,
                        ..SubtaskRates::default()
                    },
                    operator_rates: vec![OperatorRates {
                        node: 1,
                        records_in_per_second: 42.0,
                        records_out_per_second: 40.0,
                    }],
                    taskmanager: None,
                }],
            }],
        };
        let text = export.encode().unwrap();
        assert!(
            text.contains(
                "weir_job_numRestarts_total{job_id=\"abc\",job_name=\"numbers \\\"quoted\\\"\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains("weir_job_lastCheckpointDuration{job_id=\"abc\""),
            "{text}"
        );
        assert!(!text.contains("weir_job_lastCheckpointSize"), "{text}");
        assert!(text.contains("weir_task_numRecordsIn_total{job_id=\"abc\",job_name=\"numbers \\\"quoted\\\"\",task_name=\"Source: numbers -> map (2/2)\",subtask_index=\"1\"} 42"), "{text}");
        assert!(text.contains("weir_task_inputQueueLength{"), "{text}");
        assert!(
            text.contains("weir_operator_numRecordsOutPerSecond{")
                && text.contains("operator_name=\"map\"} 40"),
            "{text}"
        );
        assert!(!text.contains("weir_task_currentInputWatermark"), "{text}");
        assert!(
            text.contains("weir_operator_currentInputWatermark{"),
            "{text}"
        );
        assert!(
            text.contains("weir_operator_records_lag{") && text.contains("partition=\"0\"} 12"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
