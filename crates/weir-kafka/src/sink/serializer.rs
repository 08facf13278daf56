//! Turning stream records into Kafka records (Flink's `KafkaRecordSerializationSchema`).

use serde::Serialize;

/// A record to produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerRecord {
    /// Target topic.
    pub topic: String,
    /// Target partition (`None`: librdkafka's partitioner picks it from the key).
    pub partition: Option<i32>,
    /// Key bytes.
    pub key: Option<Vec<u8>>,
    /// Value bytes.
    pub value: Option<Vec<u8>>,
    /// Timestamp in ms since the epoch (`None`: the producer's clock).
    pub timestamp: Option<i64>,
}

/// Serializes `T` into a Kafka record.
pub trait KafkaRecordSerializer<T>: Send + Sync + 'static {
    /// The record to produce, or why `record` cannot be serialized.
    fn serialize(&self, record: &T) -> Result<ProducerRecord, String>;
}

impl<T, F> KafkaRecordSerializer<T> for F
where
    F: Fn(&T) -> Result<ProducerRecord, String> + Send + Sync + 'static,
{
    fn serialize(&self, record: &T) -> Result<ProducerRecord, String> {
        self(record)
    }
}

/// Writes `(key, value)` string pairs to one topic.
#[derive(Debug, Clone)]
pub struct StringKeyValueSerializer {
    topic: String,
}

impl StringKeyValueSerializer {
    /// Writes to `topic`.
    pub fn new(topic: impl Into<String>) -> Self {
        Self {
            topic: topic.into(),
        }
    }
}

impl<K: AsRef<str>, V: AsRef<str>> KafkaRecordSerializer<(K, V)> for StringKeyValueSerializer {
    fn serialize(&self, record: &(K, V)) -> Result<ProducerRecord, String> {
        Ok(ProducerRecord {
            topic: self.topic.clone(),
            partition: None,
            key: Some(record.0.as_ref().as_bytes().to_vec()),
            value: Some(record.1.as_ref().as_bytes().to_vec()),
            timestamp: None,
        })
    }
}

/// Derives a record's key.
type KeyFn<T> = Box<dyn Fn(&T) -> Option<String> + Send + Sync>;

/// Writes records as JSON values to one topic, keyed by a function of the record.
pub struct JsonSerializer<T> {
    topic: String,
    key: KeyFn<T>,
}

impl<T> JsonSerializer<T> {
    /// Writes to `topic`, keyed by `key`.
    pub fn new(
        topic: impl Into<String>,
        key: impl Fn(&T) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        Self {
            topic: topic.into(),
            key: Box::new(key),
        }
    }
}

impl<T: Serialize + 'static> KafkaRecordSerializer<T> for JsonSerializer<T> {
    fn serialize(&self, record: &T) -> Result<ProducerRecord, String> {
        Ok(ProducerRecord {
            topic: self.topic.clone(),
            partition: None,
            key: (self.key)(record).map(String::into_bytes),
            value: Some(serde_json::to_vec(record).map_err(|e| e.to_string())?),
            timestamp: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializers_fill_topic_key_and_value() {
        let r = StringKeyValueSerializer::new("out")
            .serialize(&("k", "v"))
            .unwrap();
        assert_eq!(r.topic, "out");
        assert_eq!(r.key.as_deref(), Some(&b"k"[..]));
        assert_eq!(r.value.as_deref(), Some(&b"v"[..]));
        let json = JsonSerializer::new("j", |x: &(u32, String)| Some(x.1.clone()));
        let r = json.serialize(&(3, "a".into())).unwrap();
        assert_eq!(r.value.as_deref(), Some(&br#"[3,"a"]"#[..]));
        assert_eq!(r.key.as_deref(), Some(&b"a"[..]));
    }
}
