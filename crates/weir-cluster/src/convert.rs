//! Conversions between the engine's types and the control plane's messages.

use serde::de::DeserializeOwned;
use serde::Serialize;
use weir::connectors::malformed::{MalformedRecord, MalformedRecordError, RecordOrigin};
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

/// A task's failure as it crosses the wire: structured where the JobManager's callers look
/// at it ([`TaskError::record_origin`], [`TaskError::malformed_record`]), rendered otherwise.
struct FailureParts<'a> {
    /// The operator of the chain it names, or empty.
    operator: String,
    /// Where the record it happened on was read, when the attempt traced it.
    origin: Option<&'a RecordOrigin>,
    /// The malformed record a source failed on.
    malformed: Option<&'a MalformedRecord>,
    /// The innermost cause, rendered.
    message: String,
}

/// Takes the operator and the record's origin off the outside of `error` (the shape
/// [`TaskError::at_record`] builds), so that the other side can put them back around the
/// rendered cause and the error reads the same there.
fn describe(error: &TaskError) -> FailureParts<'_> {
    let mut operator = None;
    let mut origin = None;
    let mut cause = error;
    loop {
        match cause {
            TaskError::Operator {
                operator: name,
                cause: inner,
            } if operator.is_none() => {
                operator = Some(name.clone());
                cause = inner;
            }
            TaskError::AtRecord {
                origin: at,
                cause: inner,
            } if origin.is_none() => {
                origin = Some(at);
                cause = inner;
            }
            _ => break,
        }
    }
    let malformed = match cause {
        TaskError::MalformedRecord(e) => Some(&e.record),
        _ => None,
    };
    FailureParts {
        operator: operator.unwrap_or_default(),
        origin,
        malformed,
        message: cause.to_string(),
    }
}

/// The bytes of an optional value: empty for none.
fn encode_optional<T: Serialize>(
    what: &'static str,
    value: Option<&T>,
) -> Result<Vec<u8>, ClusterError> {
    value.map_or(Ok(Vec::new()), |v| encode(what, v))
}

/// The error a task failed with, from its report: the operator and the record's origin
/// around the cause, as [`describe`] took them off.
fn failure_from_proto(f: proto::Failed) -> Result<TaskError, ClusterError> {
    let cause = if f.malformed_record.is_empty() {
        TaskError::Remote {
            message: f.message,
            secondary: f.secondary,
        }
    } else {
        TaskError::MalformedRecord(MalformedRecordError {
            record: decode("malformed record", &f.malformed_record)?,
        })
    };
    let cause = if f.record_origin.is_empty() {
        cause
    } else {
        TaskError::AtRecord {
            origin: decode("record origin", &f.record_origin)?,
            cause: Box::new(cause),
        }
    };
    Ok(if f.operator.is_empty() {
        cause
    } else {
        TaskError::Operator {
            operator: f.operator,
            cause: Box::new(cause),
        }
    })
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
            let parts = describe(error);
            (
                *task,
                Kind::Failed(proto::Failed {
                    operator: parts.operator,
                    message: parts.message,
                    secondary: error.is_secondary(),
                    metrics: encode("metrics", metrics)?,
                    record_origin: encode_optional("record origin", parts.origin)?,
                    malformed_record: encode_optional("malformed record", parts.malformed)?,
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
            record_origin: Vec::new(),
            malformed_record: Vec::new(),
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
            // A task whose report could not be encoded sends no metrics (`unreportable`).
            let metrics = match f.metrics.is_empty() {
                true => Vec::new(),
                false => decode("metrics", &f.metrics)?,
            };
            TaskEvent::Failed {
                task,
                error: failure_from_proto(f)?,
                metrics,
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

    /// The error a failure report of `error` becomes on the JobManager's side.
    fn across_the_wire(error: TaskError) -> TaskError {
        let event = TaskEvent::Failed {
            task: task(),
            error,
            metrics: vec![],
        };
        let wire = task_event_to_proto(RunId::default(), &event)
            .unwrap()
            .unwrap();
        let TaskEvent::Failed { error, .. } = task_event_from_proto(wire).unwrap() else {
            panic!("not a failure")
        };
        error
    }

    #[test]
    fn a_poison_records_origin_crosses_the_wire_as_a_value() {
        let origin = RecordOrigin::Kafka {
            topic: "orders".into(),
            partition: 3,
            offset: 1_234,
        };
        let sent = TaskError::Operator {
            operator: "billing".into(),
            cause: Box::new(TaskError::AtRecord {
                origin: origin.clone(),
                cause: Box::new(TaskError::UserPanic {
                    message: "cannot bill".into(),
                }),
            }),
        };
        let rendered = sent.to_string();
        let received = across_the_wire(sent);
        assert_eq!(received.record_origin(), Some(&origin));
        assert_eq!(received.to_string(), rendered);
        assert!(received.may_come_from_user_code());
        // The origin outside the operator reads the same too.
        let file = RecordOrigin::File {
            file: "orders-1.csv".into(),
            line: 1_225,
        };
        let sent = TaskError::AtRecord {
            origin: file.clone(),
            cause: Box::new(TaskError::Operator {
                operator: "billing".into(),
                cause: Box::new(TaskError::Internal("boom".into())),
            }),
        };
        let rendered = sent.to_string();
        let received = across_the_wire(sent);
        assert_eq!(received.record_origin(), Some(&file));
        assert_eq!(received.to_string(), rendered);
        // Without a traced record there is no origin.
        assert_eq!(
            across_the_wire(TaskError::Internal("boom".into())).record_origin(),
            None
        );
    }

    #[test]
    fn a_malformed_record_crosses_the_wire_as_a_value() {
        let record = MalformedRecord {
            origin: RecordOrigin::File {
                file: "people.csv".into(),
                line: 3,
            },
            error: weir::connectors::malformed::DecodeError::in_column("age", "not a number"),
            raw: "ann,old".into(),
        };
        let sent = TaskError::Operator {
            operator: "people".into(),
            cause: Box::new(TaskError::MalformedRecord(MalformedRecordError {
                record: record.clone(),
            })),
        };
        let rendered = sent.to_string();
        let received = across_the_wire(sent);
        assert_eq!(received.malformed_record(), Some(&record));
        assert_eq!(received.to_string(), rendered);
        assert!(!received.is_secondary());
    }

    #[test]
    fn an_undecodable_record_origin_is_a_codec_error() {
        let wire = proto::TaskEvent {
            run: None,
            task: Some(task().into()),
            kind: Some(proto::task_event::Kind::Failed(proto::Failed {
                operator: "billing".into(),
                message: "boom".into(),
                secondary: false,
                metrics: Vec::new(),
                record_origin: vec![7, 0xff],
                malformed_record: Vec::new(),
            })),
        };
        let error = task_event_from_proto(wire).unwrap_err();
        assert!(error.to_string().contains("record origin"), "{error}");
    }

    #[test]
    fn an_unreportable_failure_arrives_as_the_tasks_failure() {
        let wire = unreportable(RunId::default(), task(), "too large");
        let TaskEvent::Failed {
            task: t,
            error,
            metrics,
        } = task_event_from_proto(wire).unwrap()
        else {
            panic!("not a failure")
        };
        assert_eq!(t, task());
        assert!(metrics.is_empty());
        assert_eq!(
            error.to_string(),
            "its report could not be encoded: too large"
        );
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
