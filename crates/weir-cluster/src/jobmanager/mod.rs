//! The JobManager process: the job's loop (the same [`JobMaster`](weir::runtime::job_master)
//! as in local mode) with its tasks on TaskManagers, and the gRPC service they and clients
//! talk to.
//!
//! - `registry.rs`: the TaskManagers, their slots and heartbeats, and placement (pure);
//! - `state.rs`: what the service and the job's loop share;
//! - `service.rs`: the gRPC service;
//! - `executors.rs`: deploying and driving runs on the TaskManagers.

mod executors;
pub mod registry;
mod service;
pub(crate) mod state;

use std::sync::Arc;
use std::time::Duration;

use tokio_stream::wrappers::TcpListenerStream;
use weir::runtime::job_definition::JobDefinition;
use weir::runtime::mini_cluster::MiniCluster;
use weir::{JobExecutionResult, JobStatus};

use crate::config::ClusterConfig;
use crate::error::ClusterError;
use crate::proto;
use crate::proto::job_manager_message::Body;
use crate::proto::job_manager_service_server::JobManagerServiceServer;
pub use executors::ClusterTaskExecutors;
pub use state::Shared;

/// How long the JobManager lingers after the job's end so that its TaskManagers hear of it.
const FAREWELL: Duration = Duration::from_millis(300);

/// Runs `job` as its cluster's JobManager: serves the TaskManagers and clients on the RPC
/// address, schedules the job's runs on them, and returns the job's result.
///
/// A JobManager with a checkpoint directory resumes the job from its newest restore point
/// in that directory (as Flink's high-availability mode does): a JobManager that died and is
/// started again picks the job up where its checkpoints left it, under a new epoch.
pub fn run_jobmanager(
    config: &ClusterConfig,
    mut job: JobDefinition,
) -> Result<JobExecutionResult, ClusterError> {
    if job.config.checkpoint.storage.is_durable() && job.config.restore.is_none() {
        job.config.resume_from_latest_checkpoint = true;
    }
    // Bound before the job starts, so that a port in use is reported at once.
    let (runtime, listener) = rpc_endpoint(config)?;
    let address = listener
        .local_addr()
        .map_err(|e| ClusterError::Internal(format!("cannot read the RPC address: {e}")))?;
    let shared = Shared::new(
        config.clone(),
        job.fingerprint(),
        job.plan.stream_graph.job_name.clone(),
    );
    // Also bound before the job starts: the REST endpoint and dashboard.
    let rest = config
        .rest
        .as_ref()
        .map(|rest| {
            let dispatcher = Arc::new(weir_rest::Dispatcher::new(Box::new(
                crate::rest::RegisteredTaskManagers(shared.clone()),
            )));
            weir_rest::RestServer::start(rest, dispatcher)
        })
        .transpose()?;
    if let Some(rest) = &rest {
        // Printed for people and tools (`weir run` reads it): where the dashboard is.
        eprintln!("Weir dashboard and REST API: {}/", rest.url());
    }
    let client = Arc::new(MiniCluster::submit_with(
        job,
        Box::new(ClusterTaskExecutors::new(shared.clone())),
    )?);
    if let Some(rest) = &rest {
        rest.dispatcher().register(client.clone());
    }
    shared.lock().client = Some(client.clone());
    let (server, monitor) = serve(&runtime, listener, &shared);
    tracing::info!(%address, job = %shared.job_name, "JobManager listening");
    let result = client.wait();
    let (status, error) = match &result {
        Ok(r) => (status_name(r.status).to_string(), String::new()),
        Err(e) => ("FAILED".to_string(), e.to_string()),
    };
    {
        let mut state = shared.lock();
        state.ended = Some((status.clone(), error.clone()));
        let sessions: Vec<_> = state.registry.sessions().map(|(s, _)| s).collect();
        for session in sessions {
            state.send(
                session,
                Body::JobEnded(proto::JobEnded {
                    status: status.clone(),
                    error: error.clone(),
                }),
            );
        }
    }
    std::thread::sleep(FAREWELL);
    if let Some(rest) = &rest {
        rest.dispatcher().linger(crate::rest::LINGER);
    }
    drop(rest);
    monitor.abort();
    server.abort();
    runtime.shutdown_timeout(Duration::from_secs(1));
    result.map_err(ClusterError::from)
}

/// The JobManager's RPC runtime and its listening socket on the configured address.
fn rpc_endpoint(
    config: &ClusterConfig,
) -> Result<(tokio::runtime::Runtime, std::net::TcpListener), ClusterError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("jobmanager-rpc")
        .enable_all()
        .build()
        .map_err(|e| ClusterError::Internal(format!("cannot start the RPC runtime: {e}")))?;
    let listener =
        std::net::TcpListener::bind(&config.rpc_bind).map_err(|cause| ClusterError::Bind {
            address: config.rpc_bind.clone(),
            setting: "--rpc-bind-address / --jobmanager-address",
            cause,
        })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| ClusterError::Internal(format!("cannot configure the RPC socket: {e}")))?;
    Ok((runtime, listener))
}

/// Serves the gRPC service on `listener` and checks heartbeats, on `runtime`.
fn serve(
    runtime: &tokio::runtime::Runtime,
    listener: std::net::TcpListener,
    shared: &Arc<Shared>,
) -> (
    tokio::task::JoinHandle<std::io::Result<()>>,
    tokio::task::JoinHandle<()>,
) {
    let server = {
        let shared = shared.clone();
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener)?;
            let mut builder = tonic::transport::Server::builder();
            if let Some(tls) = &shared.config.internal_tls {
                builder = builder
                    .tls_config(tls.server())
                    .map_err(|e| std::io::Error::other(format!("internal TLS: {e}")))?;
            }
            builder
                .add_service(JobManagerServiceServer::new(service::JobManagerRpc::new(
                    shared,
                )))
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await
                .map_err(|e| std::io::Error::other(e.to_string()))
        })
    };
    let monitor = {
        let shared = shared.clone();
        runtime.spawn(async move {
            let mut tick = tokio::time::interval(shared.config.heartbeat_interval);
            loop {
                tick.tick().await;
                let lost = {
                    let mut state = shared.lock();
                    let before = state.registry.sessions().count();
                    state.check_heartbeats(std::time::Instant::now(), &shared.config);
                    state.registry.sessions().count() != before
                };
                if lost {
                    shared.changed.notify_all();
                }
            }
        })
    };
    (server, monitor)
}

/// What a JobManager's control plane handled while serving without a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlPlaneStats {
    /// The most TaskManagers registered at once.
    pub registered: usize,
    /// Messages received from them.
    pub messages: u64,
    /// Of which stale (task reports with no run to go to).
    pub stale: u64,
}

/// Serves TaskManager sessions without a job for `duration`: the control-plane simulation
/// of `weir-cluster-bench`. Registrations and heartbeats are handled as for a job (and the
/// JobManager's heartbeats sent); task reports, with no run to go to, are decoded, counted
/// and dropped.
pub fn serve_without_job(
    config: &ClusterConfig,
    fingerprint: u64,
    duration: Duration,
) -> Result<ControlPlaneStats, ClusterError> {
    let (runtime, listener) = rpc_endpoint(config)?;
    let shared = Shared::new(
        config.clone(),
        fingerprint,
        "control-plane simulation".into(),
    );
    shared.lock().epoch = 1;
    let (server, monitor) = serve(&runtime, listener, &shared);
    let end = std::time::Instant::now() + duration;
    let mut registered = 0;
    while std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
        registered = registered.max(shared.lock().registry.sessions().count());
    }
    let stats = {
        let state = shared.lock();
        ControlPlaneStats {
            registered,
            messages: state.messages,
            stale: state.stale_messages,
        }
    };
    monitor.abort();
    server.abort();
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(stats)
}

/// A job status as the control plane spells it.
pub fn status_name(status: JobStatus) -> &'static str {
    match status {
        JobStatus::Finished => "FINISHED",
        JobStatus::Stopped => "STOPPED",
        JobStatus::Cancelled => "CANCELLED",
    }
}
