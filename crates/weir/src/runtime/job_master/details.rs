//! What the JobManager publishes about its job for the operating surface (Flink's
//! `ExecutionGraphInfo`): status, vertices with their live metrics, checkpoint history,
//! exceptions and restarts. The loop publishes a fresh [`JobDetails`] whenever something a
//! reader would notice changed, and at least at every metrics interval; readers (the REST
//! API, the job client) take the latest without waiting on the loop, and the last one stays
//! readable once the job has ended.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::{JobMaster, JobPhase};
use crate::checkpoint::stats::CheckpointHistory;
use crate::error::WeirError;
use crate::metrics::{JobMetrics, StoredSubtask, ThroughputPoint, VertexMetrics};

/// How many exceptions are kept (Flink's `web.exception-history-size` default).
pub(super) const EXCEPTION_HISTORY: usize = 16;

/// A job's state, as Flink's `JobStatus` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    /// Waiting for slots to deploy into.
    Created,
    /// Deployed and running (also while finishing or stopping with a savepoint).
    Running,
    /// A failure is being handled: the tasks are being cancelled.
    Failing,
    /// Waiting out the restart back-off.
    Restarting,
    /// Being cancelled.
    Cancelling,
    /// Every source ended and everything was processed, or the job was stopped with a
    /// savepoint.
    Finished,
    /// Cancelled.
    Canceled,
    /// Failed for good.
    Failed,
}

impl JobState {
    /// Whether the job is over.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Finished | Self::Canceled | Self::Failed)
    }
}

/// One failure of the job (Flink's exception history entry).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExceptionEntry {
    /// When it happened, in milliseconds since the Unix epoch.
    pub timestamp: u64,
    /// The root cause, naming the operator and subtask where it is known.
    pub exception: String,
    /// Whether the job restarted after it.
    pub restarted: bool,
}

/// One vertex (operator chain) of the JobGraph, with its live metrics.
#[derive(Debug, Clone, Serialize)]
pub struct VertexDetails {
    /// The vertex id (its index in the JobGraph).
    pub id: u32,
    /// The chain's name, its operators joined by ` -> `.
    pub name: String,
    /// Its parallelism.
    pub parallelism: u32,
    /// Its operators' names, in chain order.
    pub operators: Vec<String>,
    /// Its metrics over its subtasks (`None` before the first sample).
    pub metrics: Option<VertexMetrics>,
    /// Its subtasks' latest samples.
    pub subtasks: Vec<StoredSubtask>,
}

/// A job as its JobManager sees it at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct JobDetails {
    /// The job's id.
    pub job_id: String,
    /// The job's name.
    pub name: String,
    /// Its state.
    pub state: JobState,
    /// When it started, in milliseconds since the Unix epoch.
    pub start_time: u64,
    /// When it ended (`None`: running).
    pub end_time: Option<u64>,
    /// Job-level metrics: uptime, restarts, checkpoint counts and sizes.
    pub metrics: JobMetrics,
    /// The vertices, in JobGraph order.
    pub vertices: Vec<VertexDetails>,
    /// Recent checkpoints and the totals.
    pub checkpoints: CheckpointHistory,
    /// Failures, newest last.
    pub exceptions: Vec<ExceptionEntry>,
    /// Throughput per vertex over time, oldest first.
    pub throughput: Vec<ThroughputPoint>,
}

/// Where the JobManager publishes its job's latest details; clones share it.
#[derive(Debug, Clone)]
pub struct JobView {
    latest: Arc<Mutex<Arc<JobDetails>>>,
}

impl JobView {
    pub(crate) fn new(first: JobDetails) -> Self {
        Self {
            latest: Arc::new(Mutex::new(Arc::new(first))),
        }
    }

    /// The latest details published.
    pub fn latest(&self) -> Arc<JobDetails> {
        self.latest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn publish(&self, details: JobDetails) {
        *self
            .latest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(details);
    }
}

/// What a reader would notice change between two publications.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Published {
    state: Option<&'static str>,
    checkpoints: (u64, u64, usize),
    exceptions: usize,
}

impl JobMaster {
    fn state(&self) -> JobState {
        // A job whose end is decided is over, whatever phase the loop was in.
        if self.failed.is_some() || matches!(self.outcome, Some(Err(_))) {
            return JobState::Failed;
        }
        match &self.phase {
            JobPhase::WaitingForResources { .. } => JobState::Created,
            JobPhase::Deploying { .. }
            | JobPhase::Running
            | JobPhase::Finishing { .. }
            | JobPhase::StoppingWithSavepoint { .. }
            | JobPhase::Stopping { .. } => JobState::Running,
            JobPhase::Cancelling => JobState::Cancelling,
            JobPhase::Failing { .. } => JobState::Failing,
            JobPhase::Restarting { .. } => JobState::Restarting,
            JobPhase::Ended => match (&self.failed, &self.ending, &self.outcome) {
                (Some(_), _, _) | (_, _, Some(Err(_))) => JobState::Failed,
                (_, Some((crate::JobStatus::Cancelled, _)), _) => JobState::Canceled,
                (_, _, Some(Ok(r))) if r.status == crate::JobStatus::Cancelled => {
                    JobState::Canceled
                }
                _ => JobState::Finished,
            },
        }
    }

    /// Records a failure of the job for its exception history.
    pub(super) fn record_exception(&mut self, error: &WeirError, restarted: bool) {
        if self.exceptions.len() == EXCEPTION_HISTORY {
            self.exceptions.pop_front();
        }
        self.exceptions.push_back(ExceptionEntry {
            timestamp: self.clock.unix_millis(),
            exception: error.to_string(),
            restarted,
        });
    }

    /// Takes in the executors' latest task metrics.
    pub(super) fn sample_metrics(&mut self) {
        for (taskmanager, samples) in self.executors.sample_metrics() {
            self.metric_store.update(samples, taskmanager.as_deref());
        }
        self.metric_store
            .record_history(self.clock.unix_millis() as i64);
    }

    fn job_metrics(&self) -> JobMetrics {
        let history = self.coordinator.history();
        let last = history.latest_completed();
        JobMetrics {
            uptime_ms: self
                .clock
                .now()
                .saturating_duration_since(self.started)
                .as_millis() as u64,
            restarts: u64::from(self.restart.restarts()),
            completed_checkpoints: history.completed,
            failed_checkpoints: history.failed,
            in_progress_checkpoints: self.coordinator.pending_ids().len() as u64,
            last_checkpoint_duration_ms: last
                .and_then(|c| c.duration)
                .map(|d| d.as_millis() as u64),
            last_checkpoint_size_bytes: last.map(|c| c.state_size),
            last_checkpoint_alignment_ms: last
                .map(|c| c.max_alignment_duration().as_millis() as u64),
        }
    }

    /// The job's details now.
    pub(super) fn details(&self) -> JobDetails {
        let (sg, jg) = (&self.job.plan.stream_graph, &self.job.plan.job_graph);
        let vertices = jg
            .vertices
            .iter()
            .enumerate()
            .map(|(i, v)| VertexDetails {
                id: i as u32,
                name: v.name.clone(),
                parallelism: v.parallelism,
                operators: v
                    .operators
                    .iter()
                    .map(|n| sg.node(*n).name.clone())
                    .collect(),
                metrics: self.metric_store.vertex(i as u32),
                subtasks: self.metric_store.subtasks_of(i as u32).cloned().collect(),
            })
            .collect();
        let state = self.state();
        JobDetails {
            job_id: self.job_id.clone(),
            name: self.job_name().to_string(),
            state,
            start_time: self.start_time,
            end_time: state.is_terminal().then(|| self.clock.unix_millis()),
            metrics: self.job_metrics(),
            vertices,
            checkpoints: self.coordinator.history().clone(),
            exceptions: self.exceptions.iter().cloned().collect(),
            throughput: self.metric_store.history().cloned().collect(),
        }
    }

    /// Publishes the details if a reader would notice a change, or if `force`.
    pub(super) fn publish_details(&mut self, force: bool) {
        let history = self.coordinator.history();
        let now = Published {
            state: Some(self.phase.name()),
            checkpoints: (history.completed, history.failed, history.recent.len()),
            exceptions: self.exceptions.len(),
        };
        if force || now != self.published {
            self.published = now;
            self.view.publish(self.details());
        }
    }
}

/// Keeps the most recent `EXCEPTION_HISTORY` failures.
pub(super) type ExceptionHistory = VecDeque<ExceptionEntry>;
