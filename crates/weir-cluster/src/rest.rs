//! The operating surface of a job process: the REST endpoint and dashboard of a cluster's
//! JobManager (on by default, as Flink's), and of the local mini-cluster when `rest.port`
//! is set (off by default, as Flink's local web UI).

use std::sync::{Arc, Mutex, OnceLock};

use weir::runtime::job_definition::JobDefinition;
use weir::runtime::mini_cluster::{MiniCluster, PipelineExecutor};
use weir::{JobClient, JobExecutionResult, WeirError};
use weir_rest::model::cluster::TaskManagerInfo;
use weir_rest::{ClusterInfo, Dispatcher, LocalClusterInfo, RestConfig, RestServer};

use crate::error::ClusterError;
use crate::jobmanager::state::Shared;

/// The TaskManagers registered with this JobManager.
pub(crate) struct RegisteredTaskManagers(pub(crate) Arc<Shared>);

impl ClusterInfo for RegisteredTaskManagers {
    fn taskmanagers(
        &self,
        _jobs: &[Arc<weir::runtime::job_master::JobDetails>],
    ) -> Vec<TaskManagerInfo> {
        let now = std::time::Instant::now();
        self.0
            .lock()
            .registry
            .sessions()
            .map(|(_, s)| TaskManagerInfo {
                id: s.id.clone(),
                data_address: s.data_address.to_string(),
                slots: s.slots,
                since_last_heartbeat_ms: now.saturating_duration_since(s.last_heartbeat).as_millis()
                    as u64,
            })
            .collect()
    }
}

/// The mini-cluster's endpoint: started by the first job that asks for one, shared by the
/// jobs of the process after it, and kept until the process exits.
fn local_endpoint(config: &RestConfig) -> Result<Arc<Dispatcher>, ClusterError> {
    static ENDPOINT: OnceLock<Mutex<Option<RestServer>>> = OnceLock::new();
    let mut endpoint = ENDPOINT
        .get_or_init(|| Mutex::new(None))
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(server) = endpoint.as_ref() {
        return Ok(server.dispatcher().clone());
    }
    let dispatcher = Arc::new(Dispatcher::new(Box::new(LocalClusterInfo)));
    let server = RestServer::start(config, dispatcher.clone())?;
    // Printed for people and tools (`weir run` reads it): where the dashboard is.
    eprintln!("Weir dashboard and REST API: {}/", server.url());
    *endpoint = Some(server);
    Ok(dispatcher)
}

/// How long an ended job's process keeps serving the outcome of operations not yet read.
pub(crate) const LINGER: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs jobs on the local mini-cluster, served by the REST endpoint `rest`.
#[derive(Debug, Clone)]
pub struct LocalRestExecutor {
    rest: RestConfig,
}

impl LocalRestExecutor {
    /// An executor whose jobs are served at `rest`.
    pub fn new(rest: RestConfig) -> Self {
        Self { rest }
    }
}

impl PipelineExecutor for LocalRestExecutor {
    fn execute(&self, job: JobDefinition) -> Result<JobExecutionResult, WeirError> {
        let client = self.submit(job)?;
        let result = client.wait();
        // A stop's savepoint is only useful once its requester has read where it is.
        if let Ok(dispatcher) = local_endpoint(&self.rest) {
            dispatcher.linger(LINGER);
        }
        result
    }

    fn submit(&self, job: JobDefinition) -> Result<JobClient, WeirError> {
        let dispatcher = local_endpoint(&self.rest).map_err(WeirError::from)?;
        let client = MiniCluster::submit(job)?;
        dispatcher.register(Arc::new(client.clone()));
        Ok(client)
    }
}
