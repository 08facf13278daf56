//! Keyed state handles that user functions hold: value, list, map, reducing and aggregating
//! state (Flink's `ValueState`, `ListState`, `MapState`, `ReducingState`,
//! `AggregatingState`). Each is declared by name as a field of the function; every access
//! reads or writes the state of the key of the record being processed.

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::Hash;
use std::marker::PhantomData;

use crate::api::functions::KeyedContext;
use crate::error::StateError;
use crate::record::Key;
use crate::state::heap_keyed_state_backend::HeapKeyedStateBackend;
use crate::state::keyed_state_table::{StateTable, StateValue};

/// Name of a state plus the index it resolved to in the last backend it was used with.
struct HandleCore {
    name: String,
    /// (backend id, state index).
    resolved: Cell<Option<(u64, usize)>>,
}

impl HandleCore {
    fn new(name: String) -> Self {
        Self {
            name,
            resolved: Cell::new(None),
        }
    }

    /// A copy that resolves afresh: each subtask's clone binds to its own backend.
    fn fresh(&self) -> Self {
        Self::new(self.name.clone())
    }

    fn table<'c, K: Key, S: StateValue>(
        &self,
        backend: &'c mut HeapKeyedStateBackend<K>,
    ) -> Result<&'c mut StateTable<K, S>, StateError> {
        let index = match self.resolved.get() {
            Some((id, index)) if id == backend.id() => index,
            _ => {
                let index = backend.register::<S>(&self.name)?;
                self.resolved.set(Some((backend.id(), index)));
                index
            }
        };
        backend.table_mut::<S>(index)
    }
}

/// Runs `f` on the current key's slot of the state table behind `core`.
fn with_table<K: Key, S: StateValue, R>(
    core: &HandleCore,
    ctx: &mut KeyedContext<'_, K>,
    f: impl FnOnce(&mut StateTable<K, S>, usize, &K) -> R,
) -> Result<R, StateError> {
    let (key, group) = (ctx.key, ctx.slot.index);
    let table = core.table::<K, S>(ctx.backend)?;
    Ok(f(table, group, key))
}

macro_rules! handle_boilerplate {
    ($name:ident < $($p:ident),* >) => {
        impl<$($p),*> std::fmt::Debug for $name<$($p),*> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name)).field("name", &self.core.name).finish()
            }
        }
    };
}

/// One value per key.
pub struct ValueState<V> {
    core: HandleCore,
    _value: PhantomData<fn() -> V>,
}
handle_boilerplate!(ValueState<V>);

impl<V> Clone for ValueState<V> {
    fn clone(&self) -> Self {
        Self {
            core: self.core.fresh(),
            _value: PhantomData,
        }
    }
}

impl<V: StateValue> ValueState<V> {
    /// Declares value state `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            core: HandleCore::new(name.into()),
            _value: PhantomData,
        }
    }
    /// The state's name.
    pub fn name(&self) -> &str {
        &self.core.name
    }
    /// The current key's value, if it has one.
    pub fn value<K: Key>(&self, ctx: &mut KeyedContext<'_, K>) -> Result<Option<V>, StateError> {
        with_table::<K, V, _>(&self.core, ctx, |t, g, k| t.get(g, k).cloned())
    }
    /// The current key's value, mutable in place.
    pub fn get_mut<'c, K: Key>(
        &self,
        ctx: &'c mut KeyedContext<'_, K>,
    ) -> Result<Option<&'c mut V>, StateError> {
        let (key, group) = (ctx.key, ctx.slot.index);
        Ok(self.core.table::<K, V>(ctx.backend)?.get_mut(group, key))
    }
    /// Sets the current key's value.
    pub fn update<K: Key>(
        &self,
        ctx: &mut KeyedContext<'_, K>,
        value: V,
    ) -> Result<(), StateError> {
        with_table::<K, V, _>(&self.core, ctx, |t, g, k| t.insert(g, k, value))
    }
    /// Removes the current key's value.
    pub fn clear<K: Key>(&self, ctx: &mut KeyedContext<'_, K>) -> Result<(), StateError> {
        with_table::<K, V, _>(&self.core, ctx, |t, g, k| {
            t.remove(g, k);
        })
    }
}

/// A list of values per key.
pub struct ListState<V> {
    core: HandleCore,
    _value: PhantomData<fn() -> V>,
}
handle_boilerplate!(ListState<V>);

impl<V> Clone for ListState<V> {
    fn clone(&self) -> Self {
        Self {
            core: self.core.fresh(),
            _value: PhantomData,
        }
    }
}

impl<V: StateValue> ListState<V> {
    /// Declares list state `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            core: HandleCore::new(name.into()),
            _value: PhantomData,
        }
    }
    /// The current key's list (empty if none).
    pub fn get<K: Key>(&self, ctx: &mut KeyedContext<'_, K>) -> Result<Vec<V>, StateError> {
        with_table::<K, Vec<V>, _>(&self.core, ctx, |t, g, k| {
            t.get(g, k).cloned().unwrap_or_default()
        })
    }
    /// Appends a value to the current key's list.
    pub fn add<K: Key>(&self, ctx: &mut KeyedContext<'_, K>, value: V) -> Result<(), StateError> {
        with_table::<K, Vec<V>, _>(&self.core, ctx, |t, g, k| match t.get_mut(g, k) {
            Some(list) => list.push(value),
            None => t.insert(g, k, vec![value]),
        })
    }
    /// Replaces the current key's list.
    pub fn update<K: Key>(
        &self,
        ctx: &mut KeyedContext<'_, K>,
        values: Vec<V>,
    ) -> Result<(), StateError> {
        with_table::<K, Vec<V>, _>(&self.core, ctx, |t, g, k| {
            if values.is_empty() {
                t.remove(g, k);
            } else {
                t.insert(g, k, values);
            }
        })
    }
    /// Removes the current key's list.
    pub fn clear<K: Key>(&self, ctx: &mut KeyedContext<'_, K>) -> Result<(), StateError> {
        with_table::<K, Vec<V>, _>(&self.core, ctx, |t, g, k| {
            t.remove(g, k);
        })
    }
}

/// A map per key.
pub struct MapState<UK, UV> {
    core: HandleCore,
    _types: PhantomData<fn() -> (UK, UV)>,
}
handle_boilerplate!(MapState<UK, UV>);

impl<UK, UV> Clone for MapState<UK, UV> {
    fn clone(&self) -> Self {
        Self {
            core: self.core.fresh(),
            _types: PhantomData,
        }
    }
}

impl<UK: StateValue + Hash + Eq, UV: StateValue> MapState<UK, UV> {
    /// Declares map state `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            core: HandleCore::new(name.into()),
            _types: PhantomData,
        }
    }
    /// The value under `user_key` in the current key's map.
    pub fn get<K: Key>(
        &self,
        ctx: &mut KeyedContext<'_, K>,
        user_key: &UK,
    ) -> Result<Option<UV>, StateError> {
        with_table::<K, HashMap<UK, UV>, _>(&self.core, ctx, |t, g, k| {
            t.get(g, k).and_then(|m| m.get(user_key).cloned())
        })
    }
    /// Puts `user_value` under `user_key` in the current key's map.
    pub fn put<K: Key>(
        &self,
        ctx: &mut KeyedContext<'_, K>,
        user_key: UK,
        user_value: UV,
    ) -> Result<(), StateError> {
        with_table::<K, HashMap<UK, UV>, _>(&self.core, ctx, |t, g, k| match t.get_mut(g, k) {
            Some(map) => {
                map.insert(user_key, user_value);
            }
            None => t.insert(g, k, HashMap::from([(user_key, user_value)])),
        })
    }
    /// Removes `user_key` from the current key's map.
    pub fn remove<K: Key>(
        &self,
        ctx: &mut KeyedContext<'_, K>,
        user_key: &UK,
    ) -> Result<Option<UV>, StateError> {
        with_table::<K, HashMap<UK, UV>, _>(&self.core, ctx, |t, g, k| {
            let removed = t.get_mut(g, k).and_then(|m| m.remove(user_key));
            if t.get(g, k).is_some_and(HashMap::is_empty) {
                t.remove(g, k);
            }
            removed
        })
    }
    /// Whether the current key's map has `user_key`.
    pub fn contains<K: Key>(
        &self,
        ctx: &mut KeyedContext<'_, K>,
        user_key: &UK,
    ) -> Result<bool, StateError> {
        with_table::<K, HashMap<UK, UV>, _>(&self.core, ctx, |t, g, k| {
            t.get(g, k).is_some_and(|m| m.contains_key(user_key))
        })
    }
    /// All entries of the current key's map.
    pub fn entries<K: Key>(
        &self,
        ctx: &mut KeyedContext<'_, K>,
    ) -> Result<Vec<(UK, UV)>, StateError> {
        with_table::<K, HashMap<UK, UV>, _>(&self.core, ctx, |t, g, k| {
            t.get(g, k)
                .map(|m| m.iter().map(|(a, b)| (a.clone(), b.clone())).collect())
                .unwrap_or_default()
        })
    }
    /// Removes the current key's map.
    pub fn clear<K: Key>(&self, ctx: &mut KeyedContext<'_, K>) -> Result<(), StateError> {
        with_table::<K, HashMap<UK, UV>, _>(&self.core, ctx, |t, g, k| {
            t.remove(g, k);
        })
    }
}

/// A value per key that folds each added value in with a reduce function.
pub struct ReducingState<V, F> {
    core: HandleCore,
    reduce: F,
    _value: PhantomData<fn() -> V>,
}
handle_boilerplate!(ReducingState<V, F>);

impl<V, F: Clone> Clone for ReducingState<V, F> {
    fn clone(&self) -> Self {
        Self {
            core: self.core.fresh(),
            reduce: self.reduce.clone(),
            _value: PhantomData,
        }
    }
}

impl<V: StateValue, F: Fn(V, V) -> V> ReducingState<V, F> {
    /// Declares reducing state `name` folding with `reduce`.
    pub fn new(name: impl Into<String>, reduce: F) -> Self {
        Self {
            core: HandleCore::new(name.into()),
            reduce,
            _value: PhantomData,
        }
    }
    /// The current key's reduced value.
    pub fn get<K: Key>(&self, ctx: &mut KeyedContext<'_, K>) -> Result<Option<V>, StateError> {
        with_table::<K, V, _>(&self.core, ctx, |t, g, k| t.get(g, k).cloned())
    }
    /// Folds `value` into the current key's value.
    pub fn add<K: Key>(&self, ctx: &mut KeyedContext<'_, K>, value: V) -> Result<(), StateError> {
        let reduce = &self.reduce;
        with_table::<K, V, _>(&self.core, ctx, |t, g, k| match t.get_mut(g, k) {
            Some(acc) => *acc = reduce(acc.clone(), value),
            None => t.insert(g, k, value),
        })
    }
    /// Removes the current key's value.
    pub fn clear<K: Key>(&self, ctx: &mut KeyedContext<'_, K>) -> Result<(), StateError> {
        with_table::<K, V, _>(&self.core, ctx, |t, g, k| {
            t.remove(g, k);
        })
    }
}

/// How an [`AggregatingState`] accumulates (Flink's `AggregateFunction`).
pub trait AggregateFunction<IN, ACC, OUT> {
    /// A new, empty accumulator.
    fn create_accumulator(&self) -> ACC;
    /// Adds `value` to `accumulator`.
    fn add(&self, value: IN, accumulator: &mut ACC);
    /// The result an accumulator stands for.
    fn get_result(&self, accumulator: &ACC) -> OUT;
}

/// A value per key that accumulates added inputs with an [`AggregateFunction`].
pub struct AggregatingState<IN, ACC, OUT, A> {
    core: HandleCore,
    function: A,
    _types: PhantomData<fn(IN) -> (ACC, OUT)>,
}
handle_boilerplate!(AggregatingState<IN, ACC, OUT, A>);

impl<IN, ACC, OUT, A: Clone> Clone for AggregatingState<IN, ACC, OUT, A> {
    fn clone(&self) -> Self {
        Self {
            core: self.core.fresh(),
            function: self.function.clone(),
            _types: PhantomData,
        }
    }
}

impl<IN, ACC: StateValue, OUT, A: AggregateFunction<IN, ACC, OUT>>
    AggregatingState<IN, ACC, OUT, A>
{
    /// Declares aggregating state `name` with `function`.
    pub fn new(name: impl Into<String>, function: A) -> Self {
        Self {
            core: HandleCore::new(name.into()),
            function,
            _types: PhantomData,
        }
    }
    /// The current key's aggregate.
    pub fn get<K: Key>(&self, ctx: &mut KeyedContext<'_, K>) -> Result<Option<OUT>, StateError> {
        let f = &self.function;
        with_table::<K, ACC, _>(&self.core, ctx, |t, g, k| {
            t.get(g, k).map(|acc| f.get_result(acc))
        })
    }
    /// Adds `value` to the current key's accumulator.
    pub fn add<K: Key>(&self, ctx: &mut KeyedContext<'_, K>, value: IN) -> Result<(), StateError> {
        let f = &self.function;
        with_table::<K, ACC, _>(&self.core, ctx, |t, g, k| match t.get_mut(g, k) {
            Some(acc) => f.add(value, acc),
            None => {
                let mut acc = f.create_accumulator();
                f.add(value, &mut acc);
                t.insert(g, k, acc);
            }
        })
    }
    /// Removes the current key's accumulator.
    pub fn clear<K: Key>(&self, ctx: &mut KeyedContext<'_, K>) -> Result<(), StateError> {
        with_table::<K, ACC, _>(&self.core, ctx, |t, g, k| {
            t.remove(g, k);
        })
    }
}
