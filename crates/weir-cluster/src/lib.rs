#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod chain_only_verifier;
pub mod config;
pub mod convert;
pub mod error;
pub mod jobmanager;
pub mod object_storage;
pub mod rest;
pub mod taskmanager;
pub mod tls;

pub mod proto {
    //! The generated control-plane messages and services.
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    tonic::include_proto!("weir.cluster.v1");
}

pub use config::{ClusterArgs, ClusterConfig, Role, DYNAMIC_PROPERTIES_ENV};

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

/// Prepares `env` as `args` say: applies the configuration (the `weir.yaml`, its
/// environment overrides and the `-D` arguments) over the job's settings, and makes the
/// process run its jobs in its role, if any. Without a role the job stays on the local
/// mini-cluster, with the REST endpoint and dashboard when `rest.port` is set; a
/// JobManager serves them always. Checkpoint storage on object storage (`s3://`, `gs://`,
/// `az://`) becomes available either way.
pub fn apply(args: &ClusterArgs, env: &StreamExecutionEnvironment) -> Result<(), ClusterError> {
    object_storage::register();
    let configuration = args.configuration()?;
    env.configure(&configuration)?;
    env.mark_launcher_settings_applied();
    match args.config()? {
        Some(mut config) => {
            config.internal_tls = tls::InternalTls::from_configuration(&configuration)?;
            if config.role == Role::Jobmanager {
                config.rest = weir_rest::RestConfig::from_configuration(&configuration, true)?;
            }
            env.set_executor(ClusterExecutor::new(config));
        }
        None => {
            if let Some(rest) = weir_rest::RestConfig::from_configuration(&configuration, false)? {
                env.set_executor(rest::LocalRestExecutor::new(rest));
            }
        }
    }
    Ok(())
}
