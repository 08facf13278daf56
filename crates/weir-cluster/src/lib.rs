//! Cluster mode: one job across processes and machines — a JobManager and TaskManagers —
//! exactly once when any of them dies.
//!
//! A Rust job is compiled code, so, as in Flink's application mode, the job's own binary is
//! started on every node. Each process builds the same job graph from the same code; a role
//! flag decides what it does with it:
//!
//! - `--role jobmanager`: runs the job's loop — scheduling, the checkpoint coordinator, the
//!   sources' split enumerators, failover — and serves the TaskManagers over gRPC;
//! - `--role taskmanager`: registers with the JobManager (`--jobmanager-address`), offers
//!   `--slots` slots and runs the subtasks deployed to it, exchanging records with its peers
//!   over TCP with credit-based flow control;
//! - no role: the whole job runs in this process, as before.
//!
//! A job binary opts in with one line:
//!
//! ```no_run
//! use clap::Parser;
//! use weir::prelude::*;
//!
//! #[derive(Parser)]
//! struct Args {
//!     #[command(flatten)]
//!     cluster: weir_cluster::ClusterArgs,
//! }
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let args = Args::parse();
//!     let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(3))?;
//!     weir_cluster::apply(&args.cluster, &env)?; // no-op without --role
//!     env.from_collection(vec![1u64, 2, 3]).sink_to(DiscardingSink, "discard");
//!     println!("{}", env.execute("job")?);
//!     Ok(())
//! }
//! ```
//!
//! - `config.rs`: the role flags;
//! - `proto`: the control plane's messages (`proto/weir_cluster.proto`);
//! - `jobmanager/`, `taskmanager/`: the two processes;
//! - `convert.rs`: engine types ↔ control messages.

pub mod config;
pub mod convert;
pub mod error;
pub mod jobmanager;
pub mod object_storage;
pub mod taskmanager;

pub mod proto {
    //! The generated control-plane messages and services.
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    tonic::include_proto!("weir.cluster.v1");
}

pub use config::{ClusterArgs, ClusterConfig, Role};
pub use error::ClusterError;

use weir::runtime::job_definition::JobDefinition;
use weir::runtime::mini_cluster::PipelineExecutor;
use weir::{JobExecutionResult, StreamExecutionEnvironment, WeirError};

/// Runs jobs in the role of a cluster process.
#[derive(Debug, Clone)]
pub struct ClusterExecutor {
    config: ClusterConfig,
}

impl ClusterExecutor {
    /// The executor of a process configured by `config`.
    pub fn new(config: ClusterConfig) -> Self {
        Self { config }
    }
}

impl PipelineExecutor for ClusterExecutor {
    fn execute(&self, job: JobDefinition) -> Result<JobExecutionResult, WeirError> {
        let result = match self.config.role {
            Role::Jobmanager => jobmanager::run_jobmanager(&self.config, job),
            Role::Taskmanager => taskmanager::run_taskmanager(&self.config, job),
        };
        result.map_err(WeirError::from)
    }
}

/// Makes `env` run its jobs in the role `args` give, if any; without a role it stays on
/// the local mini-cluster. Either way, checkpoint storage on object storage (`s3://`,
/// `gs://`, `az://`) becomes available.
pub fn apply(args: &ClusterArgs, env: &StreamExecutionEnvironment) -> Result<(), ClusterError> {
    object_storage::register();
    if let Some(config) = args.config()? {
        env.set_executor(ClusterExecutor::new(config));
    }
    Ok(())
}
