//! Turning Kafka records into stream records (Flink's `KafkaRecordDeserializationSchema`).

use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A record as it came from Kafka.
#[derive(Debug, Clone, Copy)]
pub struct ConsumedRecord<'a> {
    /// Topic.
    pub topic: &'a str,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Timestamp in ms since the epoch, when the record has one.
    pub timestamp: Option<i64>,
    /// Key bytes.
    pub key: Option<&'a [u8]>,
    /// Value bytes.
    pub value: Option<&'a [u8]>,
}

/// A Kafka record that could not be deserialized: where it is and why (the source fails
/// with it, skips it, or passes it on as a dead letter).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MalformedKafkaRecord {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Why it could not be read.
    pub reason: String,
    /// The value, lossily as text.
    pub raw_value: Option<String>,
}

impl MalformedKafkaRecord {
    pub(crate) fn new(record: &ConsumedRecord<'_>, reason: String) -> Self {
        Self {
            topic: record.topic.to_string(),
            partition: record.partition,
            offset: record.offset,
            reason,
            raw_value: record
                .value
                .map(|v| String::from_utf8_lossy(v).into_owned()),
        }
    }
}

/// Deserializes Kafka records into `T`.
pub trait KafkaRecordDeserializer<T>: Send + Sync + 'static {
    /// The record, or why it is malformed.
    fn deserialize(&self, record: &ConsumedRecord<'_>) -> Result<T, String>;
}

impl<T, F> KafkaRecordDeserializer<T> for F
where
    F: Fn(&ConsumedRecord<'_>) -> Result<T, String> + Send + Sync + 'static,
{
    fn deserialize(&self, record: &ConsumedRecord<'_>) -> Result<T, String> {
        self(record)
    }
}

/// The value as UTF-8 text (a missing value is malformed).
#[derive(Debug, Clone, Copy, Default)]
pub struct StringValue;

impl KafkaRecordDeserializer<String> for StringValue {
    fn deserialize(&self, record: &ConsumedRecord<'_>) -> Result<String, String> {
        let value = record.value.ok_or("record has no value")?;
        String::from_utf8(value.to_vec()).map_err(|e| format!("value is not UTF-8: {e}"))
    }
}

/// The key and the value, both as UTF-8 text.
#[derive(Debug, Clone, Copy, Default)]
pub struct StringKeyValue;

impl KafkaRecordDeserializer<(String, String)> for StringKeyValue {
    fn deserialize(&self, record: &ConsumedRecord<'_>) -> Result<(String, String), String> {
        let text = |bytes: Option<&[u8]>, what: &str| -> Result<String, String> {
            let bytes = bytes.ok_or_else(|| format!("record has no {what}"))?;
            String::from_utf8(bytes.to_vec()).map_err(|e| format!("{what} is not UTF-8: {e}"))
        };
        Ok((text(record.key, "key")?, text(record.value, "value")?))
    }
}

/// The value as JSON, deserialized with serde.
pub struct JsonValue<T>(PhantomData<fn() -> T>);

impl<T> Default for JsonValue<T> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T: DeserializeOwned + 'static> KafkaRecordDeserializer<T> for JsonValue<T> {
    fn deserialize(&self, record: &ConsumedRecord<'_>) -> Result<T, String> {
        let value = record.value.ok_or("record has no value")?;
        serde_json::from_slice(value).map_err(|e| format!("invalid JSON value: {e}"))
    }
}

/// Wraps a deserializer so that malformed records come out as `Err` instead of failing or
/// being skipped: route them to a dead-letter sink with `stream.flat_map(Result::err)`.
pub struct WithDeadLetters<T>(pub(crate) Arc<dyn KafkaRecordDeserializer<T>>);

impl<T: 'static> KafkaRecordDeserializer<Result<T, MalformedKafkaRecord>> for WithDeadLetters<T> {
    fn deserialize(
        &self,
        record: &ConsumedRecord<'_>,
    ) -> Result<Result<T, MalformedKafkaRecord>, String> {
        Ok(self
            .0
            .deserialize(record)
            .map_err(|reason| MalformedKafkaRecord::new(record, reason)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record<'a>(value: Option<&'a [u8]>) -> ConsumedRecord<'a> {
        ConsumedRecord {
            topic: "t",
            partition: 2,
            offset: 7,
            timestamp: None,
            key: Some(b"k"),
            value,
        }
    }

    #[test]
    fn string_and_json_values_decode_or_explain() {
        assert_eq!(
            StringValue.deserialize(&record(Some(b"hi"))),
            Ok("hi".into())
        );
        assert!(StringValue
            .deserialize(&record(Some(&[0xff])))
            .unwrap_err()
            .contains("UTF-8"));
        let json = JsonValue::<(u32, String)>::default();
        assert_eq!(
            json.deserialize(&record(Some(br#"[1,"a"]"#))),
            Ok((1, "a".into()))
        );
        assert!(json
            .deserialize(&record(Some(b"{")))
            .unwrap_err()
            .contains("invalid JSON"));
        assert_eq!(
            StringKeyValue.deserialize(&record(Some(b"v"))),
            Ok(("k".into(), "v".into()))
        );
    }

    #[test]
    fn dead_letters_name_the_record() {
        let wrapped = WithDeadLetters::<String>(Arc::new(StringValue));
        let out = wrapped.deserialize(&record(Some(&[0xff]))).unwrap();
        let bad = out.unwrap_err();
        assert_eq!((bad.topic.as_str(), bad.partition, bad.offset), ("t", 2, 7));
    }
}
