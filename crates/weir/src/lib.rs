#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod api;
pub mod checkpoint;
pub mod cli;
pub mod config;
pub mod configuration;
pub mod connectors;
pub mod error;
pub mod graph;
pub mod metrics;
pub mod prelude;
pub mod record;
pub mod runtime;
pub mod state;
pub mod time;
pub mod windowing;

pub use api::connected_streams::{ConnectedStreams, KeyedConnectedStreams};
pub use api::data_stream::{DataStream, DataStreamSink};
pub use api::environment::StreamExecutionEnvironment;
pub use api::functions::{
    AggregateFunction, CoProcessFunction, FunctionStateContext, KeyedCoProcessFunction,
    KeyedContext, KeyedEndContext, KeyedProcessFunction, ProcessContext, ProcessFunction,
    RuntimeContext,
};
pub use api::keyed_stream::KeyedStream;
pub use api::output_tag::OutputTag;
pub use api::windowed_stream::WindowedStream;
pub use checkpoint::config::{
    CheckpointConfig, CheckpointStorageConfig, CheckpointingMode, RetentionOnCancel,
};
pub use checkpoint::fencing::{FencedError, FencingToken};
pub use checkpoint::recovery::{CorruptCheckpointPolicy, RecoveryError};
pub use checkpoint::restart_strategy::RestartStrategyConfig;
pub use checkpoint::savepoint::Savepoint;
pub use config::{ExecutionConfig, NonRestoredState, RecordOriginTracing, RestoreSettings};
pub use error::{BoxError, WeirError};
pub use graph::explain::ExecutionPlan;
pub use record::{Key, Record};
pub use runtime::job_result::{JobExecutionResult, JobStart, JobStatus};
pub use runtime::mini_cluster::JobClient;
pub use runtime::output::Collector;
pub use state::ttl::{StateTtlConfig, TtlUpdateType};
pub use state::{AggregatingState, ListState, MapState, ReducingState, ValueState};
pub use time::{Watermark, WatermarkStrategy};
