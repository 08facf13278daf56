//! The REST API's routes, each documented for the generated OpenAPI description.

mod checkpoints;
mod cluster;
mod jobs;
mod metrics;
mod operations;

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use utoipa::OpenApi;

use crate::dispatcher::Dispatcher;
use crate::model::ErrorResponse;

/// Shared by every handler.
pub(crate) type AppState = Arc<Dispatcher>;

/// An error answer: its status and what to say.
pub(crate) struct ApiError(StatusCode, String);

impl ApiError {
    pub(crate) fn not_found(what: impl Into<String>) -> Self {
        Self(StatusCode::NOT_FOUND, what.into())
    }

    pub(crate) fn bad_request(what: impl Into<String>) -> Self {
        Self(StatusCode::BAD_REQUEST, what.into())
    }

    pub(crate) fn conflict(what: impl Into<String>) -> Self {
        Self(StatusCode::CONFLICT, what.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.0,
            Json(ErrorResponse {
                errors: vec![self.1],
            }),
        )
            .into_response()
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The OpenAPI description of the REST API, generated from the handlers and models.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Weir REST API",
        description = "Watch and control Weir jobs. Shaped like Apache Flink's REST API."
    ),
    paths(
        cluster::overview,
        cluster::taskmanagers,
        jobs::list,
        jobs::overview,
        jobs::job,
        jobs::cancel,
        jobs::plan,
        jobs::vertex,
        jobs::backpressure,
        jobs::exceptions,
        jobs::throughput,
        checkpoints::statistics,
        checkpoints::details,
        operations::trigger_savepoint,
        operations::stop,
        operations::savepoint_status,
        metrics::prometheus,
    ),
    tags((name = "weir", description = "Jobs, checkpoints, savepoints and the cluster"))
)]
pub struct ApiDoc;

async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

/// Every route of the API.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/overview", get(cluster::overview))
        .route("/taskmanagers", get(cluster::taskmanagers))
        .route("/jobs", get(jobs::list))
        .route("/jobs/overview", get(jobs::overview))
        .route("/jobs/{job_id}", get(jobs::job).patch(jobs::cancel))
        .route("/jobs/{job_id}/plan", get(jobs::plan))
        .route("/jobs/{job_id}/vertices/{vertex_id}", get(jobs::vertex))
        .route(
            "/jobs/{job_id}/vertices/{vertex_id}/backpressure",
            get(jobs::backpressure),
        )
        .route("/jobs/{job_id}/exceptions", get(jobs::exceptions))
        .route("/jobs/{job_id}/throughput", get(jobs::throughput))
        .route("/jobs/{job_id}/checkpoints", get(checkpoints::statistics))
        .route(
            "/jobs/{job_id}/checkpoints/details/{checkpoint_id}",
            get(checkpoints::details),
        )
        .route(
            "/jobs/{job_id}/savepoints",
            post(operations::trigger_savepoint),
        )
        .route(
            "/jobs/{job_id}/savepoints/{request_id}",
            get(operations::savepoint_status),
        )
        .route("/jobs/{job_id}/stop", post(operations::stop))
        .route("/metrics", get(metrics::prometheus))
        .route("/openapi.json", get(openapi))
}
