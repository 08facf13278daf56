//! Asynchronous operations (savepoints, stops), answered with a request id at once and
//! polled for their result, as Flink's REST API does.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The answer to a triggering request.
#[derive(Debug, Serialize, ToSchema)]
pub struct TriggerResponse {
    /// The id to poll `GET /jobs/{id}/savepoints/{request-id}` with.
    #[serde(rename = "request-id")]
    pub request_id: String,
}

/// `POST /jobs/{id}/stop`'s body.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct StopRequest {
    /// End the sources' input first, so that every window and timer fires (Flink's
    /// `--drain`); meant for a job that will not be resumed.
    #[serde(default)]
    pub drain: bool,
}

/// An operation's state.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OperationStatus {
    /// `IN_PROGRESS` or `COMPLETED` (whether it succeeded or failed).
    pub id: String,
}

/// A polled operation.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AsynchronousOperationResult {
    /// Where it is.
    pub status: OperationStatus,
    /// Its outcome, once completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation: Option<SavepointOutcome>,
}

/// A savepoint operation's outcome.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SavepointOutcome {
    /// Where the savepoint is, on success.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// Why it failed, otherwise.
    #[serde(rename = "failure-cause", skip_serializing_if = "Option::is_none")]
    pub failure_cause: Option<String>,
}
