//! A batch of records with their event timestamps: the unit handed between chained operators
//! and sent through channels.

use serde::{Deserialize, Serialize};

use crate::connectors::origin::TracedOrigin;

/// How a record without a timestamp is marked in a batch's timestamp column.
const NO_TIMESTAMP: i64 = i64::MIN;

/// How a record without a known key group is marked in a batch's key-group column.
const NO_KEY_GROUP: u16 = u16::MAX;

/// Records in order, and — only once one of them has an event timestamp — a column of
/// timestamps beside them, so that a job without event time carries nothing extra. A
/// timestamp of exactly `i64::MIN` reads as "no timestamp". A batch a hash partitioner sent
/// has a column of key groups too: each record's key group, computed once where it was
/// routed, so that the keyed operator receiving it need not serialize and hash its key again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordBatch<T> {
    records: Vec<T>,
    /// Empty, or one entry per record.
    timestamps: Vec<i64>,
    /// Empty, or one entry per record (`NO_KEY_GROUP` where unknown).
    key_groups: Vec<u16>,
    /// Where the records were read, in an attempt that traces record origins (after a
    /// failure of user code): one entry for each of the first records, those after it and
    /// `None`s having none. Empty otherwise, so that normal runs carry nothing.
    origins: Vec<Option<TracedOrigin>>,
}

impl<T> Default for RecordBatch<T> {
    fn default() -> Self {
        Self {
            records: Vec::new(),
            timestamps: Vec::new(),
            key_groups: Vec::new(),
            origins: Vec::new(),
        }
    }
}

impl<T> From<Vec<T>> for RecordBatch<T> {
    fn from(records: Vec<T>) -> Self {
        Self {
            records,
            timestamps: Vec::new(),
            key_groups: Vec::new(),
            origins: Vec::new(),
        }
    }
}

impl<T> RecordBatch<T> {
    /// An empty batch with room for `capacity` records.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            records: Vec::with_capacity(capacity),
            timestamps: Vec::new(),
            key_groups: Vec::new(),
            origins: Vec::new(),
        }
    }

    /// An empty batch with room for `capacity` records and their key groups.
    pub fn keyed_with_capacity(capacity: usize) -> Self {
        Self {
            records: Vec::with_capacity(capacity),
            timestamps: Vec::new(),
            key_groups: Vec::with_capacity(capacity),
            origins: Vec::new(),
        }
    }

    /// Checks what decoding alone cannot: a timestamp or key-group column is empty or as
    /// long as the records (a batch from the network may be malformed).
    pub fn check_shape(&self) -> Result<(), String> {
        let n = self.records.len();
        if !self.timestamps.is_empty() && self.timestamps.len() != n {
            return Err(format!(
                "a batch of {n} records has {} timestamps",
                self.timestamps.len()
            ));
        }
        if !self.key_groups.is_empty() && self.key_groups.len() != n {
            return Err(format!(
                "a batch of {n} records has {} key groups",
                self.key_groups.len()
            ));
        }
        if self.origins.len() > n {
            return Err(format!(
                "a batch of {n} records has {} origins",
                self.origins.len()
            ));
        }
        Ok(())
    }

    /// Appends a record in key group `key_group` with its timestamp, if any (a hash
    /// partitioner's batch).
    #[inline]
    pub fn push_keyed(&mut self, record: T, timestamp: Option<i64>, key_group: u32) {
        if self.key_groups.len() < self.records.len() {
            self.key_groups.resize(self.records.len(), NO_KEY_GROUP);
        }
        self.key_groups
            .push(u16::try_from(key_group).unwrap_or(NO_KEY_GROUP));
        self.push(record, timestamp);
    }

    /// The key group of record `index`, if the batch carries key groups.
    #[inline]
    pub fn key_group(&self, index: usize) -> Option<u32> {
        self.key_groups
            .get(index)
            .filter(|g| **g != NO_KEY_GROUP)
            .map(|g| u32::from(*g))
    }

    /// Appends a record read at `origin`, with its timestamp and key group, if any (an
    /// attempt that traces record origins).
    pub fn push_traced(
        &mut self,
        record: T,
        timestamp: Option<i64>,
        key_group: Option<u32>,
        origin: Option<TracedOrigin>,
    ) {
        if origin.is_some() || !self.origins.is_empty() {
            self.origins.resize(self.records.len(), None);
            self.origins.push(origin);
        }
        match key_group {
            Some(group) => self.push_keyed(record, timestamp, group),
            None => self.push(record, timestamp),
        }
    }

    /// Whether the batch says where (some of) its records were read.
    #[inline]
    pub fn has_origins(&self) -> bool {
        !self.origins.is_empty()
    }

    /// Where record `index` was read, if the batch says.
    pub fn origin(&self, index: usize) -> Option<TracedOrigin> {
        self.origins.get(index).copied().flatten()
    }

    /// Takes the records out in order with their timestamps, key groups and origins (`None`
    /// where unknown); the batch is left empty.
    pub fn drain_traced(&mut self) -> impl Iterator<Item = TracedRecord<T>> + '_ {
        let mut origins = std::mem::take(&mut self.origins).into_iter();
        self.drain_keyed().map(move |(record, timestamp, group)| {
            (record, timestamp, group, origins.next().flatten())
        })
    }

    /// Cuts the batch into chunks of at most `n` records, taken front to back (each
    /// costs its own length, not the rest's).
    pub fn into_chunks(mut self, n: usize) -> BatchChunks<T> {
        self.reverse();
        BatchChunks {
            reversed: self,
            n: n.max(1),
        }
    }

    /// Whether the batch carries its records' key groups.
    #[inline]
    pub fn has_key_groups(&self) -> bool {
        !self.key_groups.is_empty()
    }

    /// Takes the records out in order with their timestamps and key groups (`None` where
    /// unknown); the batch is left empty with its allocations.
    pub fn drain_keyed(&mut self) -> impl Iterator<Item = (T, Option<i64>, Option<u32>)> + '_ {
        self.origins.clear();
        let groups = std::mem::take(&mut self.key_groups);
        let mut groups = groups.into_iter();
        self.drain().map(move |(record, timestamp)| {
            let group = groups.next().filter(|g| *g != NO_KEY_GROUP).map(u32::from);
            (record, timestamp, group)
        })
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
            Some(t) => self.push_with_timestamp(record, t),
            None => self.push_without_timestamp(record),
        }
    }

    /// Appends a record with a timestamp.
    #[inline]
    pub fn push_with_timestamp(&mut self, record: T, timestamp: i64) {
        if self.timestamps.len() < self.records.len() {
            self.timestamps.resize(self.records.len(), NO_TIMESTAMP);
        }
        if self.key_groups.len() > self.records.len() {
            // A keyed push put the record's key group first.
        } else if !self.key_groups.is_empty() {
            self.key_groups.push(NO_KEY_GROUP);
        }
        self.timestamps.push(timestamp);
        self.records.push(record);
    }

    /// Appends a record without a timestamp.
    #[inline]
    pub fn push_without_timestamp(&mut self, record: T) {
        if !self.timestamps.is_empty() {
            self.timestamps.push(NO_TIMESTAMP);
        }
        if self.key_groups.len() > self.records.len() {
            // A keyed push put the record's key group first.
        } else if !self.key_groups.is_empty() {
            self.key_groups.push(NO_KEY_GROUP);
        }
        self.records.push(record);
    }

    /// Whether any record of the batch has a timestamp.
    #[inline]
    pub fn has_timestamps(&self) -> bool {
        !self.timestamps.is_empty()
    }

    /// Takes the records out in order, for a batch without timestamps (the fast path of
    /// jobs without event time); any timestamps are dropped.
    #[inline]
    pub fn drain_records(&mut self) -> std::vec::Drain<'_, T> {
        self.timestamps.clear();
        self.key_groups.clear();
        self.origins.clear();
        self.records.drain(..)
    }

    /// Reverses the order of the records (with their timestamps and key groups).
    pub fn reverse(&mut self) {
        self.records.reverse();
        self.timestamps.reverse();
        self.key_groups.reverse();
        if !self.origins.is_empty() {
            self.origins.resize(self.records.len(), None);
            self.origins.reverse();
        }
    }

    /// Splits off the last `n` records (all, if fewer) into a batch of their own, in order.
    pub fn split_off_last(&mut self, n: usize) -> RecordBatch<T> {
        fn column<C>(v: &mut Vec<C>, at: usize) -> Vec<C> {
            if v.is_empty() {
                Vec::new()
            } else {
                v.split_off(at)
            }
        }
        let at = self.records.len().saturating_sub(n);
        if !self.origins.is_empty() {
            self.origins.resize(self.records.len(), None);
        }
        RecordBatch {
            timestamps: column(&mut self.timestamps, at),
            key_groups: column(&mut self.key_groups, at),
            origins: column(&mut self.origins, at),
            records: self.records.split_off(at),
        }
    }

    /// Removes every record, keeping the allocations.
    pub fn clear(&mut self) {
        self.records.clear();
        self.timestamps.clear();
        self.key_groups.clear();
        self.origins.clear();
    }

    /// Takes the records out in order with their timestamps; the batch is left empty with
    /// its allocations (also when the iterator is dropped early).
    #[inline]
    pub fn drain(&mut self) -> Drain<'_, T> {
        self.key_groups.clear();
        self.origins.clear();
        Drain {
            records: self.records.drain(..),
            timestamps: &mut self.timestamps,
            index: 0,
        }
    }

    /// The records, without their timestamps.
    pub fn into_records(self) -> Vec<T> {
        self.records
    }
}

/// A record taken out of a batch with its timestamp, key group and origin (see
/// [`RecordBatch::drain_traced`]).
pub type TracedRecord<T> = (T, Option<i64>, Option<u32>, Option<TracedOrigin>);

/// A batch taken chunk by chunk (see [`RecordBatch::into_chunks`]).
pub struct BatchChunks<T> {
    /// What is left, last record first.
    reversed: RecordBatch<T>,
    n: usize,
}

impl<T> BatchChunks<T> {
    /// The next chunk, in order, if records are left.
    pub fn next_chunk(&mut self) -> Option<RecordBatch<T>> {
        if self.reversed.is_empty() {
            return None;
        }
        let mut chunk = self.reversed.split_off_last(self.n);
        chunk.reverse();
        Some(chunk)
    }

    /// What is left, in order.
    pub fn into_rest(mut self) -> RecordBatch<T> {
        self.reversed.reverse();
        self.reversed
    }
}

/// The records of a batch with their timestamps, in order (see [`RecordBatch::drain`]).
pub struct Drain<'a, T> {
    records: std::vec::Drain<'a, T>,
    timestamps: &'a mut Vec<i64>,
    index: usize,
}

impl<T> Iterator for Drain<'_, T> {
    type Item = (T, Option<i64>);

    #[inline]
    fn next(&mut self) -> Option<(T, Option<i64>)> {
        let record = self.records.next()?;
        let timestamp = self
            .timestamps
            .get(self.index)
            .copied()
            .filter(|t| *t != NO_TIMESTAMP);
        self.index += 1;
        Some((record, timestamp))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.records.size_hint()
    }
}

impl<T> Drop for Drain<'_, T> {
    fn drop(&mut self) {
        self.timestamps.clear();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn chunks_come_front_to_back_with_their_columns_and_the_rest_stays_in_order() {
        let mut batch = RecordBatch::keyed_with_capacity(5);
        for i in 0..5u32 {
            batch.push_keyed(i, Some(i64::from(i) * 10), i + 100);
        }
        let mut chunks = batch.into_chunks(2);
        let first = chunks.next_chunk().unwrap();
        assert_eq!(first.records(), &[0, 1]);
        assert_eq!(
            (first.timestamp(1), first.key_group(1)),
            (Some(10), Some(101))
        );
        let rest = chunks.into_rest();
        assert_eq!(rest.records(), &[2, 3, 4]);
        assert_eq!(
            (rest.timestamp(0), rest.key_group(2)),
            (Some(20), Some(104))
        );
        let mut chunks = RecordBatch::from(vec![1, 2, 3]).into_chunks(2);
        assert_eq!(chunks.next_chunk().unwrap().records(), &[1, 2]);
        assert_eq!(chunks.next_chunk().unwrap().records(), &[3]);
        assert!(chunks.next_chunk().is_none());
        assert!(chunks.into_rest().is_empty());
    }

    use super::*;

    fn drained<T>(batch: &mut RecordBatch<T>) -> Vec<(T, Option<i64>)> {
        batch.drain().collect()
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
    fn key_groups_travel_with_their_records() {
        let mut batch = RecordBatch::keyed_with_capacity(4);
        batch.push_keyed("a", None, 7);
        batch.push_keyed("b", Some(20), 70_000);
        batch.push("c", None);
        batch.push_keyed("d", None, 0);
        assert!(batch.has_key_groups());
        assert!(batch.check_shape().is_ok());
        let drained: Vec<_> = batch.drain_keyed().collect();
        assert_eq!(
            drained,
            [
                ("a", None, Some(7)),
                ("b", Some(20), None),
                ("c", None, None),
                ("d", None, Some(0))
            ],
            "a group that does not fit, and a record pushed without one, read as unknown"
        );
        assert!(batch.is_empty() && !batch.has_key_groups());
        let mut plain = RecordBatch::default();
        plain.push(1, None);
        plain.key_groups = vec![1, 2];
        assert!(plain.check_shape().unwrap_err().contains("key groups"));
    }

    #[test]
    fn origins_travel_with_their_records_through_splits_and_reversal() {
        let place = crate::connectors::origin::OriginPlace::file("f");
        let at = |line| Some(place.at(line));
        let name = |o: Option<TracedOrigin>| o.map(|o| o.to_origin().to_string());
        let mut batch = RecordBatch::default();
        batch.push(0, None);
        batch.push_traced(1, Some(10), None, at(2));
        batch.push_traced(2, None, Some(5), at(3));
        batch.push(3, None);
        assert!(batch.has_origins() && batch.check_shape().is_ok());
        assert_eq!((batch.origin(0), batch.origin(3)), (None, None));
        let mut tail = batch.split_off_last(2);
        assert_eq!(name(tail.origin(0)).as_deref(), Some("f:3"));
        tail.reverse();
        assert_eq!(name(tail.origin(1)).as_deref(), Some("f:3"));
        assert_eq!(tail.origin(0), None);
        let drained: Vec<_> = batch
            .drain_traced()
            .map(|(r, t, g, o)| (r, t, g, name(o)))
            .collect();
        assert_eq!(
            drained,
            [
                (0, None, None, None),
                (1, Some(10), None, Some("f:2".into()))
            ]
        );
        assert!(batch.is_empty() && !batch.has_origins());
        batch.push(7, None);
        assert!(
            !batch.has_origins(),
            "a batch without traced records carries no column"
        );
    }

    #[test]
    fn a_drain_dropped_early_empties_the_batch() {
        let mut batch = RecordBatch::default();
        (0..5).for_each(|i| batch.push(i, Some(i)));
        let first: Vec<_> = batch.drain().take(2).collect();
        assert_eq!(first, [(0, Some(0)), (1, Some(1))]);
        assert!(batch.is_empty());
        batch.push(9, None);
        assert_eq!(drained(&mut batch), [(9, None)]);
    }
}
