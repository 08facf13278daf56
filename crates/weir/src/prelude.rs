//! What a job needs, in one import: `use weir::prelude::*;`.
//!
//! The environment and its configuration, the stream types, the sources and sinks that need
//! nothing outside this crate, the malformed-record policy, the function traits with their
//! contexts, keyed state, the metric handles functions register, and what a run returns. Connectors in other crates have preludes
//! of their own (`weir_kafka::prelude`, `weir_postgres::prelude`).
//!
//! ```
//! use weir::prelude::*;
//!
//! let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))?;
//! let counts = env
//!     .from_collection(vec!["a b".to_string(), "b".to_string()])
//!     .flat_map(|line: String, out: &mut Collector<'_, String>| {
//!         line.split_whitespace().for_each(|w| out.collect(w.to_string()))
//!     })
//!     .key_by(|word: &String| word.clone())
//!     .count()
//!     .collect();
//! env.execute("word count")?;
//! let mut counts = counts.take();
//! counts.sort();
//! assert_eq!(counts, vec![("a".into(), 1), ("b".into(), 1), ("b".into(), 2)]);
//! # Ok::<(), WeirError>(())
//! ```

pub use crate::api::connected_streams::{ConnectedStreams, KeyedConnectedStreams};
pub use crate::api::data_stream::{DataStream, DataStreamSink};
pub use crate::api::environment::StreamExecutionEnvironment;
pub use crate::api::functions::{
    AggregateFunction, CoProcessFunction, FunctionStateContext, KeyedCoProcessFunction,
    KeyedContext, KeyedEndContext, KeyedProcessFunction, ProcessContext, ProcessFunction,
    RuntimeContext,
};
pub use crate::api::keyed_stream::KeyedStream;
pub use crate::api::output_tag::OutputTag;
pub use crate::checkpoint::config::{
    CheckpointConfig, CheckpointStorageConfig, CheckpointingMode, RetentionOnCancel,
};
pub use crate::checkpoint::restart_strategy::RestartStrategyConfig;
pub use crate::checkpoint::savepoint::Savepoint;
pub use crate::config::{ExecutionConfig, NonRestoredState, RecordOriginTracing, RestoreSettings};
pub use crate::connectors::collect::CollectHandle;
pub use crate::connectors::collection::CollectionSource;
pub use crate::connectors::discard::DiscardingSink;
pub use crate::connectors::file_sink::FileSink;
pub use crate::connectors::file_source::FileSource;
pub use crate::connectors::generator::GeneratorSource;
pub use crate::connectors::malformed::{
    DecodeError, MalformedRecord, MalformedRecordPolicy, RecordOrigin,
};
pub use crate::connectors::print::PrintSink;
pub use crate::connectors::sink::{Sink, SinkWriter};
pub use crate::connectors::source::Source;
pub use crate::error::{BoxError, WeirError};
pub use crate::metrics::{Counter, Gauge, MetricGroup};
pub use crate::record::{Key, Record};
pub use crate::runtime::job_result::{JobExecutionResult, JobStart, JobStatus};
pub use crate::runtime::mini_cluster::JobClient;
pub use crate::runtime::output::Collector;
pub use crate::state::ttl::{StateTtlConfig, TtlUpdateType};
pub use crate::state::{AggregatingState, ListState, MapState, ReducingState, ValueState};
pub use crate::time::{
    TimeDomain, TimerService, Watermark, WatermarkGenerator, WatermarkOutput, WatermarkStrategy,
};
