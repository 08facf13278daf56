//! Turning Kafka records into stream records (Flink's `KafkaRecordDeserializationSchema`).

use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use weir::connectors::malformed::{DecodeError, RecordOrigin};

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

/// Deserializes Kafka records into `T`. A closure returning `Result<T, E>` is one, for any
/// error `E` that converts into a [`DecodeError`] (a `String`, a `&str`, a `DecodeError`).
pub trait KafkaRecordDeserializer<T>: Send + Sync + 'static {
    /// The record, or why it is malformed.
    fn deserialize(&self, record: &ConsumedRecord<'_>) -> Result<T, DecodeError>;
}

impl<T, E, F> KafkaRecordDeserializer<T> for F
where
    E: Into<DecodeError>,
    F: Fn(&ConsumedRecord<'_>) -> Result<T, E> + Send + Sync + 'static,
{
    fn deserialize(&self, record: &ConsumedRecord<'_>) -> Result<T, DecodeError> {
        self(record).map_err(Into::into)
    }
}

impl ConsumedRecord<'_> {
    /// Where the record is, for a [`MalformedRecord`](weir::prelude::MalformedRecord).
    pub fn origin(&self) -> RecordOrigin {
        RecordOrigin::Kafka {
            topic: self.topic.to_string(),
            partition: self.partition,
            offset: self.offset,
        }
    }
}

/// The value as UTF-8 text (a missing value is malformed).
#[derive(Debug, Clone, Copy, Default)]
pub struct StringValue;

impl KafkaRecordDeserializer<String> for StringValue {
    fn deserialize(&self, record: &ConsumedRecord<'_>) -> Result<String, DecodeError> {
        let value = record.value.ok_or("record has no value")?;
        String::from_utf8(value.to_vec())
            .map_err(|e| DecodeError::new(format!("value is not UTF-8: {e}")))
    }
}

/// The key and the value, both as UTF-8 text.
#[derive(Debug, Clone, Copy, Default)]
pub struct StringKeyValue;

impl KafkaRecordDeserializer<(String, String)> for StringKeyValue {
    fn deserialize(&self, record: &ConsumedRecord<'_>) -> Result<(String, String), DecodeError> {
        let text = |bytes: Option<&[u8]>, what: &str| -> Result<String, DecodeError> {
            let bytes = bytes.ok_or_else(|| DecodeError::new(format!("record has no {what}")))?;
            String::from_utf8(bytes.to_vec())
                .map_err(|e| DecodeError::in_column(what, format!("not UTF-8: {e}")))
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
    fn deserialize(&self, record: &ConsumedRecord<'_>) -> Result<T, DecodeError> {
        let value = record.value.ok_or("record has no value")?;
        serde_json::from_slice(value)
            .map_err(|e| DecodeError::new(format!("invalid JSON value: {e}")))
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
            .reason
            .contains("UTF-8"));
        let json = JsonValue::<(u32, String)>::default();
        assert_eq!(
            json.deserialize(&record(Some(br#"[1,"a"]"#))),
            Ok((1, "a".into()))
        );
        assert!(json
            .deserialize(&record(Some(b"{")))
            .unwrap_err()
            .reason
            .contains("invalid JSON"));
        assert_eq!(
            StringKeyValue.deserialize(&record(Some(b"v"))),
            Ok(("k".into(), "v".into()))
        );
    }

    #[test]
    fn records_name_their_origin() {
        assert_eq!(
            record(None).origin().to_string(),
            "topic t, partition 2, offset 7"
        );
    }
}
