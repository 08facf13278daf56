//! # Weir
//!
//! A stream processor with Flink's model — a typed DataStream API, operator chaining,
//! parallel subtasks connected by bounded channels, keyed state partitioned into key groups —
//! built for exactly-once results end to end.
//!
//! A job passes through four layers: the **StreamGraph** (one node per API call), the
//! **JobGraph** (operators fused into chains), the **ExecutionGraph** (each chain expanded to
//! parallel subtasks, each edge to channels), and the running **tasks**. See
//! [`StreamExecutionEnvironment`] to start.

#![warn(missing_docs)]

pub mod api;
pub mod checkpoint;
pub mod config;
pub mod connectors;
pub mod error;
pub mod graph;
pub mod record;
pub mod runtime;
pub mod state;

pub use api::data_stream::{DataStream, DataStreamSink};
pub use api::environment::StreamExecutionEnvironment;
pub use api::functions::{
    FunctionStateContext, KeyedContext, KeyedProcessFunction, ProcessFunction, RuntimeContext,
};
pub use api::keyed_stream::KeyedStream;
pub use checkpoint::config::{
    CheckpointConfig, CheckpointStorageConfig, CheckpointingMode, RetentionOnCancel,
};
pub use checkpoint::fencing::{FencedError, FencingToken};
pub use checkpoint::recovery::{CorruptCheckpointPolicy, RecoveryError};
pub use checkpoint::restart_strategy::RestartStrategyConfig;
pub use config::ExecutionConfig;
pub use error::{BoxError, WeirError};
pub use graph::explain::ExecutionPlan;
pub use record::{Key, Record};
pub use runtime::job_result::{JobExecutionResult, JobStatus};
pub use runtime::mini_cluster::JobClient;
pub use runtime::output::Collector;
pub use state::{
    AggregateFunction, AggregatingState, ListState, MapState, ReducingState, ValueState,
};
