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
///
/// ```
/// use weir::prelude::*;
/// #[derive(Clone, serde::Serialize, serde::Deserialize)]
/// struct Click { user: String, page: u32 }
/// fn assert_record<T: Record>() {}
/// assert_record::<Click>();
/// assert_record::<(String, u64)>();
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot flow through a stream: records must be `Serialize + Deserialize + Clone + Send + Sync + 'static`",
    label = "not a record",
    note = "add `#[derive(Clone, serde::Serialize, serde::Deserialize)]` to `{Self}`; a record owns its data (no borrowed `&T` fields), so that any channel can cross a network and any state can be checkpointed"
)]
pub trait Record: Serialize + DeserializeOwned + Clone + Send + Sync + 'static {}
impl<T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static> Record for T {}

/// A key of a keyed stream: a [`Record`] that can also index a hash map.
///
/// Key groups come from a stable hash of the key's serialized bytes, not from [`Hash`], which
/// only serves the in-memory state tables.
///
/// ```
/// use weir::prelude::*;
/// fn assert_key<K: Key>() {}
/// assert_key::<String>();
/// assert_key::<(u32, String)>();
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a key: keys must be owned records that are `Hash + Eq`",
    label = "not a key",
    note = "keys are owned values: return `w.clone()`, not `&w` (or `*k` for a `Copy` key), or borrow the key with `key_by_ref(|r| &r.field)`; a struct key needs `#[derive(Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]`"
)]
pub trait Key: Record + Hash + Eq {}
impl<T: Record + Hash + Eq> Key for T {}
