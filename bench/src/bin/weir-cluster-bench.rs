//! What cluster mode costs, measured on this machine:
//!
//! - `network`: a keyed aggregation (generated `(key, 1)` records, `key_by`, `sum`, discard)
//!   at parallelism 2 in one process, against the same job on a JobManager and two
//!   TaskManager processes with one slot each — so that half the records cross a TCP data
//!   connection between the TaskManagers. Wall time and the CPU time of every process;
//!   the difference per record is the network's cost.
//! - `checkpoints`: the same job with a large keyed state, checkpointing every 200 ms to
//!   the local filesystem against the S3-compatible server (`scripts/s3-server.sh`; its
//!   exports must be in the environment): checkpoint duration and size.
//!
//! `weir-cluster-bench job …` is the job itself, started by the others in every role.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use weir::prelude::*;

#[derive(Parser, Debug)]
#[command(about = "Cluster mode's costs: the network per record, checkpoints on object storage")]
struct Args {
    #[command(subcommand)]
    command: Option<Bench>,
}

#[derive(Subcommand, Debug)]
enum Bench {
    /// One process against a JobManager and two TaskManagers.
    Network {
        /// Records.
        #[arg(long, default_value_t = 20_000_000)]
        records: u64,
        /// Distinct keys.
        #[arg(long, default_value_t = 10_000)]
        keys: u64,
        /// Runs of each, the median is reported.
        #[arg(long, default_value_t = 3)]
        runs: usize,
    },
    /// Checkpoints to the filesystem against the S3-compatible server.
    Checkpoints {
        /// Records, read at 1 million per second.
        #[arg(long, default_value_t = 5_000_000)]
        records: u64,
        /// Distinct keys (the state's size).
        #[arg(long, default_value_t = 500_000)]
        keys: u64,
    },
    /// A simulation of the control plane: a JobManager serving N simulated TaskManagers
    /// (registration, heartbeats, checkpoint acknowledgements) over real gRPC sessions.
    ControlPlane {
        /// Simulated TaskManagers, comma-separated counts.
        #[arg(long, default_value = "10,100,300")]
        taskmanagers: String,
        /// Subtasks per TaskManager (each acknowledges every checkpoint).
        #[arg(long, default_value_t = 4)]
        subtasks: u32,
        /// Heartbeat interval, milliseconds.
        #[arg(long, default_value_t = 1000)]
        heartbeat_ms: u64,
        /// Checkpoint interval, milliseconds.
        #[arg(long, default_value_t = 1000)]
        checkpoint_ms: u64,
        /// Seconds each simulation runs.
        #[arg(long, default_value_t = 6)]
        seconds: u64,
    },
    /// The JobManager side of `control-plane` (started by it).
    ServeControlPlane {
        #[arg(long)]
        address: String,
        #[arg(long)]
        seconds: u64,
        #[arg(long)]
        heartbeat_ms: u64,
    },
    /// The job, in the role its cluster flags give.
    Job(Box<JobArgs>),
}

#[derive(clap::Args, Debug, Clone)]
struct JobArgs {
    #[arg(long)]
    records: u64,
    #[arg(long)]
    keys: u64,
    #[arg(long, default_value_t = 2)]
    parallelism: u32,
    /// Checkpoint every this many milliseconds (0: none).
    #[arg(long, default_value_t = 0)]
    checkpoint_interval_ms: u64,
    /// Checkpoint storage URL (`file:///dir`, `s3://…`).
    #[arg(long)]
    checkpoint_storage: Option<String>,
    /// Records per second (0: as fast as possible).
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    #[command(flatten)]
    cluster: weir_cluster::ClusterArgs,
}

fn run_job(args: &JobArgs) -> Result<()> {
    let mut config = ExecutionConfig::default().with_parallelism(args.parallelism);
    if args.checkpoint_interval_ms > 0 {
        let storage = args
            .checkpoint_storage
            .as_deref()
            .context("--checkpoint-storage")?;
        config = config.with_checkpointing(
            CheckpointConfig::default()
                .with_interval(Duration::from_millis(args.checkpoint_interval_ms))
                .with_storage(CheckpointStorageConfig::from_url(storage)),
        );
    }
    let env = StreamExecutionEnvironment::new(config)?;
    weir_cluster::apply(&args.cluster, &env)?;
    let keys = args.keys;
    let mut source = GeneratorSource::new(args.records, move |i| (i % keys, 1u64));
    if args.rate > 0.0 {
        source = source.with_rate_limit(args.rate);
    }
    env.from_source(source, WatermarkStrategy::no_watermarks(), "records")
        .key_by(|r: &(u64, u64)| r.0)
        .reduce(|a: (u64, u64), b: (u64, u64)| (a.0, a.1 + b.1))
        .name("sum")
        .sink_to(DiscardingSink, "discard");
    let result = env.execute("cluster-bench")?;
    let completed = result.checkpoints.completed;
    let mean_ms = if completed > 0 {
        result.checkpoints.completed_duration_total.as_secs_f64() * 1e3 / completed as f64
    } else {
        0.0
    };
    let sizes: Vec<u64> = result
        .checkpoints
        .recent
        .iter()
        .filter(|c| c.status == weir::checkpoint::stats::CheckpointStatus::Completed)
        .map(|c| c.state_size)
        .collect();
    let max_ms = result
        .checkpoints
        .recent
        .iter()
        .filter_map(|c| c.duration)
        .map(|d| d.as_secs_f64() * 1e3)
        .fold(0.0, f64::max);
    // One line the orchestrator reads.
    println!(
        "RESULT records={} wall_ms={:.1} checkpoints={completed} mean_checkpoint_ms={mean_ms:.1} max_checkpoint_ms={max_ms:.1} state_bytes={}",
        result.operator("records").map_or(0, |o| o.records_out),
        result.wall_time.as_secs_f64() * 1e3,
        sizes.last().copied().unwrap_or(0)
    );
    Ok(())
}

/// CPU seconds (user + system) of a finished child, from wait4.
fn wait_cpu(child: &mut std::process::Child) -> Result<(std::process::ExitStatus, f64)> {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: wait4 writes only the status and rusage it is given; both are valid.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; the pid is our child's, not yet reaped.
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    if reaped != pid {
        bail!("wait4 on {pid} failed");
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    use std::os::unix::process::ExitStatusExt;
    Ok((
        std::process::ExitStatus::from_raw(status),
        seconds(usage.ru_utime) + seconds(usage.ru_stime),
    ))
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn job_command(job: &[String]) -> Result<Command> {
    let mut command = Command::new(std::env::current_exe()?);
    command
        .arg("job")
        .args(job)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    Ok(command)
}

fn result_field(out: &str, field: &str) -> Option<f64> {
    out.lines()
        .find(|l| l.starts_with("RESULT"))?
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{field}=")))?
        .parse()
        .ok()
}

/// One process: (wall seconds, CPU seconds).
fn one_process(job: &[String]) -> Result<(f64, f64)> {
    let started = Instant::now();
    let mut child = job_command(job)?.stdout(Stdio::piped()).spawn()?;
    let mut out = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().context("stdout")?, &mut out)?;
    let (status, cpu) = wait_cpu(&mut child)?;
    if !status.success() {
        bail!("the one-process run failed: {status}");
    }
    let wall = result_field(&out, "wall_ms").map_or(started.elapsed().as_secs_f64(), |ms| ms / 1e3);
    Ok((wall, cpu))
}

/// A JobManager and two TaskManagers: (wall seconds of the job, CPU seconds of all three).
fn cluster(job: &[String]) -> Result<(f64, f64)> {
    let address = format!("127.0.0.1:{}", free_port()?);
    let role = |role: &str, extra: &[&str]| -> Result<Command> {
        let mut command = job_command(job)?;
        command
            .args(["--role", role, "--jobmanager-address", &address])
            .args(extra);
        Ok(command)
    };
    let mut jobmanager = role("jobmanager", &[])?.stdout(Stdio::piped()).spawn()?;
    let mut taskmanagers = Vec::new();
    for id in ["tm-1", "tm-2"] {
        taskmanagers.push(
            role("taskmanager", &["--taskmanager-id", id, "--slots", "1"])?
                .stdout(Stdio::null())
                .spawn()?,
        );
    }
    let mut out = String::new();
    std::io::Read::read_to_string(jobmanager.stdout.as_mut().context("stdout")?, &mut out)?;
    let (status, mut cpu) = wait_cpu(&mut jobmanager)?;
    for tm in &mut taskmanagers {
        cpu += wait_cpu(tm)?.1;
    }
    if !status.success() {
        bail!("the cluster run failed: {status}");
    }
    let wall = result_field(&out, "wall_ms").context("no result line from the JobManager")? / 1e3;
    Ok((wall, cpu))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn network(records: u64, keys: u64, runs: usize) -> Result<()> {
    let job: Vec<String> = [
        "--records",
        &records.to_string(),
        "--keys",
        &keys.to_string(),
        "--parallelism",
        "2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    println!(
        "keyed aggregation, {records} records, {keys} keys, parallelism 2, median of {runs} runs"
    );
    println!(
        "{:<34} {:>10} {:>14} {:>16}",
        "deployment", "wall s", "records/s", "CPU µs/record"
    );
    let mut rows = Vec::new();
    for (name, cluster_mode) in [
        ("one process", false),
        ("JobManager + 2 TaskManagers", true),
    ] {
        let mut walls = Vec::new();
        let mut cpus = Vec::new();
        for _ in 0..runs {
            let (wall, cpu) = if cluster_mode {
                cluster(&job)?
            } else {
                one_process(&job)?
            };
            walls.push(wall);
            cpus.push(cpu);
        }
        let (wall, cpu) = (median(walls), median(cpus));
        let per_record = cpu * 1e6 / records as f64;
        println!(
            "{name:<34} {wall:>10.2} {:>14.0} {per_record:>16.3}",
            records as f64 / wall
        );
        rows.push(per_record);
    }
    println!(
        "network cost: {:.3} CPU µs per record ({:.3} per record that crosses a TaskManager boundary, half of them)",
        rows[1] - rows[0],
        (rows[1] - rows[0]) * 2.0
    );
    Ok(())
}

fn checkpoints(records: u64, keys: u64) -> Result<()> {
    let s3 = std::env::var("WEIR_S3_URL").context(
        "WEIR_S3_URL is not set: start the S3-compatible server with `eval $(scripts/s3-server.sh start)`",
    )?;
    let dir = tempfile_dir()?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos();
    let targets = [
        ("local filesystem", format!("file://{}", dir.display())),
        ("S3-compatible server", format!("{s3}/bench-{nanos}")),
    ];
    println!("keyed state of {keys} keys, {records} records at 1 M/s, parallelism 2, a checkpoint every 200 ms");
    println!(
        "{:<24} {:>12} {:>14} {:>14} {:>14}",
        "storage", "checkpoints", "mean ms", "max ms", "state bytes"
    );
    for (name, url) in targets {
        let job: Vec<String> = [
            "--records",
            &records.to_string(),
            "--keys",
            &keys.to_string(),
            "--parallelism",
            "2",
            "--checkpoint-interval-ms",
            "200",
            "--checkpoint-storage",
            &url,
            "--rate",
            "1000000",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let output = job_command(&job)?.output()?;
        if !output.status.success() {
            bail!(
                "the {name} run failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let out = String::from_utf8_lossy(&output.stdout);
        let field = |f| result_field(&out, f).unwrap_or(f64::NAN);
        println!(
            "{name:<24} {:>12} {:>14.1} {:>14.1} {:>14}",
            field("checkpoints"),
            field("mean_checkpoint_ms"),
            field("max_checkpoint_ms"),
            field("state_bytes")
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn tempfile_dir() -> Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("weir-cluster-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn main() -> std::process::ExitCode {
    weir::cli::exit_code(real_main())
}

fn real_main() -> Result<()> {
    let args = Args::parse();
    match args.command.unwrap_or(Bench::Network {
        records: 20_000_000,
        keys: 10_000,
        runs: 3,
    }) {
        Bench::Network {
            records,
            keys,
            runs,
        } => network(records, keys, runs),
        Bench::Checkpoints { records, keys } => checkpoints(records, keys),
        Bench::Job(job) => run_job(&job),
        Bench::ControlPlane {
            taskmanagers,
            subtasks,
            heartbeat_ms,
            checkpoint_ms,
            seconds,
        } => control_plane::simulate(
            &taskmanagers,
            subtasks,
            heartbeat_ms,
            checkpoint_ms,
            seconds,
        ),
        Bench::ServeControlPlane {
            address,
            seconds,
            heartbeat_ms,
        } => control_plane::serve(&address, seconds, heartbeat_ms),
    }
}

mod control_plane {
    //! The control-plane simulation: real gRPC sessions, simulated TaskManagers.

    use std::process::Stdio;
    use std::time::{Duration, Instant};

    use anyhow::{bail, Context, Result};
    use tokio_stream::wrappers::UnboundedReceiverStream;
    use weir_cluster::proto;
    use weir_cluster::proto::job_manager_service_client::JobManagerServiceClient;
    use weir_cluster::proto::task_manager_message::Body;

    /// The fingerprint both sides of the simulation use.
    const FINGERPRINT: u64 = 0x5157_3EED;

    pub fn serve(address: &str, seconds: u64, heartbeat_ms: u64) -> Result<()> {
        let args = weir_cluster::ClusterArgs {
            role: Some(weir_cluster::Role::Jobmanager),
            jobmanager_address: address.to_string(),
            heartbeat_interval_ms: heartbeat_ms,
            heartbeat_timeout_ms: heartbeat_ms * 10,
            ..weir_cluster::ClusterArgs::default()
        };
        let config = args.config()?.context("no role")?;
        let stats = weir_cluster::jobmanager::serve_without_job(
            &config,
            FINGERPRINT,
            Duration::from_secs(seconds),
        )?;
        println!(
            "STATS registered={} messages={} stale={}",
            stats.registered, stats.messages, stats.stale
        );
        Ok(())
    }

    /// One simulated TaskManager until `end`: registers, heartbeats, and acknowledges every
    /// checkpoint for each of its subtasks. Returns the messages it sent.
    async fn taskmanager(
        address: String,
        id: usize,
        subtasks: u32,
        heartbeat: Duration,
        checkpoint: Duration,
        end: Instant,
    ) -> Result<u64> {
        let mut client = JobManagerServiceClient::connect(format!("http://{address}")).await?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tx.send(proto::TaskManagerMessage {
            epoch: 0,
            body: Some(Body::Register(proto::Register {
                taskmanager_id: format!("sim-{id}"),
                job_fingerprint: FINGERPRINT,
                slots: subtasks,
                data_address: "127.0.0.1:9".into(),
            })),
        })?;
        let mut inbound = client
            .session(UnboundedReceiverStream::new(rx))
            .await?
            .into_inner();
        tokio::spawn(async move { while let Ok(Some(_)) = inbound.message().await {} });
        let mut sent = 1u64;
        let mut beat = tokio::time::interval(heartbeat);
        let mut acks = tokio::time::interval(checkpoint);
        let ack = vec![7u8; 200];
        let mut checkpoint_id = 0;
        while Instant::now() < end {
            tokio::select! {
                _ = beat.tick() => {
                    tx.send(proto::TaskManagerMessage { epoch: 1, body: Some(Body::Heartbeat(proto::Heartbeat { sent_at_millis: 0 })) })?;
                    sent += 1;
                }
                _ = acks.tick() => {
                    checkpoint_id += 1;
                    for subtask in 0..subtasks {
                        tx.send(proto::TaskManagerMessage {
                            epoch: 1,
                            body: Some(Body::TaskEvent(proto::TaskEvent {
                                run: Some(proto::RunId { epoch: 1, attempt: 1 }),
                                task: Some(proto::Subtask { vertex: id as u32, index: subtask }),
                                kind: Some(proto::task_event::Kind::Acknowledge(proto::Acknowledge {
                                    checkpoint_id,
                                    ack: ack.clone(),
                                })),
                            })),
                        })?;
                        sent += 1;
                    }
                }
                _ = tokio::time::sleep_until(end.into()) => {}
            }
        }
        Ok(sent)
    }

    pub fn simulate(
        counts: &str,
        subtasks: u32,
        heartbeat_ms: u64,
        checkpoint_ms: u64,
        seconds: u64,
    ) -> Result<()> {
        println!("control plane: simulated TaskManagers with {subtasks} subtasks each, heartbeats every {heartbeat_ms} ms, a checkpoint every {checkpoint_ms} ms, {seconds} s each");
        println!(
            "{:>14} {:>12} {:>14} {:>16} {:>18} {:>14}",
            "TaskManagers",
            "registered",
            "messages/s",
            "JM CPU ms/s",
            "JM CPU µs/message",
            "data conns"
        );
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        for count in counts.split(',') {
            let count: usize = count.trim().parse().context("--taskmanagers")?;
            let port = super::free_port()?;
            let address = format!("127.0.0.1:{port}");
            let mut server = std::process::Command::new(std::env::current_exe()?)
                .args([
                    "serve-control-plane",
                    "--address",
                    &address,
                    "--seconds",
                    &(seconds + 2).to_string(),
                    "--heartbeat-ms",
                    &heartbeat_ms.to_string(),
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()?;
            std::thread::sleep(Duration::from_millis(500));
            let end = Instant::now() + Duration::from_secs(seconds);
            let sent: u64 = runtime.block_on(async {
                let mut handles = Vec::new();
                for id in 0..count {
                    handles.push(tokio::spawn(taskmanager(
                        address.clone(),
                        id,
                        subtasks,
                        Duration::from_millis(heartbeat_ms),
                        Duration::from_millis(checkpoint_ms),
                        end,
                    )));
                }
                let mut sent = 0;
                for h in handles {
                    sent += h.await??;
                }
                Ok::<u64, anyhow::Error>(sent)
            })?;
            let mut out = String::new();
            std::io::Read::read_to_string(server.stdout.as_mut().context("stdout")?, &mut out)?;
            let (status, cpu) = super::wait_cpu(&mut server)?;
            if !status.success() {
                bail!("the simulated JobManager failed: {status}");
            }
            let field = |f: &str| -> u64 {
                out.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(&format!("{f}=")))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0)
            };
            let messages = field("messages");
            println!(
                "{count:>14} {:>12} {:>14.0} {:>16.1} {:>18.2} {:>14}",
                field("registered"),
                messages as f64 / seconds as f64,
                cpu * 1e3 / (seconds + 2) as f64,
                cpu * 1e6 / messages.max(1) as f64,
                count * (count - 1) / 2,
            );
            let _ = sent;
        }
        Ok(())
    }
}
