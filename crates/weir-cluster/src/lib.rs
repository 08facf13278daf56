#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

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

pub mod prelude {
    //! What a job binary needs for cluster mode, beside `weir::prelude::*`.
    pub use crate::{apply, ClusterArgs, ClusterError, ClusterExecutor, Role};
}
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
