//! `ValueState`: one value per key, the state handle user functions hold.

use std::cell::Cell;
use std::marker::PhantomData;

use crate::api::functions::KeyedContext;
use crate::error::StateError;
use crate::record::Key;
use crate::state::heap_keyed_state_backend::HeapKeyedStateBackend;

/// A handle to keyed value state named `name`: each access reads or writes the value of the
/// current key. Declare it as a field of the function; it registers itself with the
/// subtask's state backend on first use.
pub struct ValueState<V> {
    name: String,
    /// (backend id, state index) of the last resolution, so each access costs no lookup.
    resolved: Cell<Option<(u64, usize)>>,
    _value: PhantomData<fn() -> V>,
}

impl<V> Clone for ValueState<V> {
    /// Clones the declaration only: each subtask's copy resolves against its own backend.
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            resolved: Cell::new(None),
            _value: PhantomData,
        }
    }
}

impl<V> std::fmt::Debug for ValueState<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValueState")
            .field("name", &self.name)
            .finish()
    }
}

impl<V: Send + 'static> ValueState<V> {
    /// Declares value state `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            resolved: Cell::new(None),
            _value: PhantomData,
        }
    }

    /// The state's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn index<K: Key>(&self, backend: &mut HeapKeyedStateBackend<K>) -> Result<usize, StateError> {
        if let Some((id, index)) = self.resolved.get() {
            if id == backend.id() {
                return Ok(index);
            }
        }
        let index = backend.register_value_state::<V>(&self.name)?;
        self.resolved.set(Some((backend.id(), index)));
        Ok(index)
    }

    /// The current key's value, if it has one.
    pub fn value<K: Key>(&self, ctx: &mut KeyedContext<'_, K>) -> Result<Option<V>, StateError>
    where
        V: Clone,
    {
        Ok(self.get_mut(ctx)?.map(|v| v.clone()))
    }

    /// The current key's value, mutable in place.
    pub fn get_mut<'c, K: Key>(
        &self,
        ctx: &'c mut KeyedContext<'_, K>,
    ) -> Result<Option<&'c mut V>, StateError> {
        let index = self.index(ctx.backend)?;
        ctx.backend.value_mut(index, ctx.key, ctx.slot)
    }

    /// Sets the current key's value.
    pub fn update<K: Key>(
        &self,
        ctx: &mut KeyedContext<'_, K>,
        value: V,
    ) -> Result<(), StateError> {
        let index = self.index(ctx.backend)?;
        ctx.backend.update(index, ctx.key, ctx.slot, value)
    }

    /// Removes the current key's value.
    pub fn clear<K: Key>(&self, ctx: &mut KeyedContext<'_, K>) -> Result<(), StateError> {
        let index = self.index(ctx.backend)?;
        ctx.backend.clear::<V>(index, ctx.key, ctx.slot)
    }
}
