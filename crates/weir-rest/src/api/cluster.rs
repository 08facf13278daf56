//! The cluster's overview and TaskManagers.

use axum::extract::State;
use axum::Json;
use weir::runtime::job_master::JobState;

use super::AppState;
use crate::model::cluster::{ClusterOverview, TaskManagersInfo};

/// The cluster at a glance: TaskManagers, slots and jobs by state.
#[utoipa::path(get, path = "/overview", responses((status = 200, body = ClusterOverview)))]
pub(crate) async fn overview(State(dispatcher): State<AppState>) -> Json<ClusterOverview> {
    let details = dispatcher.details();
    let count = |f: fn(JobState) -> bool| details.iter().filter(|d| f(d.state)).count();
    let taskmanagers = dispatcher.taskmanagers();
    Json(ClusterOverview {
        taskmanagers: taskmanagers.len(),
        slots_total: taskmanagers.iter().map(|t| t.slots).sum(),
        jobs_running: count(|s| !s.is_terminal()),
        jobs_finished: count(|s| s == JobState::Finished),
        jobs_cancelled: count(|s| s == JobState::Canceled),
        jobs_failed: count(|s| s == JobState::Failed),
        weir_version: env!("CARGO_PKG_VERSION").into(),
    })
}

/// The TaskManagers registered with this JobManager (in a mini-cluster: `local`).
#[utoipa::path(get, path = "/taskmanagers", responses((status = 200, body = TaskManagersInfo)))]
pub(crate) async fn taskmanagers(State(dispatcher): State<AppState>) -> Json<TaskManagersInfo> {
    Json(TaskManagersInfo {
        taskmanagers: dispatcher.taskmanagers(),
    })
}
