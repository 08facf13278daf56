//! # weir-kafka
//!
//! Kafka in, Kafka out, exactly once: a replayable [`KafkaSource`] whose partition offsets
//! live in Weir's checkpoints, and a [`KafkaSink`] that writes one Kafka transaction per
//! checkpoint and closes the gap between a checkpoint's completion and its transaction's
//! commit.
//!
//! ```no_run
//! use weir::prelude::*;
//! use weir_kafka::prelude::*;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let env = StreamExecutionEnvironment::new(ExecutionConfig::default())?;
//! let words = env.from_source(
//!     KafkaSource::builder("127.0.0.1:9092", StringValue)
//!         .topics(["words"])
//!         .group_id("word-count")
//!         .starting_offsets(StartingOffsets::Earliest)
//!         .build()?,
//!     WatermarkStrategy::no_watermarks(),
//!     "words",
//! );
//! words
//!     .key_by(|w: &String| w.clone())
//!     .count()
//!     .map(|(w, n)| (w, n.to_string()))
//!     .sink_to(
//!         KafkaSink::builder("127.0.0.1:9092", StringKeyValueSerializer::new("counts"))
//!             .delivery_guarantee(DeliveryGuarantee::ExactlyOnce)
//!             .transactional_id_prefix("word-count")
//!             .build()?,
//!         "counts",
//!     )
//!     .uid("counts");
//! env.execute("word-count")?;
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

pub mod admin;
pub mod client_config;
pub mod deserializer;
pub mod error;
pub mod log_reader;
pub mod prelude;
pub mod security;
pub mod sink;
pub mod source;
pub mod word_count;

pub use client_config::KafkaConnection;
pub use deserializer::{
    ConsumedRecord, JsonValue, KafkaRecordDeserializer, StringKeyValue, StringValue,
};
pub use error::KafkaError;
pub use log_reader::{LogReader, LogRecord, TransactionOutcome};
pub use sink::{DeliveryGuarantee, KafkaSink};
pub use source::{KafkaSource, OffsetResetStrategy, StartingOffsets};
