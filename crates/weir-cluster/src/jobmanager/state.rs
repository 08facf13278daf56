//! What the JobManager process shares between its gRPC sessions (on the async runtime) and
//! its job's loop (on its own thread): the registry, each session's outbound line, and the
//! run in progress. Both sides hold the lock only briefly and never across a wait.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use crossbeam_channel::Sender;
use tokio::sync::mpsc;
use tonic::Status;
use weir::connectors::source::ReaderEvent;
use weir::graph::ids::NodeId;
use weir::runtime::network::frame::RunId;
use weir::runtime::network::transport::Placement;
use weir::runtime::task::TaskEvent;
use weir::JobClient;

use super::registry::{Registry, SessionId};
use weir::metrics::SubtaskSample;

use crate::config::ClusterConfig;
use crate::proto;
use crate::proto::job_manager_message::Body;

/// The line to one TaskManager's session stream.
pub type Outbound = mpsc::UnboundedSender<Result<proto::JobManagerMessage, Status>>;

/// The run in progress.
pub struct RunState {
    /// Which run.
    pub run: RunId,
    /// Where each subtask runs.
    pub placement: Placement,
    /// The TaskManagers with subtasks of the run.
    pub hosts: BTreeSet<String>,
    /// The hosts that reported their tasks deployed.
    pub deployed: BTreeSet<String>,
    /// The job loop's event line.
    pub events: Sender<TaskEvent>,
    /// Each source coordinator's inbox of reader requests.
    pub reader_events: HashMap<NodeId, Sender<ReaderEvent>>,
    /// Hosts lost during the run.
    pub lost: BTreeSet<String>,
}

/// The JobManager's mutable state.
pub struct JobManagerState {
    /// The epoch (fencing token) of this JobManager.
    pub epoch: u64,
    /// The TaskManagers.
    pub registry: Registry,
    /// Each session's outbound line.
    pub outbound: HashMap<SessionId, Outbound>,
    /// The run in progress.
    pub run: Option<RunState>,
    /// Messages ignored as stale (unknown session, old run or epoch).
    pub stale_messages: u64,
    /// Messages received from TaskManagers.
    pub messages: u64,
    /// How the job ended, once it has: status and error.
    pub ended: Option<(String, String)>,
    /// The job's client, for the status and control calls.
    pub client: Option<Arc<JobClient>>,
    /// The latest metrics each TaskManager sent, by TaskManager id.
    pub metrics: BTreeMap<String, Vec<SubtaskSample>>,
}

/// The state and what every side needs to read it.
pub struct Shared {
    state: Mutex<JobManagerState>,
    /// Signalled on every registration, deployment report and loss.
    pub changed: Condvar,
    /// The process's cluster settings.
    pub config: ClusterConfig,
    /// The job graph's fingerprint.
    pub fingerprint: u64,
    /// The job's name.
    pub job_name: String,
}

impl Shared {
    /// Fresh state for the job `job_name` with `fingerprint`.
    pub fn new(config: ClusterConfig, fingerprint: u64, job_name: String) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(JobManagerState {
                epoch: 0,
                registry: Registry::default(),
                outbound: HashMap::new(),
                run: None,
                stale_messages: 0,
                messages: 0,
                ended: None,
                client: None,
                metrics: BTreeMap::new(),
            }),
            changed: Condvar::new(),
            config,
            fingerprint,
            job_name,
        })
    }

    /// Locks the state; a panic elsewhere never leaves it unusable.
    pub fn lock(&self) -> MutexGuard<'_, JobManagerState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl JobManagerState {
    /// Sends `body` to `session`; false if the session is gone.
    pub fn send(&self, session: SessionId, body: Body) -> bool {
        self.outbound.get(&session).is_some_and(|tx| {
            tx.send(Ok(proto::JobManagerMessage {
                epoch: self.epoch,
                body: Some(body),
            }))
            .is_ok()
        })
    }

    /// Sends `body` to TaskManager `id`'s live session; false if it has none.
    pub fn send_to(&self, id: &str, body: Body) -> bool {
        self.registry
            .session_of(id)
            .is_some_and(|session| self.send(session, body))
    }

    /// Ends `session` (its stream closes) and, if its TaskManager runs part of the current
    /// run, tells the job loop those tasks are lost. Returns the TaskManager's id.
    pub fn lose(&mut self, session: SessionId, reason: &str) -> Option<String> {
        let info = self.registry.remove(session)?;
        self.outbound.remove(&session);
        if self.ended.is_some() {
            tracing::info!(taskmanager = %info.id, %reason, "TaskManager left after the job's end");
        } else {
            tracing::warn!(taskmanager = %info.id, %reason, "TaskManager lost");
        }
        self.run_lost(&info.id, reason);
        Some(info.id)
    }

    /// TaskManager `id` is gone: if it runs part of the current run, tells the job loop
    /// those tasks are lost, and fails its deployment if that is still awaited.
    pub fn run_lost(&mut self, id: &str, reason: &str) {
        let Some(run) = self.run.as_mut() else {
            return;
        };
        if !run.hosts.contains(id) || !run.lost.insert(id.to_string()) {
            return;
        }
        let tasks = run
            .placement
            .iter()
            .filter(|(_, tm)| tm.as_str() == id)
            .map(|(task, _)| *task)
            .collect();
        let _ = run.events.send(TaskEvent::Lost {
            tasks,
            taskmanager: id.to_string(),
            reason: reason.to_string(),
        });
    }

    /// The current run, if `run` is it and TaskManager `from` is one of its live hosts.
    pub fn current_run(&mut self, run: RunId, from: &str) -> Option<&mut RunState> {
        self.run
            .as_mut()
            .filter(|r| r.run == run && r.hosts.contains(from) && !r.lost.contains(from))
    }

    /// Sends heartbeats to every session and ends those not heard of within the timeout.
    pub fn check_heartbeats(&mut self, now: Instant, config: &ClusterConfig) {
        for session in self.registry.expired(now, config.heartbeat_timeout) {
            let reason = format!(
                "no heartbeat for {} ms (--heartbeat-timeout-ms)",
                config.heartbeat_timeout.as_millis()
            );
            self.lose(session, &reason);
        }
        let sessions: Vec<SessionId> = self.registry.sessions().map(|(s, _)| s).collect();
        let millis = weir::runtime::snapshot::now_millis();
        for session in sessions {
            self.send(
                session,
                Body::Heartbeat(proto::Heartbeat {
                    sent_at_millis: millis,
                }),
            );
        }
    }
}
