//! # weir-kafka
//!
//! Kafka in, Kafka out, exactly once: a replayable [`KafkaSource`] whose partition offsets
//! live in Weir's checkpoints, and a [`KafkaSink`] that writes one Kafka transaction per
//! checkpoint and closes the gap between a checkpoint's completion and its transaction's
//! commit.

#![warn(missing_docs)]

pub mod admin;
pub mod client_config;
pub mod deserializer;
pub mod error;
pub mod log_reader;
pub mod sink;
pub mod source;
pub mod word_count;

pub use client_config::KafkaConnection;
pub use deserializer::{
    ConsumedRecord, JsonValue, KafkaRecordDeserializer, MalformedKafkaRecord, StringKeyValue,
    StringValue,
};
pub use error::KafkaError;
pub use log_reader::{LogReader, LogRecord, TransactionOutcome};
pub use sink::{DeliveryGuarantee, KafkaSink};
pub use source::{KafkaSource, OffsetResetStrategy, StartingOffsets};
