//! Jobs, their vertices and subtasks.

use serde::Serialize;
use utoipa::ToSchema;
use weir::metrics::{BackpressureLevel, StoredSubtask, VertexMetrics};
use weir::runtime::job_master::{JobDetails, JobState, VertexDetails};

/// A job state, as Flink names it.
pub fn state_name(state: JobState) -> &'static str {
    match state {
        JobState::Created => "CREATED",
        JobState::Running => "RUNNING",
        JobState::Failing => "FAILING",
        JobState::Restarting => "RESTARTING",
        JobState::Cancelling => "CANCELLING",
        JobState::Finished => "FINISHED",
        JobState::Canceled => "CANCELED",
        JobState::Failed => "FAILED",
    }
}

/// `GET /jobs`: every job's id and state.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobIdsWithStatus {
    /// The jobs.
    pub jobs: Vec<JobIdWithStatus>,
}

/// One job's id and state.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobIdWithStatus {
    /// The job id (32 hex digits).
    pub id: String,
    /// `CREATED`, `RUNNING`, `FAILING`, `RESTARTING`, `CANCELLING`, `FINISHED`, `CANCELED`
    /// or `FAILED`.
    pub status: String,
}

/// `GET /jobs/overview`: a summary of every job.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobsOverview {
    /// The jobs.
    pub jobs: Vec<JobSummary>,
}

/// One job in the overview.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobSummary {
    /// The job id.
    pub jid: String,
    /// The job's name.
    pub name: String,
    /// Its state.
    pub state: String,
    /// Start, in milliseconds since the Unix epoch.
    #[serde(rename = "start-time")]
    pub start_time: u64,
    /// End, in milliseconds since the Unix epoch (-1: running).
    #[serde(rename = "end-time")]
    pub end_time: i64,
    /// Milliseconds it ran.
    pub duration: u64,
    /// Subtasks, counted by state.
    pub tasks: TaskCounts,
}

/// Subtasks by state.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct TaskCounts {
    /// Running.
    pub running: u32,
    /// Finished.
    pub finished: u32,
    /// Cancelled.
    pub canceled: u32,
    /// Failed.
    pub failed: u32,
    /// All.
    pub total: u32,
}

/// `GET /jobs/{id}`: a job with its vertices.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobDetailsInfo {
    /// The job id.
    pub jid: String,
    /// The job's name.
    pub name: String,
    /// Its state.
    pub state: String,
    /// Start, in milliseconds since the Unix epoch.
    #[serde(rename = "start-time")]
    pub start_time: u64,
    /// End (-1: running).
    #[serde(rename = "end-time")]
    pub end_time: i64,
    /// Milliseconds it ran.
    pub duration: u64,
    /// Now, in milliseconds since the Unix epoch.
    pub now: u64,
    /// Restarts so far.
    #[serde(rename = "num-restarts")]
    pub num_restarts: u64,
    /// The vertices (operator chains) of the JobGraph.
    pub vertices: Vec<JobVertexInfo>,
}

/// A vertex of a job.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobVertexInfo {
    /// The vertex id.
    pub id: String,
    /// The chain's name.
    pub name: String,
    /// Its parallelism.
    pub parallelism: u32,
    /// Its operators, in chain order.
    pub operators: Vec<String>,
    /// Its state: that of its subtasks (`CREATED` before any reported).
    pub status: String,
    /// Counts and rates over its subtasks.
    pub metrics: VertexIoMetrics,
    /// `OK`, `LOW` or `HIGH`, from its most backpressured subtask.
    #[serde(rename = "backpressure-level")]
    pub backpressure_level: String,
}

/// Counts and rates of a vertex or subtask, as Flink's job graph shows them.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct VertexIoMetrics {
    /// Records received.
    #[serde(rename = "read-records")]
    pub read_records: u64,
    /// Records sent downstream.
    #[serde(rename = "write-records")]
    pub write_records: u64,
    /// Bytes received over the network.
    #[serde(rename = "read-bytes")]
    pub read_bytes: u64,
    /// Bytes sent over the network.
    #[serde(rename = "write-bytes")]
    pub write_bytes: u64,
    /// Records received per second.
    #[serde(rename = "read-records-per-second")]
    pub read_records_per_second: f64,
    /// Records sent per second.
    #[serde(rename = "write-records-per-second")]
    pub write_records_per_second: f64,
    /// Busy milliseconds per second (the highest subtask's, for a vertex).
    #[serde(rename = "accumulated-busy-time")]
    pub busy_time_ms_per_second: f64,
    /// Idle milliseconds per second.
    #[serde(rename = "accumulated-idle-time")]
    pub idle_time_ms_per_second: f64,
    /// Backpressured milliseconds per second.
    #[serde(rename = "accumulated-backpressured-time")]
    pub backpressured_time_ms_per_second: f64,
    /// The lowest input watermark (milliseconds; absent before the first).
    #[serde(
        rename = "current-input-watermark",
        skip_serializing_if = "Option::is_none"
    )]
    pub watermark: Option<i64>,
    /// How far the watermark is behind processing time, in milliseconds (absent without a
    /// watermark, or once the input has ended and it is at the end of time).
    #[serde(rename = "watermark-lag", skip_serializing_if = "Option::is_none")]
    pub watermark_lag: Option<i64>,
}

/// How far `watermark` is behind `now` (both milliseconds since the Unix epoch), for a
/// watermark that is a point in time rather than the start or the end of time.
fn watermark_lag(watermark: Option<i64>, now: u64) -> Option<i64> {
    const END_OF_TIME: i64 = i64::MAX / 2;
    watermark
        .filter(|w| (-END_OF_TIME..END_OF_TIME).contains(w))
        .map(|w| (now as i64).saturating_sub(w))
}

impl VertexIoMetrics {
    fn of_vertex(m: &VertexMetrics, now: u64) -> Self {
        Self {
            read_records: m.records_in,
            write_records: m.records_out,
            read_bytes: m.bytes_in,
            write_bytes: m.bytes_out,
            read_records_per_second: m.rates.records_in_per_second,
            write_records_per_second: m.rates.records_out_per_second,
            busy_time_ms_per_second: m.rates.busy_time_ms_per_second,
            idle_time_ms_per_second: m.rates.idle_time_ms_per_second,
            backpressured_time_ms_per_second: m.rates.back_pressured_time_ms_per_second,
            watermark: m.watermark,
            watermark_lag: watermark_lag(m.watermark, now),
        }
    }

    fn of_subtask(s: &StoredSubtask, now: u64) -> Self {
        Self {
            read_records: s.sample.records_in,
            write_records: s.sample.records_out,
            read_bytes: s.sample.bytes_in,
            write_bytes: s.sample.bytes_out,
            read_records_per_second: s.rates.records_in_per_second,
            write_records_per_second: s.rates.records_out_per_second,
            busy_time_ms_per_second: s.rates.busy_time_ms_per_second,
            idle_time_ms_per_second: s.rates.idle_time_ms_per_second,
            backpressured_time_ms_per_second: s.rates.back_pressured_time_ms_per_second,
            watermark: s.sample.input_watermark,
            watermark_lag: watermark_lag(s.sample.input_watermark, now),
        }
    }
}

fn level_name(level: BackpressureLevel) -> &'static str {
    match level {
        BackpressureLevel::Ok => "OK",
        BackpressureLevel::Low => "LOW",
        BackpressureLevel::High => "HIGH",
    }
}

fn subtask_state(s: &StoredSubtask) -> &'static str {
    match s.sample.state {
        weir::metrics::SubtaskState::Running => "RUNNING",
        weir::metrics::SubtaskState::Finished => "FINISHED",
        weir::metrics::SubtaskState::Failed => "FAILED",
        weir::metrics::SubtaskState::Canceled => "CANCELED",
    }
}

fn vertex_status(v: &VertexDetails) -> &'static str {
    let states: Vec<&str> = v.subtasks.iter().map(subtask_state).collect();
    if states.is_empty() {
        "CREATED"
    } else if states.contains(&"FAILED") {
        "FAILED"
    } else if states.contains(&"RUNNING") {
        "RUNNING"
    } else if states.contains(&"CANCELED") {
        "CANCELED"
    } else {
        "FINISHED"
    }
}

/// Subtasks of `details` by state.
pub fn task_counts(details: &JobDetails) -> TaskCounts {
    let mut counts = TaskCounts::default();
    for v in &details.vertices {
        counts.total += v.parallelism;
        for s in &v.subtasks {
            match s.sample.state {
                weir::metrics::SubtaskState::Running => counts.running += 1,
                weir::metrics::SubtaskState::Finished => counts.finished += 1,
                weir::metrics::SubtaskState::Canceled => counts.canceled += 1,
                weir::metrics::SubtaskState::Failed => counts.failed += 1,
            }
        }
    }
    counts
}

fn end_time(details: &JobDetails) -> i64 {
    details.end_time.map_or(-1, |t| t as i64)
}

fn duration(details: &JobDetails, now: u64) -> u64 {
    details
        .end_time
        .unwrap_or(now)
        .saturating_sub(details.start_time)
}

impl JobSummary {
    /// The summary of `details` at `now`.
    pub fn of(details: &JobDetails, now: u64) -> Self {
        Self {
            jid: details.job_id.clone(),
            name: details.name.clone(),
            state: state_name(details.state).into(),
            start_time: details.start_time,
            end_time: end_time(details),
            duration: duration(details, now),
            tasks: task_counts(details),
        }
    }
}

impl JobVertexInfo {
    /// The vertex `v` at `now`.
    pub fn of(v: &VertexDetails, now: u64) -> Self {
        let metrics = v.metrics.clone().unwrap_or_default();
        Self {
            id: v.id.to_string(),
            name: v.name.clone(),
            parallelism: v.parallelism,
            operators: v.operators.clone(),
            status: vertex_status(v).into(),
            metrics: VertexIoMetrics::of_vertex(&metrics, now),
            backpressure_level: level_name(metrics.backpressure_level()).into(),
        }
    }
}

impl JobDetailsInfo {
    /// The details of `details` at `now`.
    pub fn of(details: &JobDetails, now: u64) -> Self {
        Self {
            jid: details.job_id.clone(),
            name: details.name.clone(),
            state: state_name(details.state).into(),
            start_time: details.start_time,
            end_time: end_time(details),
            duration: duration(details, now),
            now,
            num_restarts: details.metrics.restarts,
            vertices: details
                .vertices
                .iter()
                .map(|v| JobVertexInfo::of(v, now))
                .collect(),
        }
    }
}

/// `GET /jobs/{id}/vertices/{vid}`: a vertex with its subtasks.
#[derive(Debug, Serialize, ToSchema)]
pub struct VertexDetailsInfo {
    /// The vertex id.
    pub id: String,
    /// The chain's name.
    pub name: String,
    /// Its parallelism.
    pub parallelism: u32,
    /// Now, in milliseconds since the Unix epoch.
    pub now: u64,
    /// Its subtasks.
    pub subtasks: Vec<SubtaskInfo>,
}

/// One subtask of a vertex.
#[derive(Debug, Serialize, ToSchema)]
pub struct SubtaskInfo {
    /// Its index.
    pub subtask: u32,
    /// Its state.
    pub status: String,
    /// The run attempt it belongs to.
    pub attempt: u64,
    /// The TaskManager it runs on (`local` in a mini-cluster).
    #[serde(rename = "taskmanager-id")]
    pub taskmanager_id: String,
    /// Milliseconds it has run.
    pub duration: u64,
    /// Its counts and rates.
    pub metrics: VertexIoMetrics,
    /// Elements waiting in its input channels.
    #[serde(rename = "input-queue-length")]
    pub input_queue_length: u64,
    /// Elements waiting in its output channels.
    #[serde(rename = "output-queue-length")]
    pub output_queue_length: u64,
    /// `OK`, `LOW` or `HIGH`.
    #[serde(rename = "backpressure-level")]
    pub backpressure_level: String,
    /// Its chain's operators.
    pub operators: Vec<OperatorInfo>,
}

/// One operator of a subtask's chain.
#[derive(Debug, Serialize, ToSchema)]
pub struct OperatorInfo {
    /// Its name.
    pub name: String,
    /// Records received.
    #[serde(rename = "read-records")]
    pub read_records: u64,
    /// Records emitted.
    #[serde(rename = "write-records")]
    pub write_records: u64,
    /// Records received per second, over the last sampling interval.
    #[serde(rename = "read-records-per-second")]
    pub read_records_per_second: f64,
    /// Records emitted per second, over the last sampling interval.
    #[serde(rename = "write-records-per-second")]
    pub write_records_per_second: f64,
    /// Its last watermark (milliseconds).
    #[serde(
        rename = "current-input-watermark",
        skip_serializing_if = "Option::is_none"
    )]
    pub watermark: Option<i64>,
    /// What its code registered: name (with its labels) to value.
    pub metrics: Vec<NamedValue>,
}

/// A metric's name and value.
#[derive(Debug, Serialize, ToSchema)]
pub struct NamedValue {
    /// The name, with its labels as `name{key=value}`.
    pub id: String,
    /// The value.
    pub value: i64,
}

impl SubtaskInfo {
    /// The subtask `s` at `now`.
    pub fn of(s: &StoredSubtask, now: u64) -> Self {
        Self {
            subtask: s.sample.subtask,
            status: subtask_state(s).into(),
            attempt: s.sample.attempt,
            taskmanager_id: s.taskmanager.clone().unwrap_or_else(|| "local".into()),
            duration: s.sample.uptime_ms,
            metrics: VertexIoMetrics::of_subtask(s, now),
            input_queue_length: s.sample.input_queue,
            output_queue_length: s.sample.output_queue,
            backpressure_level: level_name(BackpressureLevel::of(
                s.rates.back_pressured_time_ms_per_second,
            ))
            .into(),
            operators: s
                .sample
                .operators
                .iter()
                .map(|o| {
                    let rates = s.operator_rates.iter().find(|r| r.node == o.node);
                    OperatorInfo {
                        name: o.name.clone(),
                        read_records: o.records_in,
                        write_records: o.records_out,
                        read_records_per_second: rates.map_or(0.0, |r| r.records_in_per_second),
                        write_records_per_second: rates.map_or(0.0, |r| r.records_out_per_second),
                        watermark: o.watermark,
                        metrics: o
                            .user
                            .iter()
                            .map(|m| NamedValue {
                                id: if m.labels.is_empty() {
                                    m.name.clone()
                                } else {
                                    let labels: Vec<String> =
                                        m.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                                    format!("{}{{{}}}", m.name, labels.join(","))
                                },
                                value: m.value,
                            })
                            .collect(),
                    }
                })
                .collect(),
        }
    }
}

impl VertexDetailsInfo {
    /// The vertex `v` at `now`.
    pub fn of(v: &VertexDetails, now: u64) -> Self {
        Self {
            id: v.id.to_string(),
            name: v.name.clone(),
            parallelism: v.parallelism,
            now,
            subtasks: v.subtasks.iter().map(|s| SubtaskInfo::of(s, now)).collect(),
        }
    }
}

/// `GET /jobs/{id}/vertices/{vid}/backpressure`: Flink's backpressure view.
#[derive(Debug, Serialize, ToSchema)]
pub struct BackpressureInfo {
    /// `ok` once measured, `deprecated` never (kept for Flink's clients).
    pub status: String,
    /// `OK`, `LOW` or `HIGH`: the worst subtask's.
    #[serde(rename = "backpressure-level")]
    pub backpressure_level: String,
    /// When it was measured, in milliseconds since the Unix epoch.
    #[serde(rename = "end-timestamp")]
    pub end_timestamp: u64,
    /// Per subtask.
    pub subtasks: Vec<SubtaskBackpressure>,
}

/// One subtask's backpressure.
#[derive(Debug, Serialize, ToSchema)]
pub struct SubtaskBackpressure {
    /// Its index.
    pub subtask: u32,
    /// `OK`, `LOW` or `HIGH`.
    #[serde(rename = "backpressure-level")]
    pub backpressure_level: String,
    /// Share of time backpressured (0 to 1).
    pub ratio: f64,
    /// Share of time idle.
    #[serde(rename = "idleRatio")]
    pub idle_ratio: f64,
    /// Share of time busy.
    #[serde(rename = "busyRatio")]
    pub busy_ratio: f64,
}

impl BackpressureInfo {
    /// The backpressure of `v` at `now`.
    pub fn of(v: &VertexDetails, now: u64) -> Self {
        let level = v
            .metrics
            .as_ref()
            .map_or(BackpressureLevel::Ok, VertexMetrics::backpressure_level);
        Self {
            status: "ok".into(),
            backpressure_level: level_name(level).into(),
            end_timestamp: now,
            subtasks: v
                .subtasks
                .iter()
                .map(|s| SubtaskBackpressure {
                    subtask: s.sample.subtask,
                    backpressure_level: level_name(BackpressureLevel::of(
                        s.rates.back_pressured_time_ms_per_second,
                    ))
                    .into(),
                    ratio: s.rates.back_pressured_time_ms_per_second / 1000.0,
                    idle_ratio: s.rates.idle_time_ms_per_second / 1000.0,
                    busy_ratio: s.rates.busy_time_ms_per_second / 1000.0,
                })
                .collect(),
        }
    }
}

/// `GET /jobs/{id}/exceptions`: the job's failures (Flink's exception history).
#[derive(Debug, Serialize, ToSchema)]
pub struct JobExceptions {
    /// The newest failure's root cause, if any.
    #[serde(rename = "root-exception", skip_serializing_if = "Option::is_none")]
    pub root_exception: Option<String>,
    /// When it happened.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<u64>,
    /// Every failure kept, newest first.
    #[serde(rename = "exceptionHistory")]
    pub exception_history: ExceptionHistory,
}

/// The failures kept.
#[derive(Debug, Serialize, ToSchema)]
pub struct ExceptionHistory {
    /// Newest first.
    pub entries: Vec<ExceptionInfo>,
    /// Whether older ones were dropped.
    pub truncated: bool,
}

/// One failure.
#[derive(Debug, Serialize, ToSchema)]
pub struct ExceptionInfo {
    /// The root cause, naming the operator and subtask where known.
    #[serde(rename = "exceptionName")]
    pub exception_name: String,
    /// When, in milliseconds since the Unix epoch.
    pub timestamp: u64,
    /// Whether the job restarted after it.
    pub restarted: bool,
}

impl JobExceptions {
    /// The failures of `details`.
    pub fn of(details: &JobDetails) -> Self {
        let entries: Vec<ExceptionInfo> = details
            .exceptions
            .iter()
            .rev()
            .map(|e| ExceptionInfo {
                exception_name: e.exception.clone(),
                timestamp: e.timestamp,
                restarted: e.restarted,
            })
            .collect();
        Self {
            root_exception: entries.first().map(|e| e.exception_name.clone()),
            timestamp: entries.first().map(|e| e.timestamp),
            exception_history: ExceptionHistory {
                // The JobManager keeps the 16 newest (Flink's `web.exception-history-size`).
                truncated: entries.len() >= 16,
                entries,
            },
        }
    }
}

/// `GET /jobs/{id}/throughput`: records per second per vertex over time (the dashboard's
/// chart).
#[derive(Debug, Serialize, ToSchema)]
pub struct ThroughputHistory {
    /// Oldest first.
    pub points: Vec<ThroughputPointInfo>,
}

/// The vertices' rates at one moment.
#[derive(Debug, Serialize, ToSchema)]
pub struct ThroughputPointInfo {
    /// Milliseconds since the Unix epoch.
    pub timestamp: i64,
    /// Per vertex: id, records in and out per second.
    pub vertices: Vec<VertexRate>,
}

/// One vertex's rates.
#[derive(Debug, Serialize, ToSchema)]
pub struct VertexRate {
    /// The vertex id.
    pub id: String,
    /// Records received per second.
    #[serde(rename = "read-records-per-second")]
    pub read_records_per_second: f64,
    /// Records sent per second.
    #[serde(rename = "write-records-per-second")]
    pub write_records_per_second: f64,
}

impl ThroughputHistory {
    /// The throughput history of `details`.
    pub fn of(details: &JobDetails) -> Self {
        Self {
            points: details
                .throughput
                .iter()
                .map(|p| ThroughputPointInfo {
                    timestamp: p.timestamp,
                    vertices: p
                        .vertices
                        .iter()
                        .map(|v| VertexRate {
                            id: v.vertex.to_string(),
                            read_records_per_second: v.records_in_per_second,
                            write_records_per_second: v.records_out_per_second,
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}
