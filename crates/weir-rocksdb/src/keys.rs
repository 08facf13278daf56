//! How keyed state is laid out in RocksDB's key space: `key group ‖ state id ‖ row key`,
//! the key group and the state id as big-endian `u16`s, the row key as the typed layer
//! encodes it (the key's postcard bytes; for a map state, their length, the key and the user
//! key).
//!
//! Key groups come first so that the key groups of a subtask are one contiguous range for
//! every state: a restore at another parallelism keeps its range with two range deletions,
//! and copies another subtask's share with one bounded scan.

/// Bytes before the row key.
pub(crate) const PREFIX_LEN: usize = 4;

/// The state id of the rows that hold restored canonical entries of states not registered
/// yet: `key group ‖ RESTORED_STATE ‖ state name` → that state's canonical entries of the
/// key group. Kept in the database so that incremental checkpoints carry them too.
pub(crate) const RESTORED_STATE: u16 = u16::MAX;

/// The largest number of key groups the layout holds (Flink's upper bound on max
/// parallelism).
pub(crate) const MAX_KEY_GROUPS: u32 = 1 << 15;

/// Writes the key of `row` in state `state` of `key_group` into `out` (cleared first).
#[inline]
pub(crate) fn write_key(out: &mut Vec<u8>, key_group: u32, state: u16, row: &[u8]) {
    out.clear();
    out.extend_from_slice(&(key_group as u16).to_be_bytes());
    out.extend_from_slice(&state.to_be_bytes());
    out.extend_from_slice(row);
}

/// The first key of `key_group` (every key of a group is at least this; every key of the
/// groups before it is less).
pub(crate) fn group_start(key_group: u32) -> Vec<u8> {
    (key_group as u16).to_be_bytes().to_vec()
}

/// A key's key group, state id and row key; `None` if it is too short to be one.
pub(crate) fn split_key(key: &[u8]) -> Option<(u32, u16, &[u8])> {
    let group = u16::from_be_bytes([*key.first()?, *key.get(1)?]);
    let state = u16::from_be_bytes([*key.get(2)?, *key.get(3)?]);
    Some((u32::from(group), state, &key[PREFIX_LEN..]))
}

/// The smallest key greater than every key that starts with `prefix` (`None` if there is
/// none: the prefix is all `0xff`).
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_key_group_then_state_then_row() {
        let mut a = Vec::new();
        let mut b = Vec::new();
        write_key(&mut a, 1, 9, b"zzz");
        write_key(&mut b, 2, 0, b"aaa");
        assert!(a < b);
        assert!(group_start(2) <= b && a < group_start(2));
        assert_eq!(split_key(&b), Some((2, 0, &b"aaa"[..])));
        assert_eq!(split_key(&[0, 1, 2]), None);
    }

    #[test]
    fn a_prefix_ends_just_past_its_keys() {
        assert_eq!(prefix_end(&[1, 2]), Some(vec![1, 3]));
        assert_eq!(prefix_end(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xff, 0xff]), None);
        let mut key = Vec::new();
        write_key(&mut key, 3, 1, &[0xff, 0xff, 7]);
        let prefix = &key[..PREFIX_LEN + 2];
        let end = prefix_end(prefix).unwrap();
        assert!(key.as_slice() >= prefix && key < end);
    }
}
