//! Conversions between the engine's types and the control plane's messages.

use serde::de::DeserializeOwned;
use serde::Serialize;
use weir::error::TaskError;
use weir::graph::execution_graph::SubtaskRef;
use weir::graph::ids::JobVertexId;
use weir::runtime::network::frame::RunId;
use weir::runtime::output::OperatorMetrics;
use weir::runtime::task::TaskEvent;

use crate::error::ClusterError;
use crate::proto;

/// Encodes an engine value carried as bytes.
pub fn encode<T: Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>, ClusterError> {
    postcard::to_allocvec(value).map_err(|e| ClusterError::Codec {
        what,
        reason: e.to_string(),
    })
}

/// Decodes an engine value carried as bytes.
pub fn decode<T: DeserializeOwned>(what: &'static str, bytes: &[u8]) -> Result<T, ClusterError> {
    postcard::from_bytes(bytes).map_err(|e| ClusterError::Codec {
        what,
        reason: e.to_string(),
    })
}

impl From<RunId> for proto::RunId {
    fn from(run: RunId) -> Self {
        Self {
            epoch: run.epoch,
            attempt: run.attempt,
        }
    }
}

impl From<proto::RunId> for RunId {
    fn from(run: proto::RunId) -> Self {
        Self {
            epoch: run.epoch,
            attempt: run.attempt,
        }
    }
}

/// The run of a message, or a codec error naming the message.
pub fn run_of(run: Option<proto::RunId>, what: &'static str) -> Result<RunId, ClusterError> {
    run.map(RunId::from).ok_or(ClusterError::Codec {
        what,
        reason: "no run id".into(),
    })
}

impl From<SubtaskRef> for proto::Subtask {
    fn from(s: SubtaskRef) -> Self {
        Self {
            vertex: s.vertex.0,
            index: s.subtask,
        }
    }
}

impl From<proto::Subtask> for SubtaskRef {
    fn from(s: proto::Subtask) -> Self {
        Self {
            vertex: JobVertexId(s.vertex),
            subtask: s.index,
        }
    }
}

/// The operator a task error happened in, and the error rendered.
fn describe(error: &TaskError) -> (String, String) {
    match error {
        TaskError::Operator { operator, cause } => (operator.clone(), cause.to_string()),
        other => (String::new(), other.to_string()),
    }
}

/// A task's report as a control message of `run`; `None` for reports that stay in the
/// JobManager's process (a coordinator's).
pub fn task_event_to_proto(
    run: RunId,
    event: &TaskEvent,
) -> Result<Option<proto::TaskEvent>, ClusterError> {
    use proto::task_event::Kind;
    let (task, kind) = match event {
        TaskEvent::Finished { task, metrics } => (
            *task,
            Kind::Finished(proto::Finished {
                metrics: encode("metrics", metrics)?,
            }),
        ),
        TaskEvent::Failed {
            task,
            error,
            metrics,
        } => {
            let (operator, message) = describe(error);
            (
                *task,
                Kind::Failed(proto::Failed {
                    operator,
                    message,
                    secondary: error.is_secondary(),
                    metrics: encode("metrics", metrics)?,
                }),
            )
        }
        TaskEvent::Acknowledge {
            task,
            checkpoint_id,
            ack,
        } => (
            *task,
            Kind::Acknowledge(proto::Acknowledge {
                checkpoint_id: *checkpoint_id,
                ack: encode("acknowledgement", ack)?,
            }),
        ),
        TaskEvent::Decline {
            task,
            checkpoint_id,
            reason,
            subsumed,
        } => (
            *task,
            Kind::Decline(proto::Decline {
                checkpoint_id: *checkpoint_id,
                reason: reason.clone(),
                subsumed: *subsumed,
            }),
        ),
        TaskEvent::EndOfInput { task } => (*task, Kind::EndOfInput(proto::EndOfInput {})),
        TaskEvent::CoordinatorFailed { .. }
        | TaskEvent::CoordinatorAcknowledge { .. }
        | TaskEvent::Lost { .. }
        | TaskEvent::Deployed
        | TaskEvent::DeployFailed { .. } => return Ok(None),
    };
    Ok(Some(proto::TaskEvent {
        run: Some(run.into()),
        task: Some(task.into()),
        kind: Some(kind),
    }))
}

/// The subtask a report is about, if it is a task's.
pub fn task_of(event: &TaskEvent) -> Option<SubtaskRef> {
    match event {
        TaskEvent::Finished { task, .. }
        | TaskEvent::Failed { task, .. }
        | TaskEvent::Acknowledge { task, .. }
        | TaskEvent::Decline { task, .. }
        | TaskEvent::EndOfInput { task } => Some(*task),
        _ => None,
    }
}

/// The report of a task whose own report could not be encoded: it failed, saying why.
pub fn unreportable(run: RunId, task: SubtaskRef, reason: &str) -> proto::TaskEvent {
    proto::TaskEvent {
        run: Some(run.into()),
        task: Some(task.into()),
        kind: Some(proto::task_event::Kind::Failed(proto::Failed {
            operator: String::new(),
            message: format!("its report could not be encoded: {reason}"),
            secondary: false,
            metrics: Vec::new(),
        })),
    }
}

/// A task's report from a TaskManager, as the JobManager's loop takes it.
pub fn task_event_from_proto(event: proto::TaskEvent) -> Result<TaskEvent, ClusterError> {
    use proto::task_event::Kind;
    let task: SubtaskRef = event
        .task
        .ok_or(ClusterError::Codec {
            what: "task event",
            reason: "no subtask".into(),
        })?
        .into();
    let kind = event.kind.ok_or(ClusterError::Codec {
        what: "task event",
        reason: "no kind".into(),
    })?;
    Ok(match kind {
        Kind::Finished(f) => TaskEvent::Finished {
            task,
            metrics: decode::<Vec<OperatorMetrics>>("metrics", &f.metrics)?,
        },
        Kind::Failed(f) => {
            let cause = TaskError::Remote {
                message: f.message,
                secondary: f.secondary,
            };
            let error = if f.operator.is_empty() {
                cause
            } else {
                TaskError::Operator {
                    operator: f.operator,
                    cause: Box::new(cause),
                }
            };
            TaskEvent::Failed {
                task,
                error,
                metrics: decode("metrics", &f.metrics)?,
            }
        }
        Kind::Acknowledge(a) => TaskEvent::Acknowledge {
            task,
            checkpoint_id: a.checkpoint_id,
            ack: decode("acknowledgement", &a.ack)?,
        },
        Kind::Decline(d) => TaskEvent::Decline {
            task,
            checkpoint_id: d.checkpoint_id,
            reason: d.reason,
            subsumed: d.subsumed,
        },
        Kind::EndOfInput(_) => TaskEvent::EndOfInput { task },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir::graph::ids::NodeId;

    fn task() -> SubtaskRef {
        SubtaskRef {
            vertex: JobVertexId(2),
            subtask: 1,
        }
    }

    #[test]
    fn a_failure_keeps_its_operator_message_and_kind() {
        let event = TaskEvent::Failed {
            task: task(),
            error: TaskError::Operator {
                operator: "sum".into(),
                cause: Box::new(TaskError::Internal("boom".into())),
            },
            metrics: vec![OperatorMetrics {
                node: NodeId(3),
                subtask: 1,
                records_in: 7,
                records_out: 5,
                records_skipped: 0,
                records_dead_lettered: 0,
                watermark: None,
                backward_watermarks: 0,
                late_records_dropped: 0,
            }],
        };
        let wire = task_event_to_proto(
            RunId {
                epoch: 1,
                attempt: 2,
            },
            &event,
        )
        .unwrap()
        .unwrap();
        let TaskEvent::Failed {
            task: t,
            error,
            metrics,
        } = task_event_from_proto(wire).unwrap()
        else {
            panic!("not a failure")
        };
        assert_eq!(t, task());
        assert_eq!(metrics[0].records_in, 7);
        assert!(!error.is_secondary());
        assert_eq!(error.to_string(), "in operator `sum`: internal error: boom");
        let cancelled = TaskEvent::Failed {
            task: task(),
            error: TaskError::Cancelled,
            metrics: vec![],
        };
        let wire = task_event_to_proto(RunId::default(), &cancelled)
            .unwrap()
            .unwrap();
        let TaskEvent::Failed { error, .. } = task_event_from_proto(wire).unwrap() else {
            panic!("not a failure")
        };
        assert!(error.is_secondary());
    }

    #[test]
    fn a_truncated_payload_is_a_codec_error() {
        let wire = proto::TaskEvent {
            run: None,
            task: Some(task().into()),
            kind: Some(proto::task_event::Kind::Acknowledge(proto::Acknowledge {
                checkpoint_id: 3,
                ack: vec![0xff, 0xff],
            })),
        };
        let err = task_event_from_proto(wire).unwrap_err().to_string();
        assert!(err.contains("acknowledgement"), "{err}");
    }
}
