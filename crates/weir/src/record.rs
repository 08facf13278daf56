//! What may flow through a stream.

use std::hash::Hash;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// A stream element: serializable (so that any channel can become a network channel and any
/// state can be snapshotted), cloneable (broadcast and fan-out), owned (`'static`) so that no
/// task holds a reference into another task's memory, and `Sync` so that state holding it can
/// be written out by a snapshot thread while the task goes on.
///
/// Implemented for every type meeting the bounds.
pub trait Record: Serialize + DeserializeOwned + Clone + Send + Sync + 'static {}
impl<T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static> Record for T {}

/// A key of a keyed stream: a [`Record`] that can also index a hash map.
///
/// Key groups come from a stable hash of the key's serialized bytes, not from [`Hash`], which
/// only serves the in-memory state tables.
pub trait Key: Record + Hash + Eq {}
impl<T: Record + Hash + Eq> Key for T {}
