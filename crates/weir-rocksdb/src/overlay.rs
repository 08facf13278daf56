//! Writes held back while an incremental snapshot holds the database.
//!
//! The synchronous part of an incremental checkpoint must not wait for RocksDB to flush its
//! memtables (hundreds of milliseconds with a full write buffer), yet the files it hands to
//! checkpoint storage must hold exactly the state at the barrier. So the synchronous part
//! only marks the database as held; the asynchronous part flushes and hard-links its files
//! while the task keeps processing records, its writes collected here, in RocksDB's key
//! order. Reads look here first. Once the snapshot lets the database go, the task moves the
//! entries into it a few at a time, so that no single record pays for all of them.

use std::collections::BTreeMap;
use std::ops::Bound;

use weir::error::StateError;
use weir::state::backend::merge_list_bytes;

/// A write held back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pending {
    /// The key's value is this.
    Put(Vec<u8>),
    /// The key has no value.
    Delete,
    /// This list (merged operands) is appended to the database's value.
    Merge(Vec<u8>),
}

/// Rough bookkeeping cost of an entry beyond its bytes (tree node, vectors).
const ENTRY_OVERHEAD: usize = 64;

/// Writes held back, by full RocksDB key.
#[derive(Debug, Default)]
pub(crate) struct Overlay {
    entries: BTreeMap<Vec<u8>, Pending>,
    bytes: usize,
}

fn cost(key: &[u8], pending: &Pending) -> usize {
    let value = match pending {
        Pending::Put(v) | Pending::Merge(v) => v.len(),
        Pending::Delete => 0,
    };
    key.len() + value + ENTRY_OVERHEAD
}

impl Overlay {
    /// Whether nothing is held back.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes held, roughly.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The write held back for `key`.
    pub(crate) fn get(&self, key: &[u8]) -> Option<&Pending> {
        self.entries.get(key)
    }

    fn insert(&mut self, key: &[u8], pending: Pending) {
        self.bytes += cost(key, &pending);
        if let Some(old) = self.entries.insert(key.to_vec(), pending) {
            self.bytes -= cost(key, &old);
        }
    }

    /// Holds back setting `key` to `value`.
    pub(crate) fn put(&mut self, key: &[u8], value: &[u8]) {
        self.insert(key, Pending::Put(value.to_vec()));
    }

    /// Holds back removing `key`.
    pub(crate) fn delete(&mut self, key: &[u8]) {
        self.insert(key, Pending::Delete);
    }

    /// Holds back appending the list `operand` to `key`'s list.
    pub(crate) fn merge(&mut self, key: &[u8], operand: &[u8]) -> Result<(), StateError> {
        let merged = over(self.entries.get(key), &Pending::Merge(operand.to_vec()))?;
        self.insert(key, merged);
        Ok(())
    }

    /// Takes the write held back for `key`.
    pub(crate) fn remove(&mut self, key: &[u8]) -> Option<Pending> {
        let pending = self.entries.remove(key)?;
        self.bytes -= cost(key, &pending);
        Some(pending)
    }

    /// Takes the first write held back, in key order.
    pub(crate) fn pop_first(&mut self) -> Option<(Vec<u8>, Pending)> {
        let (key, pending) = self.entries.pop_first()?;
        self.bytes -= cost(&key, &pending);
        Some((key, pending))
    }

    /// Every write held back, in key order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Vec<u8>, &Pending)> {
        self.entries.iter()
    }

    /// The writes of `older` and then `newer` for keys from `start` up to `end`, as one
    /// layer: what a read through both sees.
    pub(crate) fn compose(
        older: &Overlay,
        newer: &Overlay,
        start: &[u8],
        end: Option<&[u8]>,
    ) -> Result<Overlay, StateError> {
        let mut composed = Overlay::default();
        for (key, pending) in older.range(start, end) {
            composed.insert(key, pending.clone());
        }
        for (key, pending) in newer.range(start, end) {
            let layered = over(composed.get(key), pending)?;
            composed.insert(key, layered);
        }
        Ok(composed)
    }

    /// The writes held back for keys from `start` up to `end` (exclusive; unbounded if
    /// `None`), in key order.
    pub(crate) fn range<'a>(
        &'a self,
        start: &[u8],
        end: Option<&[u8]>,
    ) -> impl Iterator<Item = (&'a Vec<u8>, &'a Pending)> + 'a {
        let upper = match end {
            Some(end) => Bound::Excluded(end.to_vec()),
            None => Bound::Unbounded,
        };
        self.entries
            .range::<Vec<u8>, _>((Bound::Included(start.to_vec()), upper))
    }
}

/// The one write that has the effect of `newer` after `older`.
pub(crate) fn over(older: Option<&Pending>, newer: &Pending) -> Result<Pending, StateError> {
    Ok(match (older, newer) {
        (_, Pending::Put(_) | Pending::Delete) | (None, _) => newer.clone(),
        (Some(Pending::Put(value)), Pending::Merge(operands)) => {
            let mut value = value.clone();
            merge_list_bytes(&mut value, operands)?;
            Pending::Put(value)
        }
        (Some(Pending::Delete), Pending::Merge(operands)) => Pending::Put(operands.clone()),
        (Some(Pending::Merge(first)), Pending::Merge(operands)) => {
            let mut first = first.clone();
            merge_list_bytes(&mut first, operands)?;
            Pending::Merge(first)
        }
    })
}

/// The value a key has with `pending` over the database's value `base`.
pub(crate) fn resolve(
    pending: &Pending,
    base: Option<&[u8]>,
) -> Result<Option<Vec<u8>>, StateError> {
    match pending {
        Pending::Put(value) => Ok(Some(value.clone())),
        Pending::Delete => Ok(None),
        Pending::Merge(operands) => match base {
            None => Ok(Some(operands.clone())),
            Some(base) => {
                let mut value = base.to_vec();
                merge_list_bytes(&mut value, operands)?;
                Ok(Some(value))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(items: &[u8]) -> Vec<u8> {
        postcard::to_allocvec(&items.to_vec()).unwrap()
    }

    #[test]
    fn merges_fold_into_what_is_held_back() {
        let mut overlay = Overlay::default();
        overlay.merge(b"a", &list(&[1])).unwrap();
        overlay.merge(b"a", &list(&[2])).unwrap();
        let held = overlay.get(b"a").unwrap().clone();
        assert_eq!(held, Pending::Merge(list(&[1, 2])));
        assert_eq!(
            resolve(&held, Some(&list(&[0]))).unwrap(),
            Some(list(&[0, 1, 2]))
        );
        assert_eq!(resolve(&held, None).unwrap(), Some(list(&[1, 2])));

        overlay.delete(b"b");
        overlay.merge(b"b", &list(&[5])).unwrap();
        assert_eq!(overlay.get(b"b"), Some(&Pending::Put(list(&[5]))));
        overlay.put(b"c", &list(&[7]));
        overlay.merge(b"c", &list(&[8])).unwrap();
        assert_eq!(overlay.get(b"c"), Some(&Pending::Put(list(&[7, 8]))));
    }

    #[test]
    fn composed_layers_read_as_one() {
        let (mut older, mut newer) = (Overlay::default(), Overlay::default());
        older.put(b"a", &list(&[1]));
        older.merge(b"b", &list(&[2])).unwrap();
        older.delete(b"c");
        older.put(b"z", &list(&[9]));
        newer.merge(b"a", &list(&[3])).unwrap();
        newer.merge(b"b", &list(&[4])).unwrap();
        newer.merge(b"c", &list(&[5])).unwrap();
        newer.put(b"d", &list(&[6]));
        let composed = Overlay::compose(&older, &newer, b"a", Some(b"e")).unwrap();
        let entries: Vec<(&[u8], Pending)> = composed
            .iter()
            .map(|(k, p)| (k.as_slice(), p.clone()))
            .collect();
        assert_eq!(
            entries,
            vec![
                (&b"a"[..], Pending::Put(list(&[1, 3]))),
                (b"b", Pending::Merge(list(&[2, 4]))),
                (b"c", Pending::Put(list(&[5]))),
                (b"d", Pending::Put(list(&[6]))),
            ],
            "`z` lies outside the range"
        );
    }

    #[test]
    fn bytes_follow_the_entries_and_ranges_keep_key_order() {
        let mut overlay = Overlay::default();
        overlay.put(b"k2", b"vv");
        overlay.put(b"k1", b"v");
        overlay.put(b"k1", b"value");
        overlay.delete(b"k3");
        let keys: Vec<&[u8]> = overlay
            .range(b"k1", Some(b"k3"))
            .map(|(k, _)| k.as_slice())
            .collect();
        assert_eq!(keys, vec![&b"k1"[..], b"k2"]);
        assert_eq!(overlay.range(b"k2", None).count(), 2);
        assert_eq!(overlay.pop_first().unwrap().0, b"k1".to_vec());
        overlay.remove(b"k2");
        overlay.remove(b"k3");
        assert!(overlay.is_empty());
        assert_eq!(overlay.bytes(), 0);
    }
}
