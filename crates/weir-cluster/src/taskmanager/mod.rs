//! The TaskManager process: registers with the JobManager, offers its slots, runs the parts
//! of each run the JobManager deploys here, and reconnects by itself when the JobManager is
//! lost or restarted.

mod run;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use weir::checkpoint::config::CheckpointStorageConfig;
use weir::checkpoint::storage::{create_storage, CheckpointStorage};
use weir::graph::ids::NodeId;
use weir::metrics::MetricRegistry;
use weir::runtime::job_definition::JobDefinition;
use weir::runtime::network::environment::{NetworkConfig, NetworkEnvironment};
use weir::runtime::network::frame::RunId;
use weir::runtime::source_task::ReaderMessage;
use weir::runtime::task::TaskControl;
use weir::{JobExecutionResult, JobStatus, WeirError};

use crate::config::ClusterConfig;
use crate::convert::{decode, encode, run_of};
use crate::error::ClusterError;
use crate::proto;
use crate::proto::job_manager_message::Body as In;
use crate::proto::job_manager_service_client::JobManagerServiceClient;
use crate::proto::task_manager_message::Body as Out;
use run::{DeployContext, FailureKind, TaskManagerRun};

/// How a session with the JobManager ended.
enum SessionEnd {
    /// The job ended: its status and error.
    JobEnded(String, String),
    /// The JobManager refused this TaskManager.
    Refused(String),
    /// The session was lost (the JobManager died, the network broke, heartbeats stopped).
    Lost(String),
}

/// What the TaskManager process keeps across sessions.
struct TaskManager {
    config: ClusterConfig,
    /// Behind a lock: the job's factories are `Send` but not `Sync`, and deployments run on a
    /// blocking thread, one at a time.
    job: Arc<std::sync::Mutex<JobDefinition>>,
    fingerprint: u64,
    network: Arc<NetworkEnvironment>,
    storage: Option<Arc<dyn CheckpointStorage>>,
    data_address: SocketAddr,
    /// The newest JobManager epoch seen: messages from older ones are stale.
    epoch: u64,
    run: Option<TaskManagerRun>,
    /// The metrics of the tasks here, sent to the JobManager with each heartbeat.
    metrics: Arc<MetricRegistry>,
}

/// Runs as a TaskManager of `job`'s cluster until the JobManager says the job ended;
/// returns the job's status as the JobManager reported it.
pub fn run_taskmanager(
    config: &ClusterConfig,
    job: JobDefinition,
) -> Result<JobExecutionResult, ClusterError> {
    let started = Instant::now();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("taskmanager-rpc")
        .enable_all()
        .build()
        .map_err(|e| ClusterError::Internal(format!("cannot start the RPC runtime: {e}")))?;
    let network = NetworkEnvironment::bind(
        config.taskmanager_id.clone(),
        config.data_bind,
        job.fingerprint(),
        NetworkConfig::default(),
    )?;
    let bound = network.address();
    let data_address = advertised_data_address(config, bound)?;
    let storage = match &job.config.checkpoint.storage {
        CheckpointStorageConfig::Memory => None,
        storage => Some(
            create_storage(
                storage,
                job.config.checkpoint.local_recovery.as_deref(),
                &job.plan.stream_graph.job_name,
            )
            .map_err(|e| ClusterError::Weir(WeirError::from(e)))?,
        ),
    };
    let job_name = job.plan.stream_graph.job_name.clone();
    let mut taskmanager = TaskManager {
        config: config.clone(),
        fingerprint: job.fingerprint(),
        job: Arc::new(std::sync::Mutex::new(job)),
        network: Arc::new(network),
        storage,
        data_address,
        epoch: 0,
        run: None,
        metrics: Arc::new(MetricRegistry::new()),
    };
    tracing::info!(id = %config.taskmanager_id, data = %data_address, jobmanager = %config.jobmanager_address, "TaskManager starting");
    let (status, error) = runtime.block_on(taskmanager.serve())?;
    if let Some(run) = taskmanager.run.take() {
        run.cancel("the job ended");
    }
    let status = match status.as_str() {
        "FINISHED" => JobStatus::Finished,
        "STOPPED" => JobStatus::Stopped,
        "CANCELLED" => JobStatus::Cancelled,
        _ => {
            return Err(ClusterError::Weir(WeirError::InvalidRequest(format!(
                "the job failed (as reported by the JobManager): {error}"
            ))))
        }
    };
    Ok(JobExecutionResult {
        job_name,
        status,
        wall_time: started.elapsed(),
        operators: Vec::new(),
        subtasks: Vec::new(),
        restarts: 0,
        // Where the job started is the JobManager's to say.
        start: None,
        recovery_notes: Vec::new(),
        restored_from: Vec::new(),
        checkpoints: Default::default(),
        savepoint: None,
    })
}

/// The address peers dial for this TaskManager's data: `--advertised-host` (a host, with the
/// bound port, or a host:port, e.g. of a proxy or a NAT), else the bound address.
fn advertised_data_address(
    config: &ClusterConfig,
    bound: SocketAddr,
) -> Result<SocketAddr, ClusterError> {
    let invalid = |value: &str, reason: String| ClusterError::InvalidSetting {
        setting: "--advertised-host / WEIR_ADVERTISED_HOST",
        value: value.to_string(),
        reason,
    };
    match &config.advertised_host {
        Some(host) => {
            let with_port = if host.contains(':') && !host.starts_with('[') && host.parse::<std::net::IpAddr>().is_err() {
                host.clone()
            } else {
                format!("{host}:{}", bound.port())
            };
            std::net::ToSocketAddrs::to_socket_addrs(&with_port)
                .ok()
                .and_then(|mut a| a.next())
                .ok_or_else(|| invalid(host, "does not resolve to an address".into()))
        }
        None if bound.ip().is_unspecified() => Err(invalid(
            "",
            format!("the data port is bound to {bound}, which peers cannot dial: name the host they should use"),
        )),
        None => Ok(bound),
    }
}

impl TaskManager {
    /// Keeps a session with the JobManager, reconnecting when it is lost, until the job
    /// ends; fails if the JobManager refuses this TaskManager or stays unreachable for the
    /// registration timeout.
    async fn serve(&mut self) -> Result<(String, String), ClusterError> {
        let mut unreachable_since = Instant::now();
        // Retries start fast (a JobManager starting beside) and slow down to half a second.
        let mut retry = Duration::from_millis(25);
        loop {
            let end = self.session(&mut unreachable_since).await;
            // Whatever ended the session, the run's tasks cannot report any more.
            if let Some(run) = self.run.take() {
                run.cancel("the session with the JobManager ended");
            }
            match end {
                SessionEnd::JobEnded(status, error) => return Ok((status, error)),
                SessionEnd::Refused(reason) => {
                    return Err(ClusterError::Refused {
                        address: self.config.jobmanager_address.clone(),
                        reason,
                    })
                }
                SessionEnd::Lost(reason) => {
                    if unreachable_since.elapsed() > self.config.registration_timeout {
                        return Err(ClusterError::Unreachable {
                            address: self.config.jobmanager_address.clone(),
                            timeout: self.config.registration_timeout,
                            reason,
                        });
                    }
                    tracing::info!(%reason, "no session with the JobManager; reconnecting");
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(Duration::from_millis(500));
                }
            }
        }
    }

    /// One session: registration, then messages until it ends. `unreachable_since` is reset
    /// once registered.
    async fn session(&mut self, unreachable_since: &mut Instant) -> SessionEnd {
        let scheme = if self.config.internal_tls.is_some() {
            "https"
        } else {
            "http"
        };
        let endpoint = format!("{scheme}://{}", self.config.jobmanager_address);
        let mut channel = match tonic::transport::Endpoint::from_shared(endpoint.clone()) {
            Ok(e) => e.connect_timeout(Duration::from_secs(2)),
            Err(e) => {
                return SessionEnd::Refused(format!("bad JobManager address `{endpoint}`: {e}"))
            }
        };
        if let Some(tls) = &self.config.internal_tls {
            let host = self
                .config
                .jobmanager_address
                .rsplit_once(':')
                .map_or(self.config.jobmanager_address.as_str(), |(host, _)| host)
                .trim_matches(['[', ']']);
            channel = match channel.tls_config(tls.client(host)) {
                Ok(channel) => channel,
                Err(e) => {
                    return SessionEnd::Refused(format!(
                        "internal TLS (`security.ssl.internal.*`): {}",
                        crate::error::chain(&e)
                    ))
                }
            };
        }
        let channel = match channel.connect().await {
            Ok(channel) => channel,
            Err(e) => {
                return SessionEnd::Lost(format!("cannot connect: {}", crate::error::chain(&e)))
            }
        };
        let mut client = JobManagerServiceClient::new(channel);
        let (tx, rx) = mpsc::unbounded_channel();
        let register = proto::TaskManagerMessage {
            epoch: 0,
            body: Some(Out::Register(proto::Register {
                taskmanager_id: self.config.taskmanager_id.clone(),
                job_fingerprint: self.fingerprint,
                slots: self.config.slots,
                data_address: self.data_address.to_string(),
            })),
        };
        let _ = tx.send(register);
        let mut inbound = match client.session(UnboundedReceiverStream::new(rx)).await {
            Ok(response) => response.into_inner(),
            Err(status) => {
                return SessionEnd::Lost(format!("cannot open a session: {}", status.message()))
            }
        };
        let (heartbeat_interval, heartbeat_timeout) = match inbound.message().await {
            Ok(Some(proto::JobManagerMessage {
                body: Some(In::Registered(registered)),
                epoch,
            })) => {
                // A JobManager older than one already seen (a stale one behind the same
                // address) is not followed: its successor will answer.
                if epoch != 0 && epoch < self.epoch {
                    return SessionEnd::Lost(format!(
                        "the JobManager answering has epoch {epoch}, older than {} already seen",
                        self.epoch
                    ));
                }
                self.epoch = self.epoch.max(epoch);
                (
                    Duration::from_millis(registered.heartbeat_interval_millis.max(1)),
                    Duration::from_millis(registered.heartbeat_timeout_millis.max(1)),
                )
            }
            Ok(Some(proto::JobManagerMessage {
                body: Some(In::Refused(refused)),
                ..
            })) => return SessionEnd::Refused(refused.reason),
            Ok(_) => return SessionEnd::Lost("the JobManager closed the session at once".into()),
            Err(status) => {
                return SessionEnd::Lost(format!("registration failed: {}", status.message()))
            }
        };
        tracing::info!(jobmanager = %self.config.jobmanager_address, epoch = self.epoch, "registered with the JobManager");
        *unreachable_since = Instant::now();
        let heartbeats = {
            let tx = tx.clone();
            let interval = heartbeat_interval;
            let epoch = self.epoch;
            let metrics = self.metrics.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(interval);
                loop {
                    tick.tick().await;
                    let beat = proto::TaskManagerMessage {
                        epoch,
                        body: Some(Out::Heartbeat(proto::Heartbeat {
                            sent_at_millis: weir::runtime::snapshot::now_millis(),
                        })),
                    };
                    if tx.send(beat).is_err() {
                        return;
                    }
                    let samples = metrics.sample();
                    if samples.is_empty() {
                        continue;
                    }
                    let Ok(samples) = encode("metrics", &samples) else {
                        continue;
                    };
                    let report = proto::TaskManagerMessage {
                        epoch,
                        body: Some(Out::Metrics(proto::Metrics { samples })),
                    };
                    if tx.send(report).is_err() {
                        return;
                    }
                }
            })
        };
        let end = loop {
            let next = tokio::time::timeout(heartbeat_timeout, inbound.message()).await;
            let message = match next {
                Err(_) => {
                    break SessionEnd::Lost(format!(
                        "no message from the JobManager for {} ms",
                        heartbeat_timeout.as_millis()
                    ))
                }
                Ok(Err(status)) => {
                    break SessionEnd::Lost(format!("the session broke: {}", status.message()))
                }
                Ok(Ok(None)) => break SessionEnd::Lost("the JobManager ended the session".into()),
                Ok(Ok(Some(message))) => message,
            };
            if message.epoch < self.epoch {
                tracing::debug!(
                    epoch = message.epoch,
                    current = self.epoch,
                    "message of an older JobManager ignored"
                );
                continue;
            }
            self.epoch = message.epoch;
            if let Some(end) = self.on_message(message, &tx).await {
                break end;
            }
        };
        heartbeats.abort();
        end
    }

    /// Handles one message; `Some` ends the session.
    async fn on_message(
        &mut self,
        message: proto::JobManagerMessage,
        tx: &mpsc::UnboundedSender<proto::TaskManagerMessage>,
    ) -> Option<SessionEnd> {
        let body = message.body?;
        match body {
            In::Registered(_) | In::Heartbeat(_) => {}
            In::Refused(refused) => return Some(SessionEnd::Refused(refused.reason)),
            In::JobEnded(ended) => return Some(SessionEnd::JobEnded(ended.status, ended.error)),
            In::Deploy(deploy) => {
                if let Some(old) = self.run.take() {
                    old.cancel("a new run replaces it");
                }
                let run_id = deploy.run.map(RunId::from);
                let context = (
                    self.job.clone(),
                    self.network.clone(),
                    self.storage.clone(),
                    self.epoch,
                    tx.clone(),
                    self.metrics.clone(),
                );
                let outcome = tokio::task::spawn_blocking(move || {
                    let (job, network, storage, epoch, outbound, metrics) = context;
                    let job = job.lock().unwrap_or_else(|p| p.into_inner());
                    TaskManagerRun::deploy(
                        DeployContext {
                            job: &job,
                            network: &network,
                            storage: storage.as_ref(),
                            epoch,
                            outbound,
                            metrics: &metrics,
                        },
                        deploy,
                    )
                })
                .await
                .unwrap_or_else(|e| {
                    Err((format!("the deployment panicked: {e}"), FailureKind::Fatal))
                });
                let (error, kind) = match outcome {
                    Ok(run) => {
                        self.run = Some(run);
                        (String::new(), FailureKind::Retriable)
                    }
                    Err((error, kind)) => {
                        tracing::warn!(%error, ?kind, "deployment failed");
                        (error, kind)
                    }
                };
                let _ = tx.send(proto::TaskManagerMessage {
                    epoch: self.epoch,
                    body: Some(Out::Deployed(proto::Deployed {
                        run: run_id.map(Into::into),
                        error,
                        corrupt_state: kind == FailureKind::CorruptState,
                        fatal: kind == FailureKind::Fatal,
                    })),
                });
            }
            In::Cancel(cancel) => {
                let run = run_of(cancel.run, "cancel").ok();
                if self.run.as_ref().map(|r| r.run) == run {
                    if let Some(current) = self.run.take() {
                        current.cancel("the JobManager cancelled the run");
                    }
                }
            }
            In::Control(control) => {
                let run = run_of(control.run, "control").ok();
                match (
                    self.run.as_ref(),
                    decode::<TaskControl>("task control", &control.control),
                ) {
                    (Some(current), Ok(c)) if Some(current.run) == run => current.control(c),
                    (_, Err(e)) => tracing::warn!(error = %e, "undecodable task control"),
                    _ => {}
                }
            }
            In::ReaderMessage(m) => {
                let run = run_of(m.run, "reader message").ok();
                match (
                    self.run.as_ref(),
                    decode::<ReaderMessage>("reader message", &m.message),
                ) {
                    (Some(current), Ok(message)) if Some(current.run) == run => {
                        current.reader_message(NodeId(m.source_node), m.subtask, message)
                    }
                    (_, Err(e)) => tracing::warn!(error = %e, "undecodable reader message"),
                    _ => {}
                }
            }
        }
        None
    }
}
