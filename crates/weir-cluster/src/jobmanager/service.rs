//! The JobManager's gRPC service: TaskManager sessions, and the job's status and control
//! calls for clients.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use weir::connectors::source::ReaderEvent;
use weir::graph::execution_graph::SubtaskRef;
use weir::graph::ids::NodeId;
use weir::metrics::SubtaskSample;
use weir::runtime::stream_element::StopMode;
use weir::runtime::task::{DeployFailureKind, TaskEvent};
use weir::{JobClient, WeirError};

use super::registry::{SessionId, TaskManagerInfo};
use super::state::Shared;
use crate::convert::{decode, run_of, task_event_from_proto};
use crate::proto;
use crate::proto::job_manager_message::Body as Out;
use crate::proto::job_manager_service_server::JobManagerService;
use crate::proto::task_manager_message::Body as In;

/// The service, over the shared JobManager state.
pub struct JobManagerRpc {
    shared: Arc<Shared>,
}

impl JobManagerRpc {
    /// The service of `shared`.
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    fn client(&self) -> Result<Arc<JobClient>, Status> {
        self.shared
            .lock()
            .client
            .clone()
            .ok_or_else(|| Status::unavailable("the job is not running yet"))
    }
}

/// Runs a blocking job-client call off the async runtime.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, WeirError> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(|e| Status::failed_precondition(e.to_string()))
}

fn refused(reason: String) -> Result<proto::JobManagerMessage, Status> {
    Ok(proto::JobManagerMessage {
        epoch: 0,
        body: Some(Out::Refused(proto::Refused { reason })),
    })
}

type SessionStream = UnboundedReceiverStream<Result<proto::JobManagerMessage, Status>>;

#[tonic::async_trait]
impl JobManagerService for JobManagerRpc {
    type SessionStream = SessionStream;

    async fn session(
        &self,
        request: Request<Streaming<proto::TaskManagerMessage>>,
    ) -> Result<Response<SessionStream>, Status> {
        let mut inbound = request.into_inner();
        let first = inbound
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("the session ended before registering"))?;
        let Some(In::Register(register)) = first.body else {
            return Err(Status::invalid_argument("a session starts with Register"));
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let stream = UnboundedReceiverStream::new(rx);
        let shared = &self.shared;
        if register.job_fingerprint != shared.fingerprint {
            let _ = tx.send(refused(format!(
                "TaskManager `{}` was built from another job graph than the JobManager's job `{}` \
                 (fingerprint {:016x}, expected {:016x}): start every process from the same job binary and arguments",
                register.taskmanager_id, shared.job_name, register.job_fingerprint, shared.fingerprint
            )));
            return Ok(Response::new(stream));
        }
        let data_address: SocketAddr = match register.data_address.parse() {
            Ok(address) => address,
            Err(e) => {
                let _ = tx.send(refused(format!(
                    "data address `{}` is not host:port: {e}",
                    register.data_address
                )));
                return Ok(Response::new(stream));
            }
        };
        if register.slots == 0 {
            let _ = tx.send(refused("a TaskManager needs at least one slot".into()));
            return Ok(Response::new(stream));
        }
        let id = register.taskmanager_id.clone();
        let session = {
            let mut state = shared.lock();
            let (session, replaced) = state.registry.register(TaskManagerInfo {
                id: id.clone(),
                slots: register.slots,
                data_address,
                last_heartbeat: Instant::now(),
            });
            if let Some(old) = replaced {
                // Its old session is gone for good: the TaskManager restarted or reconnected.
                state.outbound.remove(&old);
                state.run_lost(
                    &id,
                    "it registered again (it restarted or lost its session)",
                );
            }
            state.outbound.insert(session, tx);
            state.send(
                session,
                Out::Registered(proto::Registered {
                    heartbeat_interval_millis: shared.config.heartbeat_interval.as_millis() as u64,
                    heartbeat_timeout_millis: shared.config.heartbeat_timeout.as_millis() as u64,
                }),
            );
            session
        };
        shared.changed.notify_all();
        tracing::info!(taskmanager = %id, slots = register.slots, %data_address, session, "TaskManager registered");
        let shared = self.shared.clone();
        tokio::spawn(async move {
            let reason = loop {
                match inbound.message().await {
                    Ok(Some(message)) => {
                        if !on_message(&shared, session, &id, message) {
                            break "its session was replaced or ended".to_string();
                        }
                    }
                    Ok(None) => break "its session stream ended".to_string(),
                    Err(status) => break format!("its session broke: {}", status.message()),
                }
            };
            let mut state = shared.lock();
            if state.lose(session, &reason).is_some() {
                drop(state);
                shared.changed.notify_all();
            }
        });
        Ok(Response::new(stream))
    }

    async fn get_job_status(
        &self,
        _request: Request<proto::JobStatusRequest>,
    ) -> Result<Response<proto::JobStatusResponse>, Status> {
        let (mut response, client) = {
            let state = self.shared.lock();
            let (status, _) = state
                .ended
                .clone()
                .unwrap_or_else(|| ("RUNNING".into(), String::new()));
            (
                proto::JobStatusResponse {
                    job_name: self.shared.job_name.clone(),
                    status,
                    epoch: state.epoch,
                    registered_taskmanagers: state.registry.sessions().count() as u32,
                    slots: state.registry.total_slots(),
                    completed_checkpoints: 0,
                    stale_messages: state.stale_messages,
                    taskmanagers: state
                        .registry
                        .sessions()
                        .map(|(_, s)| s.id.clone())
                        .collect(),
                },
                state.client.clone(),
            )
        };
        // Once the job has ended its loop no longer answers; the status says how it ended.
        if let Some(client) = client.filter(|_| response.status == "RUNNING") {
            if let Ok(history) = blocking(move || client.checkpoint_history()).await {
                response.completed_checkpoints = history.completed;
            }
        }
        Ok(Response::new(response))
    }

    async fn trigger_savepoint(
        &self,
        _request: Request<proto::SavepointRequest>,
    ) -> Result<Response<proto::SavepointResponse>, Status> {
        let client = self.client()?;
        let savepoint = blocking(move || client.trigger_savepoint()).await?;
        Ok(Response::new(proto::SavepointResponse {
            savepoint_id: savepoint.checkpoint_id(),
            location: savepoint.location().to_string(),
        }))
    }

    async fn stop_with_savepoint(
        &self,
        request: Request<proto::StopRequest>,
    ) -> Result<Response<proto::SavepointResponse>, Status> {
        let client = self.client()?;
        let mode = if request.into_inner().drain {
            StopMode::Drain
        } else {
            StopMode::NoDrain
        };
        let savepoint = blocking(move || client.request_stop(mode)).await?;
        Ok(Response::new(proto::SavepointResponse {
            savepoint_id: savepoint.checkpoint_id(),
            location: savepoint.location().to_string(),
        }))
    }

    async fn cancel_job(
        &self,
        _request: Request<proto::CancelRequest>,
    ) -> Result<Response<proto::CancelResponse>, Status> {
        let client = self.client()?;
        client.request_cancel();
        Ok(Response::new(proto::CancelResponse {}))
    }
}

/// Handles one message of `session`; false when the session is no longer live (its
/// stream should end).
fn on_message(
    shared: &Shared,
    session: SessionId,
    id: &str,
    message: proto::TaskManagerMessage,
) -> bool {
    let mut state = shared.lock();
    state.messages += 1;
    if !state.registry.heartbeat(session, Instant::now()) {
        state.stale_messages += 1;
        tracing::info!(taskmanager = %id, session, "message of a stale session rejected; the session is closed");
        return false;
    }
    if message.epoch != 0 && message.epoch != state.epoch {
        state.stale_messages += 1;
        tracing::debug!(taskmanager = %id, epoch = message.epoch, current = state.epoch, "message of another epoch ignored");
        return true;
    }
    let Some(body) = message.body else {
        return true;
    };
    match body {
        In::Register(_) => {
            tracing::warn!(taskmanager = %id, "registered twice in one session; ignored");
        }
        In::Heartbeat(_) => {}
        In::Deployed(deployed) => {
            let Ok(run) = run_of(deployed.run, "deployed") else {
                return true;
            };
            match state.current_run(run, id) {
                Some(current) if deployed.error.is_empty() => {
                    current.deployed.insert(id.to_string());
                    if current.hosts.iter().all(|h| current.deployed.contains(h)) {
                        tracing::info!(%run, "run deployed");
                        let _ = current.events.send(TaskEvent::Deployed);
                    }
                }
                Some(current) => {
                    let kind = if deployed.corrupt_state {
                        DeployFailureKind::CorruptState
                    } else if deployed.fatal {
                        DeployFailureKind::Fatal
                    } else {
                        DeployFailureKind::Retriable
                    };
                    let tasks = current
                        .placement
                        .iter()
                        .filter(|(_, tm)| tm.as_str() == id)
                        .map(|(task, _)| *task)
                        .collect();
                    let _ = current.events.send(TaskEvent::DeployFailed {
                        tasks,
                        taskmanager: id.to_string(),
                        reason: deployed.error,
                        kind,
                    });
                }
                None => state.stale_messages += 1,
            }
        }
        In::TaskEvent(event) => {
            let Ok(run) = run_of(event.run, "task event") else {
                return true;
            };
            let task = event.task.map(SubtaskRef::from);
            let Some(current) = state.current_run(run, id) else {
                state.stale_messages += 1;
                return true;
            };
            // Only a task this TaskManager runs in this run may report.
            let Some(task) =
                task.filter(|t| current.placement.get(t).map(String::as_str) == Some(id))
            else {
                state.stale_messages += 1;
                tracing::warn!(taskmanager = %id, ?task, "a report for a task this TaskManager does not run; ignored");
                return true;
            };
            let report = task_event_from_proto(event).unwrap_or_else(|e| {
                // The task stays accounted for: it failed, as far as the job knows.
                TaskEvent::Failed {
                    task,
                    error: weir::error::TaskError::Remote {
                        message: format!("an undecodable report from TaskManager `{id}`: {e}"),
                        secondary: false,
                    },
                    metrics: Vec::new(),
                }
            });
            let _ = current.events.send(report);
        }
        In::Metrics(metrics) => match decode::<Vec<SubtaskSample>>("metrics", &metrics.samples) {
            Ok(samples) => {
                state.metrics.insert(id.to_string(), samples);
            }
            Err(e) => tracing::warn!(taskmanager = %id, error = %e, "undecodable metrics"),
        },
        In::ReaderEvent(event) => {
            let Ok(run) = run_of(event.run, "reader event") else {
                return true;
            };
            match state.current_run(run, id) {
                Some(current) => match decode::<ReaderEvent>("reader event", &event.event) {
                    Ok(reader_event) => {
                        if let Some(tx) = current.reader_events.get(&NodeId(event.source_node)) {
                            let _ = tx.send(reader_event);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(taskmanager = %id, error = %e, "undecodable reader event")
                    }
                },
                None => state.stale_messages += 1,
            }
        }
    }
    true
}
