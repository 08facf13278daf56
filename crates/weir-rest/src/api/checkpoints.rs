//! Checkpoint statistics and details.

use axum::extract::{Path, State};
use axum::Json;

use super::jobs::find_job;
use super::{ApiError, AppState};
use crate::model::checkpoint::{CheckpointDetails, CheckpointingStatistics};

/// Counts, summary, the latest of each kind and the recent history of checkpoints.
#[utoipa::path(
    get,
    path = "/jobs/{job_id}/checkpoints",
    params(("job_id" = String, Path, description = "The job id")),
    responses((status = 200, body = CheckpointingStatistics), (status = 404, body = crate::model::ErrorResponse))
)]
pub(crate) async fn statistics(
    State(dispatcher): State<AppState>,
    Path(job_id): Path<String>,
) -> Result<Json<CheckpointingStatistics>, ApiError> {
    let details = find_job(&dispatcher, &job_id)?.details();
    Ok(Json(CheckpointingStatistics::of(
        &details.checkpoints,
        details.metrics.in_progress_checkpoints,
    )))
}

/// One checkpoint, with each subtask's part.
#[utoipa::path(
    get,
    path = "/jobs/{job_id}/checkpoints/details/{checkpoint_id}",
    params(("job_id" = String, Path, description = "The job id"), ("checkpoint_id" = u64, Path, description = "The checkpoint id")),
    responses((status = 200, body = CheckpointDetails), (status = 404, body = crate::model::ErrorResponse))
)]
pub(crate) async fn details(
    State(dispatcher): State<AppState>,
    Path((job_id, checkpoint_id)): Path<(String, u64)>,
) -> Result<Json<CheckpointDetails>, ApiError> {
    let details = find_job(&dispatcher, &job_id)?.details();
    details
        .checkpoints
        .recent
        .iter()
        .find(|c| c.id == checkpoint_id)
        .map(|c| Json(CheckpointDetails::of(c)))
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "checkpoint {checkpoint_id} of job `{job_id}` is not among the {} kept in its history",
                details.checkpoints.recent.len()
            ))
        })
}
