//! A Kafka partition as a source split: its progress is the next offset to read.

use serde::{Deserialize, Serialize};
use weir::connectors::source::SourceSplit;

/// One topic partition, read from `next_offset` on (up to `stopping_offset`, exclusive, when
/// the source is bounded).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaPartitionSplit {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The offset of the next record to read.
    pub next_offset: i64,
    /// Where a bounded source stops (exclusive).
    pub stopping_offset: Option<i64>,
}

impl KafkaPartitionSplit {
    /// Whether a bounded split is read to its end.
    pub fn is_finished(&self) -> bool {
        self.stopping_offset
            .is_some_and(|stop| self.next_offset >= stop)
    }
}

impl SourceSplit for KafkaPartitionSplit {
    fn split_id(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }
}

/// The reader subtask that owns a partition: the partitions of one topic go round-robin
/// over the readers from a start index derived from the topic's name (Flink's
/// `KafkaSourceEnumerator#getSplitOwner`, with Java's `String.hashCode`), so that
/// assignments are stable across restarts and match what Flink users expect.
pub fn split_owner(topic: &str, partition: i32, parallelism: u32) -> u32 {
    let parallelism = i64::from(parallelism.max(1));
    let start = i64::from(java_string_hash(topic).wrapping_mul(31) & 0x7FFF_FFFF) % parallelism;
    // Both terms are non-negative and bounded, so the sum cannot overflow an i64.
    u32::try_from((start + i64::from(partition.max(0))) % parallelism).unwrap_or(0)
}

/// Java's `String.hashCode` over UTF-16 code units.
fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_hash_matches_known_values() {
        // "hello".hashCode() == 99162322 and "".hashCode() == 0 in Java.
        assert_eq!(java_string_hash("hello"), 99_162_322);
        assert_eq!(java_string_hash(""), 0);
        // Overflow wraps as in Java: "polygenelubricants".hashCode() == Integer.MIN_VALUE.
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
    }

    #[test]
    fn partitions_of_a_topic_spread_round_robin() {
        let owners: Vec<u32> = (0..6).map(|p| split_owner("orders", p, 3)).collect();
        for window in owners.windows(2) {
            assert_eq!((window[0] + 1) % 3, window[1]);
        }
        assert!((0..100).all(|p| split_owner("x", p, 1) == 0));
    }

    #[test]
    fn a_split_is_finished_only_when_bounded_and_read_to_its_end() {
        let mut split = KafkaPartitionSplit {
            topic: "t".into(),
            partition: 0,
            next_offset: 5,
            stopping_offset: None,
        };
        assert!(!split.is_finished());
        split.stopping_offset = Some(5);
        assert!(split.is_finished());
        split.next_offset = 4;
        assert!(!split.is_finished());
        assert_eq!(split.split_id(), "t-0");
    }
}
