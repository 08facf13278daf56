//! Key extraction for hash partitioning and keyed operators.

use std::marker::PhantomData;

use crate::error::StateError;
use crate::record::Key;
use crate::state::key_group::KeyGroupAssigner;

/// Extracts a record's key (Flink's `KeySelector`).
pub trait KeySelector<T>: Send + Sync + 'static {
    /// The key type.
    type Key: Key;
    /// The key of `record`.
    fn key(&self, record: &T) -> Self::Key;
}

/// A key selector from a closure.
pub struct FnKeySelector<T, K, F> {
    f: F,
    _types: PhantomData<fn(&T) -> K>,
}

impl<T, K, F> FnKeySelector<T, K, F> {
    /// Wraps `f`.
    pub fn new(f: F) -> Self {
        Self {
            f,
            _types: PhantomData,
        }
    }
}

impl<T: 'static, K: Key, F: Fn(&T) -> K + Send + Sync + 'static> KeySelector<T>
    for FnKeySelector<T, K, F>
{
    type Key = K;
    #[inline]
    fn key(&self, record: &T) -> K {
        (self.f)(record)
    }
}

/// The part of a key selector a hash partitioner needs: a record's key group. Object safe, so
/// the partitioner need not know the key type.
pub trait KeyGroupOf<T>: Send + Sync {
    /// The key group of `record`'s key.
    fn key_group(&self, record: &T, assigner: &mut KeyGroupAssigner) -> Result<u32, StateError>;
}

impl<T, S: KeySelector<T>> KeyGroupOf<T> for S {
    #[inline]
    fn key_group(&self, record: &T, assigner: &mut KeyGroupAssigner) -> Result<u32, StateError> {
        assigner.key_group(&self.key(record))
    }
}
