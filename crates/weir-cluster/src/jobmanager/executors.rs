//! The JobManager's [`TaskExecutors`] in cluster mode: a run is placed on the registered
//! TaskManagers' slots, deployed by message, and driven by messages — controls, checkpoint
//! notices, the source coordinators' messages to their readers, cancellation.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir::error::WeirError;
use weir::metrics::SubtaskSample;
use weir::runtime::deployment::DeployError;
use weir::runtime::network::frame::RunId;
use weir::runtime::task::TaskControl;
use weir::runtime::task_executors::{DeployedRun, RunRequest, TaskExecutors};

use super::registry::{place, slots_needed};
use super::state::{RunState, Shared};
use crate::convert::encode;
use crate::error::ClusterError;
use crate::proto;
use crate::proto::job_manager_message::Body;

fn cluster_error(e: ClusterError) -> DeployError {
    DeployError::Other(WeirError::from(e))
}

/// Runs on the TaskManagers registered with this JobManager.
pub struct ClusterTaskExecutors {
    shared: Arc<Shared>,
}

impl ClusterTaskExecutors {
    /// Executors over `shared`'s registry.
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    /// Waits until the registered TaskManagers offer `needed` slots. The JobManager deploys
    /// only once enough are offered, so this waits only when a TaskManager went away in
    /// between; as long as the slot request timeout (`--slot-timeout-ms`), as that check does,
    /// so that a TaskManager slow to register again on a busy machine costs no restart.
    fn await_slots(&self, needed: u32) -> Result<(), DeployError> {
        let deadline = Instant::now() + self.shared.config.slot_timeout;
        let mut state = self.shared.lock();
        let mut logged = false;
        while state.registry.total_slots() < needed {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(DeployError::Unavailable(WeirError::InvalidRequest(format!(
                    "not enough slots: the job needs {needed} (its largest parallelism), the {} registered TaskManager(s) offer {}; start more TaskManagers or give them more --slots",
                    state.registry.sessions().count(),
                    state.registry.total_slots(),
                ))));
            }
            if !logged {
                tracing::info!(
                    needed,
                    offered = state.registry.total_slots(),
                    "waiting for TaskManager slots"
                );
                logged = true;
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, left.min(Duration::from_millis(500)))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        Ok(())
    }
}

impl TaskExecutors for ClusterTaskExecutors {
    fn on_job_epoch(&mut self, epoch: u64) {
        self.shared.lock().epoch = epoch;
    }

    fn offered_slots(&self) -> Option<u32> {
        Some(self.shared.lock().registry.total_slots())
    }

    fn slot_timeout(&self) -> Option<Duration> {
        Some(self.shared.config.slot_timeout)
    }

    fn deploy_timeout(&self) -> Option<Duration> {
        Some(self.shared.config.deploy_timeout)
    }

    fn sample_metrics(&self) -> Vec<(Option<String>, Vec<SubtaskSample>)> {
        let state = self.shared.lock();
        // Only TaskManagers still registered: a lost one's tasks are gone.
        let live: std::collections::BTreeSet<String> = state
            .registry
            .sessions()
            .map(|(_, s)| s.id.clone())
            .collect();
        state
            .metrics
            .iter()
            .filter(|(tm, _)| live.contains(*tm))
            .map(|(tm, samples)| (Some(tm.clone()), samples.clone()))
            .collect()
    }

    fn start_run(&mut self, request: RunRequest<'_>) -> Result<Box<dyn DeployedRun>, DeployError> {
        let job = request.job;
        let vertices = &job.plan.execution_graph.vertices;
        self.await_slots(slots_needed(vertices))?;
        let restore = encode("restore point", &request.restore.cloned()).map_err(cluster_error)?;
        let mut state = self.shared.lock();
        state.epoch = request.run.epoch;
        let offered: Vec<(String, u32)> = state
            .registry
            .sessions()
            .map(|(_, s)| (s.id.clone(), s.slots))
            .collect();
        let placement = place(vertices, &offered).ok_or_else(|| {
            DeployError::Unavailable(WeirError::InvalidRequest(
                "the TaskManagers' slots went away while placing the run".into(),
            ))
        })?;
        let hosts: BTreeSet<String> = placement.values().cloned().collect();
        let peers: Vec<proto::Peer> = state
            .registry
            .sessions()
            .filter(|(_, s)| hosts.contains(&s.id))
            .map(|(_, s)| proto::Peer {
                taskmanager_id: s.id.clone(),
                data_address: s.data_address.to_string(),
            })
            .collect();
        // The JobManager keeps the coordinators' side of each reader's endpoint: requests
        // from the TaskManagers go into it, its messages are forwarded to them.
        let mut reader_events = HashMap::new();
        let mut reader_lines = Vec::new();
        for (node, endpoints) in request.readers {
            let vertex = job.plan.job_graph.vertex_of_node[node.index()];
            for (subtask, endpoint) in endpoints.into_iter().enumerate() {
                let Some(endpoint) = endpoint else { continue };
                let (to_coordinator, messages) = endpoint.into_parts();
                reader_events.entry(node).or_insert(to_coordinator);
                let task = weir::graph::execution_graph::SubtaskRef {
                    vertex,
                    subtask: subtask as u32,
                };
                reader_lines.push((node, task, messages));
            }
        }
        state.run = Some(RunState {
            run: request.run,
            placement: placement.clone(),
            hosts: hosts.clone(),
            deployed: BTreeSet::new(),
            events: request.events,
            reader_events,
            lost: BTreeSet::new(),
        });
        let deploy = proto::DeployRun {
            run: Some(request.run.into()),
            placement: placement
                .iter()
                .map(|(task, tm)| proto::Placement {
                    subtask: Some((*task).into()),
                    taskmanager_id: tm.clone(),
                })
                .collect(),
            peers,
            restore,
            holder: request.fencing.holder().to_string(),
            trace_record_origins: request.trace_record_origins,
        };
        // The TaskManagers deploy in the background (a restore may read much state); each
        // reports, and the service tells the job loop once all have (or one failed).
        for host in &hosts {
            if !state.send_to(host, Body::Deploy(deploy.clone())) {
                let failure = format!("TaskManager `{host}` went away before its deployment");
                state.run = None;
                drop(state);
                cancel_everywhere(&self.shared, request.run, &hosts);
                return Err(DeployError::Unavailable(WeirError::InvalidRequest(failure)));
            }
        }
        drop(state);
        tracing::info!(run = %request.run, taskmanagers = ?hosts, "run deploying");
        for (node, task, messages) in reader_lines {
            let shared = self.shared.clone();
            let host = placement.get(&task).cloned().unwrap_or_default();
            let run = request.run;
            let spawned = std::thread::Builder::new()
                .name(format!("reader-forward {}", task.subtask))
                .spawn(move || {
                    // Ends when the coordinator lets go of its readers (the run ends).
                    for message in messages {
                        let Ok(bytes) = encode("reader message", &message) else {
                            continue;
                        };
                        let state = shared.lock();
                        let current = state.run.as_ref().is_some_and(|r| r.run == run);
                        if !current {
                            return;
                        }
                        state.send_to(
                            &host,
                            Body::ReaderMessage(proto::ReaderMessage {
                                run: Some(run.into()),
                                source_node: node.0,
                                subtask: task.subtask,
                                message: bytes,
                            }),
                        );
                    }
                });
            if let Err(e) = spawned {
                cancel_everywhere(&self.shared, request.run, &hosts);
                self.shared.lock().run = None;
                return Err(DeployError::Other(WeirError::Spawn {
                    what: "reader message forwarding".into(),
                    source: e,
                }));
            }
        }
        Ok(Box::new(ClusterRun {
            shared: self.shared.clone(),
            run: request.run,
            hosts,
        }))
    }
}

/// Tells every host to cancel `run`.
fn cancel_everywhere(shared: &Shared, run: RunId, hosts: &BTreeSet<String>) {
    let state = shared.lock();
    for host in hosts {
        state.send_to(
            host,
            Body::Cancel(proto::CancelRun {
                run: Some(run.into()),
            }),
        );
    }
}

/// A run on the cluster's TaskManagers.
pub struct ClusterRun {
    shared: Arc<Shared>,
    run: RunId,
    hosts: BTreeSet<String>,
}

impl DeployedRun for ClusterRun {
    fn is_deployed(&self) -> bool {
        false
    }

    fn broadcast(&self, control: TaskControl) {
        let Ok(bytes) = encode("task control", &control) else {
            return;
        };
        let state = self.shared.lock();
        for host in &self.hosts {
            state.send_to(
                host,
                Body::Control(proto::TaskControl {
                    run: Some(self.run.into()),
                    control: bytes.clone(),
                }),
            );
        }
    }

    fn cancel(&mut self) {
        cancel_everywhere(&self.shared, self.run, &self.hosts);
    }

    fn join(self: Box<Self>) {
        // Every task has reported its end or was lost with its TaskManager; later reports
        // of this run are stale.
        let mut state = self.shared.lock();
        if state.run.as_ref().is_some_and(|r| r.run == self.run) {
            state.run = None;
        }
    }
}
