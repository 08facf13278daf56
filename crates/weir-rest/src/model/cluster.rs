//! The cluster: its overview and its TaskManagers.

use serde::Serialize;
use utoipa::ToSchema;

/// `GET /overview`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClusterOverview {
    /// TaskManagers registered.
    pub taskmanagers: usize,
    /// Slots they offer.
    #[serde(rename = "slots-total")]
    pub slots_total: u32,
    /// Jobs running (or restarting).
    #[serde(rename = "jobs-running")]
    pub jobs_running: usize,
    /// Jobs finished.
    #[serde(rename = "jobs-finished")]
    pub jobs_finished: usize,
    /// Jobs cancelled.
    #[serde(rename = "jobs-cancelled")]
    pub jobs_cancelled: usize,
    /// Jobs failed.
    #[serde(rename = "jobs-failed")]
    pub jobs_failed: usize,
    /// Weir's version.
    #[serde(rename = "weir-version")]
    pub weir_version: String,
}

/// A TaskManager as the JobManager knows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TaskManagerInfo {
    /// Its id (`--taskmanager-id`).
    pub id: String,
    /// Where its data connections are accepted (`host:port`).
    #[serde(rename = "dataAddress")]
    pub data_address: String,
    /// Slots it offers.
    #[serde(rename = "slotsNumber")]
    pub slots: u32,
    /// Milliseconds since it last sent a heartbeat.
    #[serde(rename = "timeSinceLastHeartbeat")]
    pub since_last_heartbeat_ms: u64,
}

/// `GET /taskmanagers`.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskManagersInfo {
    /// The TaskManagers.
    pub taskmanagers: Vec<TaskManagerInfo>,
}
