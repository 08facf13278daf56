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

/// `POST /jobs/{id}/savepoints`'s body, as Flink's REST API takes it.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SavepointRequest {
    /// Where to write the savepoint. Weir writes savepoints into the job's checkpoint
    /// storage, where its job record keeps track of them, so any other directory is refused
    /// (400) rather than ignored.
    #[serde(rename = "target-directory", default)]
    pub target_directory: Option<String>,
    /// End the job once the savepoint is complete (Flink's cancel with savepoint): Weir
    /// stops the job with the savepoint, as `POST /jobs/{id}/stop` does without draining, so
    /// that its sinks commit the savepoint's output before it ends.
    #[serde(rename = "cancel-job", default)]
    pub cancel_job: bool,
    /// Flink's savepoint format (`CANONICAL`, `NATIVE`); Weir has one format, which any of
    /// its state backends restores, so the value changes nothing.
    #[serde(rename = "formatType", default)]
    pub format_type: Option<String>,
    /// A client-chosen request id (Flink's `triggerId`); Weir chooses its own.
    #[serde(rename = "triggerId", default)]
    pub trigger_id: Option<String>,
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
