//! One run of the job's tasks on this TaskManager: its data connections, its tasks on
//! threads, and the lines that forward their reports and their readers' requests to the
//! JobManager.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;

use crossbeam_channel::Sender;
use tokio::sync::mpsc::UnboundedSender;
use weir::checkpoint::storage::CheckpointStorage;
use weir::connectors::source::ReaderEvent;
use weir::graph::execution_graph::SubtaskRef;
use weir::graph::ids::NodeId;
use weir::metrics::MetricRegistry;
use weir::runtime::channel::cancel_pair;
use weir::runtime::deployment::{deploy_tasks, DeployError, RestorePoint, TaskDeployment};
use weir::runtime::job_definition::JobDefinition;
use weir::runtime::network::environment::{NetworkEnvironment, RunConnections};
use weir::runtime::network::frame::RunId;
use weir::runtime::network::transport::{NetworkTransport, Placement};
use weir::runtime::source_task::{ReaderEndpoint, ReaderMessage};
use weir::runtime::task::{TaskControl, TaskEvent};
use weir::runtime::task_executors::{start_tasks, DeployedRun, LocalRun, ReaderEndpoints};
use weir::FencingToken;

use crate::convert::{decode, encode, run_of, task_event_to_proto, task_of, unreportable};
use crate::proto;
use crate::proto::task_manager_message::Body;

/// Why a deployment failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// Something this TaskManager or the network could not do now: the run may be retried.
    Retriable,
    /// A state file of the restore point is damaged.
    CorruptState,
    /// The job cannot run (an operator cannot be created).
    Fatal,
}

/// Why a deployment failed: the message, and of what kind.
pub type DeployFailure = (String, FailureKind);

/// The running tasks of one run here.
pub struct TaskManagerRun {
    /// Which run.
    pub run: RunId,
    tasks: LocalRun,
    connections: RunConnections,
    /// Each local source reader's line from its coordinator.
    readers: HashMap<(NodeId, u32), Sender<ReaderMessage>>,
}

/// Stamps a message with `epoch`.
fn message(epoch: u64, body: Body) -> proto::TaskManagerMessage {
    proto::TaskManagerMessage {
        epoch,
        body: Some(body),
    }
}

/// What a deployment needs of the TaskManager.
pub struct DeployContext<'a> {
    /// The job.
    pub job: &'a JobDefinition,
    /// This TaskManager's data plane.
    pub network: &'a NetworkEnvironment,
    /// Where snapshots go.
    pub storage: Option<&'a Arc<dyn CheckpointStorage>>,
    /// The JobManager's epoch.
    pub epoch: u64,
    /// The session's line to the JobManager.
    pub outbound: UnboundedSender<proto::TaskManagerMessage>,
    /// Where the tasks' metrics are registered.
    pub metrics: &'a MetricRegistry,
}

impl TaskManagerRun {
    /// Deploys this TaskManager's part of `deploy` and starts it.
    pub fn deploy(
        context: DeployContext<'_>,
        deploy: proto::DeployRun,
    ) -> Result<Self, DeployFailure> {
        let other = |e: String| (e, FailureKind::Retriable);
        let job = context.job;
        let me = context.network.id().to_string();
        let run = run_of(deploy.run, "deploy").map_err(|e| other(e.to_string()))?;
        let mut placement: Placement = HashMap::new();
        for p in deploy.placement {
            let subtask = p
                .subtask
                .ok_or_else(|| other("a placement without a subtask".into()))?;
            placement.insert(subtask.into(), p.taskmanager_id);
        }
        let mut peers = BTreeMap::new();
        for peer in deploy.peers {
            let address: SocketAddr = peer.data_address.parse().map_err(|e| {
                other(format!(
                    "peer `{}` has no usable data address: {e}",
                    peer.taskmanager_id
                ))
            })?;
            peers.insert(peer.taskmanager_id, address);
        }
        let restore: Option<RestorePoint> =
            decode("restore point", &deploy.restore).map_err(|e| other(e.to_string()))?;
        let job_name = &job.plan.stream_graph.job_name;
        let fencing = match context.storage {
            Some(storage) if context.epoch > 0 => FencingToken::new(
                job_name,
                context.epoch,
                &deploy.holder,
                storage.clone(),
                None,
            ),
            _ => FencingToken::unfenced(job_name),
        };
        let mut connections = context
            .network
            .connect_run(run, &peers)
            .map_err(|e| other(e.to_string()))?;
        let (handle, cancel) = cancel_pair();
        // The readers of the sources placed here, each with a line from and to its
        // coordinator on the JobManager.
        let mut endpoints: ReaderEndpoints = HashMap::new();
        let mut readers = HashMap::new();
        let sg = &job.plan.stream_graph;
        for vertex in job.plan.job_graph.vertices.iter().filter(|v| v.is_source) {
            let node = sg.node(vertex.head()).id;
            let (requests, from_readers) = crossbeam_channel::unbounded::<ReaderEvent>();
            let mut slots: Vec<Option<ReaderEndpoint>> = Vec::new();
            for subtask in 0..vertex.parallelism {
                let task = SubtaskRef {
                    vertex: vertex.id,
                    subtask,
                };
                if placement.get(&task) != Some(&me) {
                    slots.push(None);
                    continue;
                }
                let (tx, rx) = crossbeam_channel::unbounded();
                readers.insert((node, subtask), tx);
                slots.push(Some(ReaderEndpoint::new(requests.clone(), rx)));
            }
            endpoints.insert(node, slots);
            drop(requests);
            let outbound = context.outbound.clone();
            let epoch = context.epoch;
            std::thread::Builder::new()
                .name(format!("reader-requests {node}"))
                .spawn(move || {
                    for event in from_readers {
                        let Ok(bytes) = encode("reader event", &event) else {
                            continue;
                        };
                        let body = Body::ReaderEvent(proto::ReaderEvent {
                            run: Some(run.into()),
                            source_node: node.0,
                            event: bytes,
                        });
                        if outbound.send(message(epoch, body)).is_err() {
                            return;
                        }
                    }
                })
                .map_err(|e| other(format!("cannot start a thread: {e}")))?;
        }
        let transport = NetworkTransport::new(&me, &placement, &connections);
        let tasks = deploy_tasks(
            TaskDeployment {
                job,
                transport: &transport,
                cancel: &cancel,
                storage: context.storage,
                restore: restore.as_ref(),
                fencing: &fencing,
                metrics: context.metrics,
                attempt: run.attempt,
                trace_record_origins: deploy.trace_record_origins,
            },
            &mut endpoints,
        );
        let tasks = match tasks {
            Ok(tasks) => tasks,
            Err(DeployError::CorruptState(problem)) => {
                connections.shutdown("the deployment failed");
                return Err((problem, FailureKind::CorruptState));
            }
            Err(DeployError::Unavailable(e)) => {
                connections.shutdown("the deployment failed");
                return Err(other(e.to_string()));
            }
            Err(DeployError::Other(e)) => {
                connections.shutdown("the deployment failed");
                return Err((e.to_string(), FailureKind::Fatal));
            }
        };
        connections.seal();
        let (events, reports) = crossbeam_channel::unbounded::<TaskEvent>();
        {
            let outbound = context.outbound.clone();
            let epoch = context.epoch;
            std::thread::Builder::new()
                .name("task-reports".into())
                .spawn(move || {
                    for event in reports {
                        match task_event_to_proto(run, &event) {
                            Ok(Some(event)) => {
                                if outbound
                                    .send(message(epoch, Body::TaskEvent(event)))
                                    .is_err()
                                {
                                    return;
                                }
                            }
                            Ok(None) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "cannot report a task event");
                                if let Some(task) = task_of(&event) {
                                    let failed = unreportable(run, task, &e.to_string());
                                    let _ = outbound.send(message(epoch, Body::TaskEvent(failed)));
                                }
                            }
                        }
                    }
                })
                .map_err(|e| other(format!("cannot start a thread: {e}")))?;
        }
        let tasks = start_tasks(
            tasks,
            job,
            context.storage.cloned(),
            &events,
            handle,
            cancel,
        )
        .map_err(|e| other(e.to_string()))?;
        tracing::info!(%run, tasks = placement.values().filter(|tm| **tm == me).count(), "run deployed");
        Ok(Self {
            run,
            tasks,
            connections,
            readers,
        })
    }

    /// Delivers a control message to every task of the run here.
    pub fn control(&self, control: TaskControl) {
        self.tasks.broadcast(control);
    }

    /// Delivers a coordinator's message to reader `subtask` of source `node`.
    pub fn reader_message(&self, node: NodeId, subtask: u32, message: ReaderMessage) {
        if let Some(tx) = self.readers.get(&(node, subtask)) {
            let _ = tx.send(message);
        }
    }

    /// Cancels the run: its tasks stop and its data connections are cut. Returns at once;
    /// the tasks report their end as they stop.
    pub fn cancel(mut self, reason: &str) {
        self.tasks.cancel();
        self.connections.shutdown(reason);
        self.readers.clear();
        let tasks = self.tasks;
        // Joined off the session's loop: a task may take a moment to notice.
        let _ = std::thread::Builder::new()
            .name("run-cleanup".into())
            .spawn(move || Box::new(tasks).join());
    }
}
