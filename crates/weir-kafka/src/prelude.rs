//! The Kafka connector's types for a job, beside `weir::prelude`:
//! `use weir_kafka::prelude::*;`.

pub use crate::deserializer::{
    ConsumedRecord, JsonValue, KafkaRecordDeserializer, StringKeyValue, StringValue,
};
pub use crate::error::KafkaError;
pub use crate::sink::{DeliveryGuarantee, JsonSerializer, KafkaSink, StringKeyValueSerializer};
pub use crate::source::{KafkaSource, OffsetResetStrategy, StartingOffsets};
