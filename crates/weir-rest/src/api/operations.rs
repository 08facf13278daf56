//! Savepoints and stops: triggered at once, answered with a request id, polled for the
//! outcome, as Flink's REST API does.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use weir::runtime::stream_element::StopMode;

use super::jobs::find_job;
use super::{ApiError, AppState};
use crate::model::job::state_name;
use crate::model::operation::{
    AsynchronousOperationResult, OperationStatus, SavepointOutcome, SavepointRequest, StopRequest,
    TriggerResponse,
};

fn request_id(job: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{:032x}",
        xxhash_rust::xxh3::xxh3_128(format!("{job}/{nanos}").as_bytes())
    )
}

fn in_progress() -> AsynchronousOperationResult {
    AsynchronousOperationResult {
        status: OperationStatus {
            id: "IN_PROGRESS".into(),
        },
        operation: None,
    }
}

fn completed(outcome: Result<String, String>) -> AsynchronousOperationResult {
    let (location, failure_cause) = match outcome {
        Ok(location) => (Some(location), None),
        Err(cause) => (None, Some(cause)),
    };
    AsynchronousOperationResult {
        status: OperationStatus {
            id: "COMPLETED".into(),
        },
        operation: Some(SavepointOutcome {
            location,
            failure_cause,
        }),
    }
}

/// Starts `operation` on a blocking thread, recording its outcome under a fresh request id.
fn start(
    dispatcher: AppState,
    job_id: String,
    what: &'static str,
    operation: impl FnOnce() -> Result<String, String> + Send + 'static,
) -> (StatusCode, Json<TriggerResponse>) {
    let request = request_id(&job_id);
    dispatcher.set_operation(&job_id, &request, in_progress());
    let (job, id) = (job_id.clone(), request.clone());
    tracing::info!(job = %job_id, request = %request, "{what} requested over REST");
    tokio::task::spawn_blocking(move || {
        let outcome = operation();
        dispatcher.set_operation(&job, &id, completed(outcome));
    });
    (
        StatusCode::ACCEPTED,
        Json(TriggerResponse {
            request_id: request,
        }),
    )
}

fn refuse_ended(dispatcher: &AppState, job_id: &str) -> Result<(), ApiError> {
    let state = find_job(dispatcher, job_id)?.details().state;
    if state.is_terminal() {
        return Err(ApiError::conflict(format!(
            "job `{job_id}` has already ended ({})",
            state_name(state)
        )));
    }
    Ok(())
}

/// Reads a savepoint request's body: empty, or Flink's fields; anything else is a 400 that
/// names the field.
fn savepoint_request(body: &[u8]) -> Result<SavepointRequest, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(SavepointRequest::default());
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the savepoint request's body: {e}")))
}

/// Takes a savepoint; poll `GET /jobs/{job_id}/savepoints/{request-id}` for its location.
/// It is written to the job's checkpoint storage (`state.checkpoints.dir`); a
/// `target-directory` is refused (400), and `cancel-job: true` stops the job with the
/// savepoint (as `POST /jobs/{job_id}/stop`).
#[utoipa::path(
    post,
    path = "/jobs/{job_id}/savepoints",
    params(("job_id" = String, Path, description = "The job id")),
    request_body(content = SavepointRequest, description = "Flink's savepoint options", content_type = "application/json"),
    responses((status = 202, body = TriggerResponse), (status = 400, body = crate::model::ErrorResponse), (status = 404, body = crate::model::ErrorResponse), (status = 409, body = crate::model::ErrorResponse))
)]
pub(crate) async fn trigger_savepoint(
    State(dispatcher): State<AppState>,
    Path(job_id): Path<String>,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<TriggerResponse>), ApiError> {
    let request = savepoint_request(&body)?;
    let client = find_job(&dispatcher, &job_id)?;
    if let Some(target) = request.target_directory.filter(|t| !t.trim().is_empty()) {
        return Err(ApiError::bad_request(format!(
            "`target-directory` (`{target}`) is not supported: Weir writes savepoints into the \
             job's checkpoint storage (`state.checkpoints.dir`), where the job's record keeps \
             track of them; leave `target-directory` out"
        )));
    }
    refuse_ended(&dispatcher, &job_id)?;
    if request.cancel_job {
        return Ok(start(
            dispatcher,
            job_id,
            "savepoint with cancel-job",
            move || {
                client
                    .request_stop(StopMode::NoDrain)
                    .map(|s| s.path().display().to_string())
                    .map_err(|e| e.to_string())
            },
        ));
    }
    Ok(start(dispatcher, job_id, "savepoint", move || {
        client
            .trigger_savepoint()
            .map(|s| s.path().display().to_string())
            .map_err(|e| e.to_string())
    }))
}

/// Stops the job with a savepoint (Flink's `stop`; with `"drain": true`, `stop --drain`);
/// poll `GET /jobs/{job_id}/savepoints/{request-id}` for the savepoint's location.
#[utoipa::path(
    post,
    path = "/jobs/{job_id}/stop",
    params(("job_id" = String, Path, description = "The job id")),
    request_body(content = StopRequest, description = "Whether to drain", content_type = "application/json"),
    responses((status = 202, body = TriggerResponse), (status = 404, body = crate::model::ErrorResponse), (status = 409, body = crate::model::ErrorResponse))
)]
pub(crate) async fn stop(
    State(dispatcher): State<AppState>,
    Path(job_id): Path<String>,
    body: Option<Json<StopRequest>>,
) -> Result<(StatusCode, Json<TriggerResponse>), ApiError> {
    let client = find_job(&dispatcher, &job_id)?;
    refuse_ended(&dispatcher, &job_id)?;
    let mode = if body.is_some_and(|b| b.drain) {
        StopMode::Drain
    } else {
        StopMode::NoDrain
    };
    Ok(start(
        dispatcher,
        job_id,
        "stop with savepoint",
        move || {
            client
                .request_stop(mode)
                .map(|s| s.path().display().to_string())
                .map_err(|e| e.to_string())
        },
    ))
}

/// The state of a savepoint or stop started with `POST`.
#[utoipa::path(
    get,
    path = "/jobs/{job_id}/savepoints/{request_id}",
    params(("job_id" = String, Path, description = "The job id"), ("request_id" = String, Path, description = "The request id the trigger answered")),
    responses((status = 200, body = AsynchronousOperationResult), (status = 404, body = crate::model::ErrorResponse))
)]
pub(crate) async fn savepoint_status(
    State(dispatcher): State<AppState>,
    Path((job_id, request_id)): Path<(String, String)>,
) -> Result<Json<AsynchronousOperationResult>, ApiError> {
    dispatcher
        .operation(&job_id, &request_id)
        .map(Json)
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "no savepoint operation `{request_id}` on job `{job_id}`"
            ))
        })
}
