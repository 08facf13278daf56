//! Prometheus text exposition of every job's metrics.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use weir::metrics::{JobExport, PrometheusExport};

use super::AppState;

/// Every job's metrics in the Prometheus text format, for a scraper.
#[utoipa::path(get, path = "/metrics", responses((status = 200, description = "Metrics in the Prometheus (OpenMetrics) text format", content_type = "application/openmetrics-text")))]
pub(crate) async fn prometheus(State(dispatcher): State<AppState>) -> impl IntoResponse {
    let export = PrometheusExport {
        jobs: dispatcher
            .details()
            .iter()
            .map(|details| JobExport {
                job_id: details.job_id.clone(),
                job_name: details.name.clone(),
                job: details.metrics.clone(),
                subtasks: details
                    .vertices
                    .iter()
                    .flat_map(|v| v.subtasks.iter().cloned())
                    .collect(),
            })
            .collect(),
    };
    match export.encode() {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the metrics: {e}"),
        )
            .into_response(),
    }
}
