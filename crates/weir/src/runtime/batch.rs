//! A batch of records with their event timestamps: the unit handed between chained operators
//! and sent through channels.

use serde::{Deserialize, Serialize};

/// How a record without a timestamp is marked in a batch's timestamp column.
const NO_TIMESTAMP: i64 = i64::MIN;

/// Records in order, and — only once one of them has an event timestamp — a column of
/// timestamps beside them, so that a job without event time carries nothing extra. A
/// timestamp of exactly `i64::MIN` reads as "no timestamp".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordBatch<T> {
    records: Vec<T>,
    /// Empty, or one entry per record.
    timestamps: Vec<i64>,
}

impl<T> Default for RecordBatch<T> {
    fn default() -> Self {
        Self {
            records: Vec::new(),
            timestamps: Vec::new(),
        }
    }
}

impl<T> From<Vec<T>> for RecordBatch<T> {
    fn from(records: Vec<T>) -> Self {
        Self {
            records,
            timestamps: Vec::new(),
        }
    }
}

impl<T> RecordBatch<T> {
    /// An empty batch with room for `capacity` records.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            records: Vec::with_capacity(capacity),
            timestamps: Vec::new(),
        }
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The records.
    pub fn records(&self) -> &[T] {
        &self.records
    }

    /// The timestamp of record `index`, if it has one.
    pub fn timestamp(&self, index: usize) -> Option<i64> {
        self.timestamps
            .get(index)
            .copied()
            .filter(|t| *t != NO_TIMESTAMP)
    }

    /// Appends a record with its timestamp, if any.
    #[inline]
    pub fn push(&mut self, record: T, timestamp: Option<i64>) {
        match timestamp {
            Some(t) => {
                if self.timestamps.len() < self.records.len() {
                    self.timestamps.resize(self.records.len(), NO_TIMESTAMP);
                }
                self.timestamps.push(t);
            }
            None if !self.timestamps.is_empty() => self.timestamps.push(NO_TIMESTAMP),
            None => {}
        }
        self.records.push(record);
    }

    /// Removes every record, keeping the allocations.
    pub fn clear(&mut self) {
        self.records.clear();
        self.timestamps.clear();
    }

    /// Takes the records out in order with their timestamps, stopping at the first error
    /// (the rest are dropped); the batch is left empty with its allocations.
    #[inline]
    pub fn drain_each<E>(
        &mut self,
        mut f: impl FnMut(T, Option<i64>) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.timestamps.is_empty() {
            return self.records.drain(..).try_for_each(|r| f(r, None));
        }
        let timestamps = std::mem::take(&mut self.timestamps);
        let result = self
            .records
            .drain(..)
            .zip(timestamps.iter())
            .try_for_each(|(r, &t)| f(r, (t != NO_TIMESTAMP).then_some(t)));
        self.timestamps = timestamps;
        self.timestamps.clear();
        result
    }

    /// The records, without their timestamps.
    pub fn into_records(self) -> Vec<T> {
        self.records
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drained<T>(batch: &mut RecordBatch<T>) -> Vec<(T, Option<i64>)> {
        let mut out = Vec::new();
        batch
            .drain_each(|r, t| {
                out.push((r, t));
                Ok::<(), ()>(())
            })
            .unwrap();
        out
    }

    #[test]
    fn a_batch_without_timestamps_carries_no_column() {
        let mut batch = RecordBatch::with_capacity(4);
        batch.push("a", None);
        batch.push("b", None);
        assert!(batch.timestamps.is_empty());
        assert_eq!(drained(&mut batch), [("a", None), ("b", None)]);
        assert!(batch.is_empty());
    }

    #[test]
    fn the_column_appears_with_the_first_timestamp_and_stays_aligned() {
        let mut batch = RecordBatch::default();
        batch.push(1, None);
        batch.push(2, Some(20));
        batch.push(3, None);
        batch.push(4, Some(i64::MAX));
        assert_eq!(batch.timestamp(0), None);
        assert_eq!(batch.timestamp(1), Some(20));
        assert_eq!(
            drained(&mut batch),
            [(1, None), (2, Some(20)), (3, None), (4, Some(i64::MAX))]
        );
        batch.push(5, None);
        assert_eq!(drained(&mut batch), [(5, None)]);
    }

    #[test]
    fn an_error_stops_the_drain_and_empties_the_batch() {
        let mut batch = RecordBatch::default();
        (0..5).for_each(|i| batch.push(i, Some(i)));
        let mut seen = 0;
        let result = batch.drain_each(|r, _| {
            seen += 1;
            if r == 2 {
                Err("stop")
            } else {
                Ok(())
            }
        });
        assert_eq!(result, Err("stop"));
        assert_eq!(seen, 3);
        assert!(batch.is_empty());
    }
}
