//! How a process joins a cluster: its role, the JobManager's address, its slots and
//! timeouts — from command-line flags or environment variables (for containers).

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use weir::configuration::Configuration;

use crate::error::ClusterError;

/// The part a process plays in a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// Coordinates the job: schedules its tasks on the TaskManagers, runs the checkpoint
    /// coordinator and the sources' split enumerators, and restarts the job on failure.
    Jobmanager,
    /// Runs the tasks the JobManager assigns to its slots.
    Taskmanager,
}

/// The cluster-mode flags of a job binary; flatten them into its own command line
/// (`#[command(flatten)] cluster: ClusterArgs`). Without `--role`, the job runs in this
/// process (the local mini-cluster).
#[derive(Debug, Clone, clap::Args)]
pub struct ClusterArgs {
    /// Run this process as one role of a cluster: `jobmanager` or `taskmanager`. Without it,
    /// the job runs entirely in this process.
    #[arg(long, env = "WEIR_ROLE", value_enum)]
    pub role: Option<Role>,
    /// The JobManager's RPC address (host:port): where a JobManager listens, and where
    /// TaskManagers connect.
    #[arg(
        long = "jobmanager-address",
        env = "WEIR_JOBMANAGER_ADDRESS",
        default_value = "127.0.0.1:6123"
    )]
    pub jobmanager_address: String,
    /// Where a JobManager binds its RPC port, if not on the JobManager address (in a
    /// container: `0.0.0.0:6123`).
    #[arg(long = "rpc-bind-address", env = "WEIR_RPC_BIND_ADDRESS")]
    pub rpc_bind_address: Option<String>,
    /// A TaskManager's slots (Flink's `taskmanager.numberOfTaskSlots`): with slot sharing,
    /// one slot holds one subtask of every vertex.
    #[arg(long, env = "WEIR_SLOTS", default_value_t = 1)]
    pub slots: u32,
    /// A TaskManager's id; by default its host name and process id.
    #[arg(long = "taskmanager-id", env = "WEIR_TASKMANAGER_ID")]
    pub taskmanager_id: Option<String>,
    /// Where a TaskManager listens for data connections from its peers (port 0: any free one).
    #[arg(
        long = "data-bind-address",
        env = "WEIR_DATA_BIND_ADDRESS",
        default_value = "127.0.0.1:0"
    )]
    pub data_bind_address: String,
    /// The host (or host:port) peers dial for this TaskManager's data connections, if not the
    /// bound address (in a container: the pod's IP; behind a proxy: the proxy's address).
    #[arg(long = "advertised-host", env = "WEIR_ADVERTISED_HOST")]
    pub advertised_host: Option<String>,
    /// How often the JobManager and the TaskManagers send heartbeats, in milliseconds
    /// (Flink's `heartbeat.interval`).
    #[arg(
        long = "heartbeat-interval-ms",
        env = "WEIR_HEARTBEAT_INTERVAL_MS",
        default_value_t = 1_000
    )]
    pub heartbeat_interval_ms: u64,
    /// After how long without a heartbeat a peer counts as lost, in milliseconds (Flink's
    /// `heartbeat.timeout`).
    #[arg(
        long = "heartbeat-timeout-ms",
        env = "WEIR_HEARTBEAT_TIMEOUT_MS",
        default_value_t = 10_000
    )]
    pub heartbeat_timeout_ms: u64,
    /// How long the JobManager waits for enough slots before a run fails, in milliseconds
    /// (Flink's `slot.request.timeout`).
    #[arg(
        long = "slot-timeout-ms",
        env = "WEIR_SLOT_TIMEOUT_MS",
        default_value_t = 300_000
    )]
    pub slot_timeout_ms: u64,
    /// How long a run's deployment may take (a restore reads state) before it is failed and
    /// restarted, in milliseconds.
    #[arg(
        long = "deploy-timeout-ms",
        env = "WEIR_DEPLOY_TIMEOUT_MS",
        default_value_t = 600_000
    )]
    pub deploy_timeout_ms: u64,
    /// How long a TaskManager keeps trying to reach its JobManager, in milliseconds
    /// (Flink's `taskmanager.registration.timeout`).
    #[arg(
        long = "registration-timeout-ms",
        env = "WEIR_REGISTRATION_TIMEOUT_MS",
        default_value_t = 300_000
    )]
    pub registration_timeout_ms: u64,
    /// The configuration file (a `weir.yaml` with Flink's keys); by default
    /// `$WEIR_CONF_DIR/weir.yaml` or `./weir.yaml` if one exists.
    #[arg(long = "config", env = "WEIR_CONFIG_FILE", value_name = "FILE")]
    pub config_file: Option<std::path::PathBuf>,
    /// Sets a configuration key, over the file and the environment (Flink's `-D`):
    /// `-D execution.checkpointing.interval=10s`. Settings in `WEIR_DYNAMIC_PROPERTIES` (one
    /// per line: how `weir run` passes its own) apply before these.
    #[arg(short = 'D', value_name = "KEY=VALUE")]
    pub dynamic: Vec<String>,
}

impl Default for ClusterArgs {
    fn default() -> Self {
        Self {
            role: None,
            jobmanager_address: "127.0.0.1:6123".into(),
            rpc_bind_address: None,
            slots: 1,
            taskmanager_id: None,
            data_bind_address: "127.0.0.1:0".into(),
            advertised_host: None,
            heartbeat_interval_ms: 1_000,
            heartbeat_timeout_ms: 10_000,
            slot_timeout_ms: 300_000,
            deploy_timeout_ms: 600_000,
            registration_timeout_ms: 300_000,
            config_file: None,
            dynamic: Vec::new(),
        }
    }
}

/// Checked cluster settings of one process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// The role.
    pub role: Role,
    /// The JobManager's address as given (host:port), for errors and for connecting.
    pub jobmanager_address: String,
    /// Where the JobManager binds.
    pub rpc_bind: String,
    /// Slots of a TaskManager.
    pub slots: u32,
    /// The TaskManager's id.
    pub taskmanager_id: String,
    /// Where a TaskManager listens for data.
    pub data_bind: SocketAddr,
    /// The host advertised for data connections.
    pub advertised_host: Option<String>,
    /// Heartbeat interval.
    pub heartbeat_interval: Duration,
    /// Heartbeat timeout.
    pub heartbeat_timeout: Duration,
    /// Slot request timeout.
    pub slot_timeout: Duration,
    /// Deployment timeout.
    pub deploy_timeout: Duration,
    /// Registration timeout.
    pub registration_timeout: Duration,
    /// A JobManager's REST endpoint (`None`: none).
    pub rest: Option<weir_rest::RestConfig>,
    /// Mutual TLS between the JobManager and the TaskManagers (`None`: plaintext).
    pub internal_tls: Option<crate::tls::InternalTls>,
}

fn invalid(setting: &'static str, value: impl ToString, reason: impl Into<String>) -> ClusterError {
    ClusterError::InvalidSetting {
        setting,
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// Checks that `address` is host:port and resolves.
fn check_address(setting: &'static str, address: &str) -> Result<SocketAddr, ClusterError> {
    let mut resolved = address.to_socket_addrs().map_err(|e| {
        invalid(
            setting,
            address,
            format!("not a host:port that resolves ({e})"),
        )
    })?;
    resolved
        .next()
        .ok_or_else(|| invalid(setting, address, "resolves to no address"))
}

/// The environment variable with `-D` settings, one per line, that apply before the command
/// line's: how `weir run` hands a job binary its own `-D` settings, `--resume` and the REST
/// port it follows the job through, whatever `-D` flags the binary is given.
pub const DYNAMIC_PROPERTIES_ENV: &str = "WEIR_DYNAMIC_PROPERTIES";

impl ClusterArgs {
    /// The configuration of this process: the file, the environment's overrides, the
    /// settings in `WEIR_DYNAMIC_PROPERTIES`, then the `-D` arguments; checked (unknown
    /// keys, bad values).
    pub fn configuration(&self) -> Result<Configuration, ClusterError> {
        let mut configuration = Configuration::load(self.config_file.as_deref())?;
        let passed = std::env::var(DYNAMIC_PROPERTIES_ENV).unwrap_or_default();
        for assignment in passed.lines().filter(|l| !l.trim().is_empty()) {
            configuration.set_dynamic(assignment)?;
        }
        for assignment in &self.dynamic {
            configuration.set_dynamic(assignment)?;
        }
        configuration.validate()?;
        Ok(configuration)
    }

    /// The checked settings, or `None` without a role (run locally).
    pub fn config(&self) -> Result<Option<ClusterConfig>, ClusterError> {
        let Some(role) = self.role else {
            return Ok(None);
        };
        let timeout = |setting: &'static str, ms: u64| {
            if ms == 0 {
                Err(invalid(setting, ms, "must be at least 1 ms"))
            } else {
                Ok(Duration::from_millis(ms))
            }
        };
        let heartbeat_interval = timeout("--heartbeat-interval-ms", self.heartbeat_interval_ms)?;
        let heartbeat_timeout = timeout("--heartbeat-timeout-ms", self.heartbeat_timeout_ms)?;
        if heartbeat_timeout <= heartbeat_interval {
            return Err(invalid(
                "--heartbeat-timeout-ms",
                self.heartbeat_timeout_ms,
                format!(
                    "must be longer than the heartbeat interval ({} ms)",
                    self.heartbeat_interval_ms
                ),
            ));
        }
        if self.slots == 0 {
            return Err(invalid(
                "--slots / WEIR_SLOTS",
                self.slots,
                "a TaskManager needs at least one slot",
            ));
        }
        let rpc_bind = self
            .rpc_bind_address
            .clone()
            .unwrap_or_else(|| self.jobmanager_address.clone());
        if role == Role::Jobmanager {
            check_address("--rpc-bind-address / --jobmanager-address", &rpc_bind)?;
        } else if self
            .jobmanager_address
            .rsplit_once(':')
            .is_none_or(|(_, p)| p.parse::<u16>().is_err())
        {
            return Err(invalid(
                "--jobmanager-address / WEIR_JOBMANAGER_ADDRESS",
                &self.jobmanager_address,
                "expected host:port",
            ));
        }
        let data_bind = check_address(
            "--data-bind-address / WEIR_DATA_BIND_ADDRESS",
            &self.data_bind_address,
        )?;
        let taskmanager_id = match &self.taskmanager_id {
            Some(id) if id.trim().is_empty() => {
                return Err(invalid(
                    "--taskmanager-id / WEIR_TASKMANAGER_ID",
                    id,
                    "must not be empty",
                ))
            }
            Some(id) => id.clone(),
            None => format!("{}-{}", host_name(), std::process::id()),
        };
        Ok(Some(ClusterConfig {
            role,
            jobmanager_address: self.jobmanager_address.clone(),
            rpc_bind,
            slots: self.slots,
            taskmanager_id,
            data_bind,
            advertised_host: self.advertised_host.clone(),
            heartbeat_interval,
            heartbeat_timeout,
            slot_timeout: timeout("--slot-timeout-ms", self.slot_timeout_ms)?,
            deploy_timeout: timeout("--deploy-timeout-ms", self.deploy_timeout_ms)?,
            registration_timeout: timeout(
                "--registration-timeout-ms",
                self.registration_timeout_ms,
            )?,
            rest: None,
            internal_tls: None,
        }))
    }
}

/// This machine's host name, for default TaskManager ids.
fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "taskmanager".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        cluster: ClusterArgs,
    }

    fn parse(args: &[&str]) -> Result<Option<ClusterConfig>, ClusterError> {
        let cli = Cli::try_parse_from(std::iter::once("job").chain(args.iter().copied()))
            .map_err(|e| ClusterError::Internal(e.to_string()))?;
        cli.cluster.config()
    }

    #[test]
    fn without_a_role_the_job_runs_locally() {
        assert_eq!(parse(&[]).unwrap(), None);
    }

    #[test]
    fn a_taskmanager_gets_its_settings() {
        let config = parse(&[
            "--role",
            "taskmanager",
            "--jobmanager-address",
            "jm.example:7000",
            "--slots",
            "4",
            "--taskmanager-id",
            "tm-1",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(config.role, Role::Taskmanager);
        assert_eq!(config.slots, 4);
        assert_eq!(config.taskmanager_id, "tm-1");
        assert_eq!(config.jobmanager_address, "jm.example:7000");
    }

    #[test]
    fn bad_values_name_the_setting() {
        let err = parse(&["--role", "taskmanager", "--slots", "0"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--slots"), "{err}");
        let err = parse(&["--role", "taskmanager", "--jobmanager-address", "nowhere"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--jobmanager-address") && err.contains("host:port"),
            "{err}"
        );
        let err = parse(&[
            "--role",
            "jobmanager",
            "--jobmanager-address",
            "no such host:1",
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("--jobmanager-address"), "{err}");
        let err = parse(&[
            "--role",
            "taskmanager",
            "--heartbeat-interval-ms",
            "500",
            "--heartbeat-timeout-ms",
            "500",
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("--heartbeat-timeout-ms"), "{err}");
        let err = parse(&["--role", "accountant"]).unwrap_err().to_string();
        assert!(err.contains("accountant"), "{err}");
    }
}
