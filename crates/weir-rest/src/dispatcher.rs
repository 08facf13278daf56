//! What the REST API serves: the jobs this JobManager runs (through their clients), the
//! asynchronous operations started on them, and the cluster's TaskManagers (Flink's
//! `Dispatcher` and `ResourceManager` gateways, as the REST handlers see them).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use weir::runtime::job_master::JobDetails;
use weir::JobClient;

use crate::model::cluster::TaskManagerInfo;
use crate::model::operation::AsynchronousOperationResult;

/// The cluster's TaskManagers, as the JobManager knows them.
pub trait ClusterInfo: Send + Sync {
    /// Every registered TaskManager, while `jobs` run.
    fn taskmanagers(&self, jobs: &[Arc<JobDetails>]) -> Vec<TaskManagerInfo>;
}

/// The mini-cluster: one TaskManager, this process, with as many slots as its running
/// jobs use (with slot sharing, a job's highest parallelism).
#[derive(Debug, Default)]
pub struct LocalClusterInfo;

impl ClusterInfo for LocalClusterInfo {
    fn taskmanagers(&self, jobs: &[Arc<JobDetails>]) -> Vec<TaskManagerInfo> {
        let slots = jobs
            .iter()
            .filter(|d| !d.state.is_terminal())
            .map(|d| d.vertices.iter().map(|v| v.parallelism).max().unwrap_or(0))
            .sum();
        vec![TaskManagerInfo {
            id: "local".into(),
            data_address: "in-process".into(),
            slots,
            since_last_heartbeat_ms: 0,
        }]
    }
}

/// The jobs served, and the operations started on them.
pub struct Dispatcher {
    jobs: Mutex<Vec<Arc<JobClient>>>,
    /// Each operation's state, and whether its outcome was read once completed.
    operations: Mutex<HashMap<String, (AsynchronousOperationResult, bool)>>,
    cluster: Box<dyn ClusterInfo>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Dispatcher {
    /// A dispatcher of no jobs yet, on `cluster`.
    pub fn new(cluster: Box<dyn ClusterInfo>) -> Self {
        Self {
            jobs: Mutex::new(Vec::new()),
            operations: Mutex::new(HashMap::new()),
            cluster,
        }
    }

    /// Serves `client`'s job from now on.
    pub fn register(&self, client: Arc<JobClient>) {
        lock(&self.jobs).push(client);
    }

    /// Every job served, oldest first.
    pub fn jobs(&self) -> Vec<Arc<JobClient>> {
        lock(&self.jobs).clone()
    }

    /// The job with id `id`.
    pub fn job(&self, id: &str) -> Option<Arc<JobClient>> {
        lock(&self.jobs)
            .iter()
            .find(|c| c.details().job_id == id)
            .cloned()
    }

    /// Every job's latest details.
    pub fn details(&self) -> Vec<Arc<JobDetails>> {
        self.jobs().iter().map(|c| c.details()).collect()
    }

    /// The cluster's TaskManagers; in a mini-cluster, this process alone.
    pub fn taskmanagers(&self) -> Vec<TaskManagerInfo> {
        self.cluster.taskmanagers(&self.details())
    }

    /// Records the state of operation `request` on job `job`.
    pub fn set_operation(&self, job: &str, request: &str, result: AsynchronousOperationResult) {
        lock(&self.operations).insert(format!("{job}/{request}"), (result, false));
    }

    /// The state of operation `request` on job `job`.
    pub fn operation(&self, job: &str, request: &str) -> Option<AsynchronousOperationResult> {
        let mut operations = lock(&self.operations);
        let (result, read) = operations.get_mut(&format!("{job}/{request}"))?;
        if result.operation.is_some() {
            *read = true;
        }
        Some(result.clone())
    }

    /// Waits, at most `limit`, until every operation has completed and its outcome has been
    /// read: a stop with a savepoint ends the job, and the process with it, but whoever
    /// asked for it must still learn where the savepoint is.
    pub fn linger(&self, limit: std::time::Duration) {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            let waiting = lock(&self.operations)
                .values()
                .any(|(result, read)| result.operation.is_none() || !read);
            if !waiting {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}
