//! Jobs: listing, details, plan, vertices, backpressure, exceptions, throughput, cancel.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use weir::runtime::job_master::{JobDetails, VertexDetails};
use weir::JobClient;

use super::{now_millis, ApiError, AppState};
use crate::model::job::{
    state_name, BackpressureInfo, JobDetailsInfo, JobExceptions, JobIdWithStatus, JobIdsWithStatus,
    JobSummary, JobsOverview, ThroughputHistory, VertexDetailsInfo,
};

pub(crate) fn find_job(dispatcher: &AppState, id: &str) -> Result<Arc<JobClient>, ApiError> {
    dispatcher.job(id).ok_or_else(|| {
        ApiError::not_found(format!(
            "no job with id `{id}`; `GET /jobs` lists the jobs of this JobManager"
        ))
    })
}

fn find_vertex<'a>(details: &'a JobDetails, vertex: &str) -> Result<&'a VertexDetails, ApiError> {
    details
        .vertices
        .iter()
        .find(|v| v.id.to_string() == vertex)
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "job `{}` has no vertex `{vertex}`; its vertices are 0 to {}",
                details.job_id,
                details.vertices.len().saturating_sub(1)
            ))
        })
}

/// Every job's id and state.
#[utoipa::path(get, path = "/jobs", responses((status = 200, body = JobIdsWithStatus)))]
pub(crate) async fn list(State(dispatcher): State<AppState>) -> Json<JobIdsWithStatus> {
    Json(JobIdsWithStatus {
        jobs: dispatcher
            .details()
            .iter()
            .map(|d| JobIdWithStatus {
                id: d.job_id.clone(),
                status: state_name(d.state).into(),
            })
            .collect(),
    })
}

/// A summary of every job: name, state, times and subtasks by state.
#[utoipa::path(get, path = "/jobs/overview", responses((status = 200, body = JobsOverview)))]
pub(crate) async fn overview(State(dispatcher): State<AppState>) -> Json<JobsOverview> {
    let now = now_millis();
    Json(JobsOverview {
        jobs: dispatcher
            .details()
            .iter()
            .map(|d| JobSummary::of(d, now))
            .collect(),
    })
}

/// A job: state, times, and its vertices with their parallelism, counts, rates and
/// backpressure.
#[utoipa::path(
    get,
    path = "/jobs/{job_id}",
    params(("job_id" = String, Path, description = "The job id")),
    responses((status = 200, body = JobDetailsInfo), (status = 404, body = crate::model::ErrorResponse))
)]
pub(crate) async fn job(
    State(dispatcher): State<AppState>,
    Path(job_id): Path<String>,
) -> Result<Json<JobDetailsInfo>, ApiError> {
    let client = find_job(&dispatcher, &job_id)?;
    Ok(Json(JobDetailsInfo::of(&client.details(), now_millis())))
}

/// `PATCH /jobs/{id}`'s query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub(crate) struct CancelQuery {
    /// `cancel` (the only mode).
    mode: Option<String>,
}

/// Cancels a job (Flink's `PATCH /jobs/{id}?mode=cancel`); answers 202 at once.
#[utoipa::path(
    patch,
    path = "/jobs/{job_id}",
    params(("job_id" = String, Path, description = "The job id"), CancelQuery),
    responses((status = 202, description = "Cancellation requested"), (status = 404, body = crate::model::ErrorResponse), (status = 409, body = crate::model::ErrorResponse))
)]
pub(crate) async fn cancel(
    State(dispatcher): State<AppState>,
    Path(job_id): Path<String>,
    Query(query): Query<CancelQuery>,
) -> Result<StatusCode, ApiError> {
    if let Some(mode) = query.mode.as_deref().filter(|m| *m != "cancel") {
        return Err(ApiError::bad_request(format!(
            "unknown mode `{mode}`: use `?mode=cancel` (to stop with a savepoint, `POST /jobs/{job_id}/stop`)"
        )));
    }
    let client = find_job(&dispatcher, &job_id)?;
    let state = client.details().state;
    if state.is_terminal() {
        return Err(ApiError::conflict(format!(
            "job `{job_id}` has already ended ({})",
            state_name(state)
        )));
    }
    tracing::info!(job = %job_id, "cancel requested over REST");
    client.request_cancel();
    Ok(StatusCode::ACCEPTED)
}

/// The job's four graph layers: StreamGraph, JobGraph, ExecutionGraph and the physical
/// plan.
#[utoipa::path(
    get,
    path = "/jobs/{job_id}/plan",
    params(("job_id" = String, Path, description = "The job id")),
    responses((status = 200, description = "The plan: `stream_graph`, `job_graph`, `execution_graph` and `physical`"), (status = 404, body = crate::model::ErrorResponse))
)]
pub(crate) async fn plan(
    State(dispatcher): State<AppState>,
    Path(job_id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let client = find_job(&dispatcher, &job_id)?;
    let plan = serde_json::to_value(client.plan())
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(Json(serde_json::json!({ "jid": job_id, "plan": plan })))
}

/// A vertex with each subtask's counts, rates, queues, backpressure and operators.
#[utoipa::path(
    get,
    path = "/jobs/{job_id}/vertices/{vertex_id}",
    params(("job_id" = String, Path, description = "The job id"), ("vertex_id" = String, Path, description = "The vertex id")),
    responses((status = 200, body = VertexDetailsInfo), (status = 404, body = crate::model::ErrorResponse))
)]
pub(crate) async fn vertex(
    State(dispatcher): State<AppState>,
    Path((job_id, vertex_id)): Path<(String, String)>,
) -> Result<Json<VertexDetailsInfo>, ApiError> {
    let details = find_job(&dispatcher, &job_id)?.details();
    let vertex = find_vertex(&details, &vertex_id)?;
    Ok(Json(VertexDetailsInfo::of(vertex, now_millis())))
}

/// A vertex's backpressure per subtask, measured continuously.
#[utoipa::path(
    get,
    path = "/jobs/{job_id}/vertices/{vertex_id}/backpressure",
    params(("job_id" = String, Path, description = "The job id"), ("vertex_id" = String, Path, description = "The vertex id")),
    responses((status = 200, body = BackpressureInfo), (status = 404, body = crate::model::ErrorResponse))
)]
pub(crate) async fn backpressure(
    State(dispatcher): State<AppState>,
    Path((job_id, vertex_id)): Path<(String, String)>,
) -> Result<Json<BackpressureInfo>, ApiError> {
    let details = find_job(&dispatcher, &job_id)?.details();
    let vertex = find_vertex(&details, &vertex_id)?;
    Ok(Json(BackpressureInfo::of(vertex, now_millis())))
}

/// The job's failures, newest first.
#[utoipa::path(
    get,
    path = "/jobs/{job_id}/exceptions",
    params(("job_id" = String, Path, description = "The job id")),
    responses((status = 200, body = JobExceptions), (status = 404, body = crate::model::ErrorResponse))
)]
pub(crate) async fn exceptions(
    State(dispatcher): State<AppState>,
    Path(job_id): Path<String>,
) -> Result<Json<JobExceptions>, ApiError> {
    let details = find_job(&dispatcher, &job_id)?.details();
    Ok(Json(JobExceptions::of(&details)))
}

/// Records per second per vertex over the last minutes.
#[utoipa::path(
    get,
    path = "/jobs/{job_id}/throughput",
    params(("job_id" = String, Path, description = "The job id")),
    responses((status = 200, body = ThroughputHistory), (status = 404, body = crate::model::ErrorResponse))
)]
pub(crate) async fn throughput(
    State(dispatcher): State<AppState>,
    Path(job_id): Path<String>,
) -> Result<Json<ThroughputHistory>, ApiError> {
    let details = find_job(&dispatcher, &job_id)?.details();
    Ok(Json(ThroughputHistory::of(&details)))
}
