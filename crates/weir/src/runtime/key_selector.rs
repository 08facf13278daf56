//! Key extraction for hash partitioning and keyed operators.

use std::borrow::Cow;
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
    /// The key of `record`, borrowed from it where the selector can
    /// ([`key_by_ref`](crate::DataStream::key_by_ref)), so that routing a record and finding
    /// its state need not copy its key.
    #[inline]
    fn key_ref<'a>(&self, record: &'a T) -> Cow<'a, Self::Key> {
        Cow::Owned(self.key(record))
    }
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

/// A key selector from a closure that borrows the key from the record.
pub struct RefKeySelector<T, K, F> {
    f: F,
    _types: PhantomData<fn(&T) -> K>,
}

impl<T, K, F> RefKeySelector<T, K, F> {
    /// Wraps `f`.
    pub fn new(f: F) -> Self {
        Self {
            f,
            _types: PhantomData,
        }
    }
}

impl<T: 'static, K: Key, F> KeySelector<T> for RefKeySelector<T, K, F>
where
    F: for<'a> Fn(&'a T) -> &'a K + Send + Sync + 'static,
{
    type Key = K;
    #[inline]
    fn key(&self, record: &T) -> K {
        (self.f)(record).clone()
    }
    #[inline]
    fn key_ref<'a>(&self, record: &'a T) -> Cow<'a, K> {
        Cow::Borrowed((self.f)(record))
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
        assigner.key_group(&*self.key_ref(record))
    }
}
