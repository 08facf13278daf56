//! Key groups: the unit in which keyed state is partitioned, snapshotted and rescaled.
//!
//! A key is serialized (postcard, a stable format) and hashed with XXH3 — never with Rust's
//! randomly seeded default hasher — so that a key lands in the same key group in every run and
//! every process. Key groups are assigned to subtasks in contiguous ranges, with Flink's
//! formulas, so a restore at another parallelism reads exactly the groups it now owns.

use std::fmt;

use serde::Serialize;

use crate::error::StateError;
use crate::state::key_bytes::encode_key;

/// An inclusive range of key groups owned by one subtask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct KeyGroupRange {
    /// First key group in the range.
    pub start: u32,
    /// Last key group in the range (inclusive).
    pub end: u32,
}

impl KeyGroupRange {
    /// Number of key groups in the range.
    pub fn len(&self) -> usize {
        (self.end + 1 - self.start) as usize
    }
    /// Whether the range holds no key group (never true for ranges made here).
    pub fn is_empty(&self) -> bool {
        self.end < self.start
    }
    /// Whether `key_group` lies in the range.
    pub fn contains(&self, key_group: u32) -> bool {
        key_group >= self.start && key_group <= self.end
    }
    /// Whether the two ranges share a key group.
    pub fn overlaps(&self, other: &KeyGroupRange) -> bool {
        self.start <= other.end && other.start <= self.end
    }
    /// The key groups in both ranges, if any.
    pub fn intersection(&self, other: &KeyGroupRange) -> Option<KeyGroupRange> {
        self.overlaps(other).then(|| KeyGroupRange {
            start: self.start.max(other.start),
            end: self.end.min(other.end),
        })
    }
    /// Iterates over the key groups of the range.
    pub fn iter(&self) -> impl Iterator<Item = u32> {
        self.start..=self.end
    }
}

impl fmt::Display for KeyGroupRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "key groups {}..={}", self.start, self.end)
    }
}

/// Stable 64-bit hash of a key's serialized bytes.
pub fn stable_key_hash(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// Key group of a hash: `hash mod max_parallelism`.
pub fn key_group_for_hash(hash: u64, max_parallelism: u32) -> u32 {
    (hash % u64::from(max_parallelism)) as u32
}

/// Subtask that owns `key_group` at `parallelism` (Flink's
/// `computeOperatorIndexForKeyGroup`).
pub fn operator_index_for_key_group(max_parallelism: u32, parallelism: u32, key_group: u32) -> u32 {
    (u64::from(key_group) * u64::from(parallelism) / u64::from(max_parallelism)) as u32
}

/// Key groups owned by subtask `index` at `parallelism` (Flink's
/// `computeKeyGroupRangeForOperatorIndex`); the inverse of [`operator_index_for_key_group`].
pub fn key_group_range_for_operator(
    max_parallelism: u32,
    parallelism: u32,
    index: u32,
) -> KeyGroupRange {
    let (m, p, i) = (
        u64::from(max_parallelism),
        u64::from(parallelism),
        u64::from(index),
    );
    let start = (i * m).div_ceil(p);
    let end = ((i + 1) * m).div_ceil(p) - 1;
    KeyGroupRange {
        start: start as u32,
        end: end as u32,
    }
}

/// Assigns keys to key groups, reusing one serialization buffer to stay allocation-free.
#[derive(Debug, Clone)]
pub struct KeyGroupAssigner {
    max_parallelism: u32,
    scratch: Vec<u8>,
}

impl KeyGroupAssigner {
    /// An assigner for `max_parallelism` key groups.
    pub fn new(max_parallelism: u32) -> Self {
        Self {
            max_parallelism,
            scratch: Vec::with_capacity(64),
        }
    }

    /// Number of key groups.
    pub fn max_parallelism(&self) -> u32 {
        self.max_parallelism
    }

    /// The bytes of the key last passed to [`key_group`](Self::key_group): its postcard
    /// encoding, which byte-level state backends store it as.
    #[inline]
    pub fn last_key_bytes(&self) -> &[u8] {
        &self.scratch
    }

    /// The key group of `key`.
    #[inline]
    pub fn key_group<K: Serialize + ?Sized>(&mut self, key: &K) -> Result<u32, StateError> {
        self.scratch.clear();
        encode_key(key, &mut self.scratch).map_err(|e| StateError::KeyEncoding(e.to_string()))?;
        Ok(key_group_for_hash(
            stable_key_hash(&self.scratch),
            self.max_parallelism,
        ))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn hash_is_stable_across_runs() {
        // Pinned values: a change here breaks restoring every existing checkpoint.
        let mut a = KeyGroupAssigner::new(128);
        assert_eq!(
            a.key_group(&"user-42").unwrap(),
            a.key_group(&"user-42").unwrap()
        );
        let pinned = [
            a.key_group(&0u64).unwrap(),
            a.key_group(&"a").unwrap(),
            a.key_group(&("x", 7u32)).unwrap(),
        ];
        assert_eq!(pinned, PINNED);
    }

    /// Key groups of `0u64`, `"a"` and `("x", 7u32)` at 128 key groups, recorded from the
    /// first implementation; they must never change.
    const PINNED: [u32; 3] = [91, 68, 23];

    #[test]
    fn ranges_partition_all_key_groups() {
        for max in [1u32, 7, 128, 1000] {
            for p in 1..=max.min(40) {
                let mut next = 0;
                for i in 0..p {
                    let r = key_group_range_for_operator(max, p, i);
                    assert_eq!(r.start, next, "max={max} p={p} i={i}");
                    assert!(!r.is_empty());
                    next = r.end + 1;
                }
                assert_eq!(next, max);
            }
        }
    }

    proptest! {
        #[test]
        fn operator_index_inverts_ranges(max in 1u32..=4096, p_seed in 1u32..=4096, kg_seed in 0u32..4096) {
            let p = (p_seed % max) + 1;
            let kg = kg_seed % max;
            let i = operator_index_for_key_group(max, p, kg);
            prop_assert!(i < p);
            prop_assert!(key_group_range_for_operator(max, p, i).contains(kg));
        }

        #[test]
        fn key_group_is_in_bounds(key in any::<String>(), max in 1u32..=32768) {
            let mut a = KeyGroupAssigner::new(max);
            prop_assert!(a.key_group(&key).unwrap() < max);
        }
    }
}
