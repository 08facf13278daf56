//! The REST API's response bodies, shaped and named like Flink's (hyphenated keys such as
//! `start-time` and `read-records`), so that Flink's users and tools find their way. Each
//! is built from the JobManager's published [`JobDetails`](weir::runtime::job_master::JobDetails)
//! and documented in the generated OpenAPI description.

pub mod checkpoint;
pub mod cluster;
pub mod job;
pub mod operation;

use serde::Serialize;
use utoipa::ToSchema;

/// An error response, as Flink's REST API returns them.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorResponse {
    /// What went wrong, and how to fix it where that is known.
    pub errors: Vec<String>,
}
