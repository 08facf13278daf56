//! The JobManager's client calls over gRPC — job status, savepoints, stop-with-savepoint and
//! cancellation — against a running job on a JobManager and two TaskManagers, each in a
//! thread of this test process (their own runtimes and sockets, as separate processes have).

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use weir::prelude::*;
use weir_cluster::proto;
use weir_cluster::proto::job_manager_service_client::JobManagerServiceClient;
use weir_cluster::{ClusterArgs, Role};

fn free_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("127.0.0.1:{}", listener.local_addr().unwrap().port())
}

/// Starts one process's part of the job (built in its thread, as each process builds it).
fn start(
    role: Role,
    address: &str,
    id: &str,
    checkpoints: &std::path::Path,
) -> JoinHandle<Result<JobExecutionResult, WeirError>> {
    let args = ClusterArgs {
        role: Some(role),
        jobmanager_address: address.to_string(),
        taskmanager_id: Some(id.to_string()),
        heartbeat_interval_ms: 200,
        // Heartbeat loss is not what these tests are about: a busy machine that stalls a
        // thread for seconds must not fail the job over under them.
        heartbeat_timeout_ms: 60_000,
        // Any free port for the JobManager's REST API: tests run side by side, and Flink's
        // 8081 would let only one of them start.
        dynamic: vec!["rest.port=0".into()],
        ..ClusterArgs::default()
    };
    let checkpoints = checkpoints.to_path_buf();
    std::thread::spawn(move || {
        let env = StreamExecutionEnvironment::new(
            ExecutionConfig::default()
                .with_parallelism(2)
                .with_checkpointing(
                    CheckpointConfig::default()
                        .with_interval(Duration::from_millis(100))
                        .with_storage(CheckpointStorageConfig::directory(&checkpoints)),
                ),
        )?;
        weir_cluster::apply(&args, &env).map_err(WeirError::from)?;
        env.from_source(
            GeneratorSource::unbounded(|i| i % 100).with_rate_limit(20_000.0),
            WatermarkStrategy::no_watermarks(),
            "numbers",
        )
        .key_by(|k: &u64| *k)
        .count()
        .uid("counts")
        .sink_to(DiscardingSink, "discard");
        env.execute("rpc")
    })
}

struct Cluster {
    address: String,
    jobmanager: JoinHandle<Result<JobExecutionResult, WeirError>>,
    taskmanagers: Vec<JoinHandle<Result<JobExecutionResult, WeirError>>>,
    runtime: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
}

fn cluster() -> Cluster {
    // RUST_LOG=weir=info shows what the processes do.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let dir = tempfile::tempdir().unwrap();
    let address = free_address();
    let jobmanager = start(Role::Jobmanager, &address, "jm", dir.path());
    let taskmanagers = ["tm-1", "tm-2"]
        .iter()
        .map(|id| start(Role::Taskmanager, &address, id, dir.path()))
        .collect();
    Cluster {
        address,
        jobmanager,
        taskmanagers,
        runtime: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
        _dir: dir,
    }
}

impl Cluster {
    fn client(&self) -> JobManagerServiceClient<tonic::transport::Channel> {
        // Deadlines here only catch a hang.
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            match self
                .runtime
                .block_on(JobManagerServiceClient::connect(format!(
                    "http://{}",
                    self.address
                ))) {
                Ok(client) => return client,
                Err(e) if Instant::now() > deadline => panic!("no JobManager: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Waits until the job runs with its first checkpoint completed.
    fn await_running(
        &self,
        client: &mut JobManagerServiceClient<tonic::transport::Channel>,
    ) -> proto::JobStatusResponse {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let status = self
                .runtime
                .block_on(client.get_job_status(proto::JobStatusRequest {}))
                .unwrap()
                .into_inner();
            if status.completed_checkpoints > 0 {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "no checkpoint completed: {status:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn finish(self) -> JobExecutionResult {
        let result = self.jobmanager.join().unwrap().unwrap();
        for tm in self.taskmanagers {
            tm.join().unwrap().unwrap();
        }
        result
    }
}

#[test]
fn status_savepoint_and_stop_over_grpc() {
    let cluster = cluster();
    let mut client = cluster.client();
    let status = cluster.await_running(&mut client);
    assert_eq!(status.job_name, "rpc");
    assert_eq!(status.status, "RUNNING");
    assert_eq!(status.registered_taskmanagers, 2);
    let mut taskmanagers = status.taskmanagers.clone();
    taskmanagers.sort();
    assert_eq!(taskmanagers, ["tm-1", "tm-2"]);
    assert!(status.epoch >= 1);
    let savepoint = cluster
        .runtime
        .block_on(client.trigger_savepoint(proto::SavepointRequest {}))
        .unwrap()
        .into_inner();
    assert!(savepoint.location.contains("savepoint-"), "{savepoint:?}");
    let stop = cluster
        .runtime
        .block_on(client.stop_with_savepoint(proto::StopRequest { drain: false }))
        .unwrap()
        .into_inner();
    assert!(stop.savepoint_id > savepoint.savepoint_id);
    let result = cluster.finish();
    assert_eq!(result.status, JobStatus::Stopped);
    assert_eq!(result.savepoint.unwrap().checkpoint_id(), stop.savepoint_id);
}

#[test]
fn cancel_over_grpc() {
    let cluster = cluster();
    let mut client = cluster.client();
    cluster.await_running(&mut client);
    cluster
        .runtime
        .block_on(client.cancel_job(proto::CancelRequest {}))
        .unwrap();
    let result = cluster.finish();
    assert_eq!(result.status, JobStatus::Cancelled);
}
