//! Keyed state handles that user functions hold: value, list, map, reducing and aggregating
//! state (Flink's `ValueState`, `ListState`, `MapState`, `ReducingState`,
//! `AggregatingState`). Each is declared by name as a field of the function; every access
//! reads or writes the state of the key of the record being processed.

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::Hash;
use std::marker::PhantomData;

use crate::api::functions::{AggregateFunction, KeyedContext};
use crate::error::StateError;
use crate::record::Key;
use crate::state::backend::StateKind;
use crate::state::heap_keyed_state_backend::KeyGroupSlot;
use crate::state::keyed_state_store::KeyedStateStore;
use crate::state::keyed_state_table::{StateTable, StateValue};
use crate::state::serialized_keyed_state::SerializedKeyedState;
use crate::state::ttl::StateTtlConfig;

/// Name of a state plus the index it resolved to in the last backend it was used with.
struct HandleCore {
    name: String,
    ttl: Option<StateTtlConfig>,
    /// (backend id, state index).
    resolved: Cell<Option<(u64, usize)>>,
}

impl HandleCore {
    fn new(name: String) -> Self {
        Self {
            name,
            ttl: None,
            resolved: Cell::new(None),
        }
    }

    /// A copy that resolves afresh: each subtask's clone binds to its own backend.
    fn fresh(&self) -> Self {
        Self {
            ttl: self.ttl.clone(),
            ..Self::new(self.name.clone())
        }
    }

    /// The index of this state in `store`, registering it (as `kind`, with per-key value
    /// `S`) the first time the handle meets the store.
    #[inline]
    fn index<K: Key, S: StateValue>(
        &self,
        store: &mut KeyedStateStore<K>,
        kind: StateKind,
    ) -> Result<usize, StateError> {
        match self.resolved.get() {
            Some((id, index)) if id == store.id() => Ok(index),
            _ => {
                let index = store.register::<S>(&self.name, kind, self.ttl.clone())?;
                self.resolved.set(Some((store.id(), index)));
                Ok(index)
            }
        }
    }

    /// The index of this map state in `store`, registering it the first time.
    #[inline]
    fn map_index<K: Key, UK, UV>(&self, store: &mut KeyedStateStore<K>) -> Result<usize, StateError>
    where
        UK: StateValue + Hash + Eq,
        UV: StateValue,
    {
        match self.resolved.get() {
            Some((id, index)) if id == store.id() => Ok(index),
            _ => {
                let index = store.register_map::<UK, UV>(&self.name, self.ttl.clone())?;
                self.resolved.set(Some((store.id(), index)));
                Ok(index)
            }
        }
    }
}

/// The current key's state, as the store keeps it: on the heap, the typed table and the
/// key group's index in it (the fast path, accessed in place); otherwise the byte-level store
/// and the key's slot.
enum Access<'a, K, S> {
    Heap(&'a mut StateTable<K, S>, usize),
    Serialized(&'a mut SerializedKeyedState<K>, KeyGroupSlot),
}

/// The state `index` (per-key value `S`) of the current key of `ctx`, and that key.
#[inline]
fn access<'a, K: Key, S: StateValue>(
    index: usize,
    ctx: &'a mut KeyedContext<'_, K>,
) -> Result<(Access<'a, K, S>, &'a K), StateError> {
    let (key, slot) = (ctx.key, ctx.slot);
    Ok(match ctx.backend {
        KeyedStateStore::Heap(h) => (Access::Heap(h.table_mut::<S>(index)?, slot.index), key),
        KeyedStateStore::Serialized(s) => (Access::Serialized(s, slot), key),
    })
}

/// A keyed state handle: a state declared by name whose keys can be visited, for instance
/// at the end of the input with
/// [`KeyedEndContext::for_each_key`](crate::api::functions::KeyedEndContext::for_each_key).
pub trait KeyedState {
    /// The state's name.
    fn state_name(&self) -> &str;
    /// Every key that has a value in this state in `store`, with its key group slot.
    fn keys<K: Key>(
        &self,
        store: &mut KeyedStateStore<K>,
    ) -> Result<Vec<(K, KeyGroupSlot)>, StateError>;
}

/// Implements [`KeyedState`] for a handle whose per-key value type is `$stored`.
macro_rules! keyed_state_handle {
    ($name:ident < $($p:ident),* > stores $stored:ty as $kind:ident where $($bounds:tt)*) => {
        impl<$($p),*> KeyedState for $name<$($p),*> where $($bounds)* {
            fn state_name(&self) -> &str {
                &self.core.name
            }
            fn keys<K: Key>(
                &self,
                store: &mut KeyedStateStore<K>,
            ) -> Result<Vec<(K, KeyGroupSlot)>, StateError> {
                let index = self.core.index::<K, $stored>(store, StateKind::$kind)?;
                store.keys::<$stored>(index)
            }
        }
    };
}

macro_rules! handle_boilerplate {
    ($name:ident < $($p:ident),* >) => {
        impl<$($p),*> $name<$($p),*> {
            /// Lets the state's entries expire (Flink's `enableTimeToLive`): an entry not
            /// written (or read, if so configured) for the configured time is never returned
            /// again, is left out of snapshots, and is removed.
            pub fn with_ttl(mut self, ttl: StateTtlConfig) -> Self {
                self.core.ttl = Some(ttl);
                self
            }
        }

        impl<$($p),*> std::fmt::Debug for $name<$($p),*> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name)).field("name", &self.core.name).finish()
            }
        }
    };
}

/// One value per key.
///
/// ```
/// use weir::prelude::*;
///
/// /// Emits each value with the one before it of the same key.
/// #[derive(Clone)]
/// struct Previous {
///     last: ValueState<u64>,
/// }
///
/// impl KeyedProcessFunction<u64, u64, (Option<u64>, u64)> for Previous {
///     fn process_element(&mut self, value: u64, ctx: &mut KeyedContext<'_, u64>, out: &mut Collector<'_, (Option<u64>, u64)>) -> Result<(), BoxError> {
///         out.collect((self.last.value(ctx)?, value));
///         Ok(self.last.update(ctx, value)?)
///     }
/// }
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// let out = env.generate(4, |i| i).key_by(|v: &u64| v % 2).process(Previous { last: ValueState::new("last") }).collect();
/// env.execute("previous")?;
/// assert_eq!(out.take(), vec![(None, 0), (None, 1), (Some(0), 2), (Some(1), 3)]);
/// # Ok::<(), WeirError>(())
/// ```
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
        let index = self.core.index::<K, V>(ctx.backend, StateKind::Value)?;
        match access::<K, V>(index, ctx)? {
            (Access::Heap(t, g), k) => Ok(t.get_touch(g, k).cloned()),
            (Access::Serialized(s, slot), k) => s.get::<V>(index, StateKind::Value, k, slot),
        }
    }
    /// Applies `f` to the current key's value (`None` if it has none) and returns what `f`
    /// returns: in place on the heap backend, with no copy; read, then written back, on a
    /// byte-level backend. A Rust-only variant of `value` + `update` for values that are
    /// costly to clone.
    pub fn update_with<K: Key, R>(
        &self,
        ctx: &mut KeyedContext<'_, K>,
        f: impl FnOnce(Option<&mut V>) -> R,
    ) -> Result<R, StateError> {
        let index = self.core.index::<K, V>(ctx.backend, StateKind::Value)?;
        ctx.backend.modify(index, ctx.key, ctx.slot, f)
    }
    /// Sets the current key's value.
    pub fn update<K: Key>(
        &self,
        ctx: &mut KeyedContext<'_, K>,
        value: V,
    ) -> Result<(), StateError> {
        let index = self.core.index::<K, V>(ctx.backend, StateKind::Value)?;
        ctx.backend.put(index, ctx.key, ctx.slot, value)
    }
    /// Removes the current key's value.
    pub fn clear<K: Key>(&self, ctx: &mut KeyedContext<'_, K>) -> Result<(), StateError> {
        let index = self.core.index::<K, V>(ctx.backend, StateKind::Value)?;
        ctx.backend.delete::<V>(index, ctx.key, ctx.slot)
    }
}

/// A list of values per key.
///
/// ```
/// use weir::prelude::*;
///
/// /// Emits a key's values in groups of three.
/// #[derive(Clone)]
/// struct Triples {
///     pending: ListState<u64>,
/// }
///
/// impl KeyedProcessFunction<u64, u64, Vec<u64>> for Triples {
///     fn process_element(&mut self, value: u64, ctx: &mut KeyedContext<'_, u64>, out: &mut Collector<'_, Vec<u64>>) -> Result<(), BoxError> {
///         self.pending.add(ctx, value)?;
///         let pending = self.pending.get(ctx)?;
///         if pending.len() == 3 {
///             out.collect(pending);
///             self.pending.clear(ctx)?;
///         }
///         Ok(())
///     }
/// }
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// let out = env.generate(7, |i| i).key_by(|_: &u64| 0u64).process(Triples { pending: ListState::new("pending") }).collect();
/// env.execute("triples")?;
/// assert_eq!(out.take(), vec![vec![0, 1, 2], vec![3, 4, 5]]);
/// # Ok::<(), WeirError>(())
/// ```
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
        let index = self.core.index::<K, Vec<V>>(ctx.backend, StateKind::List)?;
        match access::<K, Vec<V>>(index, ctx)? {
            (Access::Heap(t, g), k) => Ok(t.get_touch(g, k).cloned().unwrap_or_default()),
            (Access::Serialized(s, slot), k) => Ok(s
                .get::<Vec<V>>(index, StateKind::List, k, slot)?
                .unwrap_or_default()),
        }
    }
    /// Appends a value to the current key's list (without reading the list, on a
    /// byte-level backend).
    pub fn add<K: Key>(&self, ctx: &mut KeyedContext<'_, K>, value: V) -> Result<(), StateError> {
        let index = self.core.index::<K, Vec<V>>(ctx.backend, StateKind::List)?;
        match access::<K, Vec<V>>(index, ctx)? {
            (Access::Heap(t, g), k) => {
                match t.get_mut(g, k) {
                    Some(list) => list.push(value),
                    None => t.insert(g, k, vec![value]),
                }
                Ok(())
            }
            (Access::Serialized(s, slot), k) => s.append(index, k, slot, value),
        }
    }
    /// Replaces the current key's list.
    pub fn update<K: Key>(
        &self,
        ctx: &mut KeyedContext<'_, K>,
        values: Vec<V>,
    ) -> Result<(), StateError> {
        let index = self.core.index::<K, Vec<V>>(ctx.backend, StateKind::List)?;
        if values.is_empty() {
            return ctx.backend.delete::<Vec<V>>(index, ctx.key, ctx.slot);
        }
        match access::<K, Vec<V>>(index, ctx)? {
            (Access::Heap(t, g), k) => {
                t.insert(g, k, values);
                Ok(())
            }
            (Access::Serialized(s, slot), k) => s.put(index, StateKind::List, k, slot, &values),
        }
    }
    /// Removes the current key's list.
    pub fn clear<K: Key>(&self, ctx: &mut KeyedContext<'_, K>) -> Result<(), StateError> {
        let index = self.core.index::<K, Vec<V>>(ctx.backend, StateKind::List)?;
        ctx.backend.delete::<Vec<V>>(index, ctx.key, ctx.slot)
    }
}

/// A map per key.
///
/// ```
/// use weir::prelude::*;
///
/// /// Per user, counts visits per page and emits the page's new count.
/// #[derive(Clone)]
/// struct Visits {
///     per_page: MapState<String, u64>,
/// }
///
/// impl KeyedProcessFunction<String, (String, String), (String, String, u64)> for Visits {
///     fn process_element(&mut self, (user, page): (String, String), ctx: &mut KeyedContext<'_, String>, out: &mut Collector<'_, (String, String, u64)>) -> Result<(), BoxError> {
///         let n = self.per_page.get(ctx, &page)?.unwrap_or(0) + 1;
///         self.per_page.put(ctx, page.clone(), n)?;
///         out.collect((user, page, n));
///         Ok(())
///     }
/// }
///
/// let clicks = vec![("ann", "/a"), ("ann", "/b"), ("ann", "/a")]
///     .into_iter()
///     .map(|(u, p)| (u.to_string(), p.to_string()))
///     .collect();
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// let out = env
///     .from_collection(clicks)
///     .key_by(|(user, _): &(String, String)| user.clone())
///     .process(Visits { per_page: MapState::new("visits") })
///     .collect();
/// env.execute("visits")?;
/// assert_eq!(out.take().last().map(|v| v.2), Some(2));
/// # Ok::<(), WeirError>(())
/// ```
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
        let index = self.core.map_index::<K, UK, UV>(ctx.backend)?;
        match access::<K, HashMap<UK, UV>>(index, ctx)? {
            (Access::Heap(t, g), k) => Ok(t.get_touch(g, k).and_then(|m| m.get(user_key).cloned())),
            (Access::Serialized(s, slot), k) => s.map_get::<UK, UV>(index, k, slot, user_key),
        }
    }
    /// Puts `user_value` under `user_key` in the current key's map.
    pub fn put<K: Key>(
        &self,
        ctx: &mut KeyedContext<'_, K>,
        user_key: UK,
        user_value: UV,
    ) -> Result<(), StateError> {
        let index = self.core.map_index::<K, UK, UV>(ctx.backend)?;
        match access::<K, HashMap<UK, UV>>(index, ctx)? {
            (Access::Heap(t, g), k) => {
                match t.get_mut(g, k) {
                    Some(map) => {
                        map.insert(user_key, user_value);
                    }
                    None => t.insert(g, k, HashMap::from([(user_key, user_value)])),
                }
                Ok(())
            }
            (Access::Serialized(s, slot), k) => {
                s.map_put::<UK, UV>(index, k, slot, &user_key, &user_value)
            }
        }
    }
    /// Removes `user_key` from the current key's map.
    pub fn remove<K: Key>(
        &self,
        ctx: &mut KeyedContext<'_, K>,
        user_key: &UK,
    ) -> Result<Option<UV>, StateError> {
        let index = self.core.map_index::<K, UK, UV>(ctx.backend)?;
        match access::<K, HashMap<UK, UV>>(index, ctx)? {
            (Access::Heap(t, g), k) => Ok({
                let removed = t.get_mut(g, k).and_then(|m| m.remove(user_key));
                if t.get(g, k).is_some_and(HashMap::is_empty) {
                    t.remove(g, k);
                }
                removed
            }),
            (Access::Serialized(s, slot), k) => s.map_remove::<UK, UV>(index, k, slot, user_key),
        }
    }
    /// Whether the current key's map has `user_key`.
    pub fn contains<K: Key>(
        &self,
        ctx: &mut KeyedContext<'_, K>,
        user_key: &UK,
    ) -> Result<bool, StateError> {
        let index = self.core.map_index::<K, UK, UV>(ctx.backend)?;
        match access::<K, HashMap<UK, UV>>(index, ctx)? {
            (Access::Heap(t, g), k) => {
                Ok(t.get_touch(g, k).is_some_and(|m| m.contains_key(user_key)))
            }
            (Access::Serialized(s, slot), k) => {
                Ok(s.map_get::<UK, UV>(index, k, slot, user_key)?.is_some())
            }
        }
    }
    /// All entries of the current key's map.
    pub fn entries<K: Key>(
        &self,
        ctx: &mut KeyedContext<'_, K>,
    ) -> Result<Vec<(UK, UV)>, StateError> {
        let index = self.core.map_index::<K, UK, UV>(ctx.backend)?;
        match access::<K, HashMap<UK, UV>>(index, ctx)? {
            (Access::Heap(t, g), k) => Ok({
                t.get_touch(g, k)
                    .map(|m| m.iter().map(|(a, b)| (a.clone(), b.clone())).collect())
                    .unwrap_or_default()
            }),
            (Access::Serialized(s, slot), k) => s.map_entries::<UK, UV>(index, k, slot),
        }
    }
    /// Removes the current key's map.
    pub fn clear<K: Key>(&self, ctx: &mut KeyedContext<'_, K>) -> Result<(), StateError> {
        let index = self.core.map_index::<K, UK, UV>(ctx.backend)?;
        ctx.backend
            .delete::<HashMap<UK, UV>>(index, ctx.key, ctx.slot)
    }
}

/// A value per key that folds each added value in with a reduce function.
///
/// ```
/// use weir::prelude::*;
///
/// fn add(a: u64, b: u64) -> u64 {
///     a + b
/// }
///
/// /// Emits each key's running total.
/// #[derive(Clone)]
/// struct Total {
///     sum: ReducingState<u64, fn(u64, u64) -> u64>,
/// }
///
/// impl KeyedProcessFunction<u64, u64, u64> for Total {
///     fn process_element(&mut self, value: u64, ctx: &mut KeyedContext<'_, u64>, out: &mut Collector<'_, u64>) -> Result<(), BoxError> {
///         self.sum.add(ctx, value)?;
///         out.collect(self.sum.get(ctx)?.unwrap_or(0));
///         Ok(())
///     }
/// }
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// let out = env
///     .generate(4, |i| i)
///     .key_by(|_: &u64| 0u64)
///     .process(Total { sum: ReducingState::new("sum", add as fn(u64, u64) -> u64) })
///     .collect();
/// env.execute("totals")?;
/// assert_eq!(out.take(), vec![0, 1, 3, 6]);
/// # Ok::<(), WeirError>(())
/// ```
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
        let index = self.core.index::<K, V>(ctx.backend, StateKind::Value)?;
        match access::<K, V>(index, ctx)? {
            (Access::Heap(t, g), k) => Ok(t.get_touch(g, k).cloned()),
            (Access::Serialized(s, slot), k) => s.get::<V>(index, StateKind::Value, k, slot),
        }
    }
    /// Folds `value` into the current key's value.
    pub fn add<K: Key>(&self, ctx: &mut KeyedContext<'_, K>, value: V) -> Result<(), StateError> {
        let index = self.core.index::<K, V>(ctx.backend, StateKind::Value)?;
        let reduce = &self.reduce;
        match access::<K, V>(index, ctx)? {
            (Access::Heap(t, g), k) => {
                match t.get_mut(g, k) {
                    Some(acc) => *acc = reduce(acc.clone(), value),
                    None => t.insert(g, k, value),
                }
                Ok(())
            }
            (Access::Serialized(s, slot), k) => {
                let folded = match s.get::<V>(index, StateKind::Value, k, slot)? {
                    Some(acc) => reduce(acc, value),
                    None => value,
                };
                s.put(index, StateKind::Value, k, slot, &folded)
            }
        }
    }
    /// Removes the current key's value.
    pub fn clear<K: Key>(&self, ctx: &mut KeyedContext<'_, K>) -> Result<(), StateError> {
        let index = self.core.index::<K, V>(ctx.backend, StateKind::Value)?;
        ctx.backend.delete::<V>(index, ctx.key, ctx.slot)
    }
}

/// A value per key that accumulates added inputs with an [`AggregateFunction`].
///
/// ```
/// use weir::prelude::*;
///
/// /// The mean of the values added.
/// #[derive(Clone)]
/// struct Mean;
///
/// impl AggregateFunction<u64, (u64, u64), f64> for Mean {
///     fn create_accumulator(&self) -> (u64, u64) { (0, 0) }
///     fn add(&self, value: u64, acc: &mut (u64, u64)) { acc.0 += value; acc.1 += 1; }
///     fn get_result(&self, acc: &(u64, u64)) -> f64 { acc.0 as f64 / acc.1 as f64 }
///     fn merge(&self, a: (u64, u64), b: (u64, u64)) -> (u64, u64) { (a.0 + b.0, a.1 + b.1) }
/// }
///
/// /// Emits each key's running mean.
/// #[derive(Clone)]
/// struct RunningMean {
///     mean: AggregatingState<u64, (u64, u64), f64, Mean>,
/// }
///
/// impl KeyedProcessFunction<u64, u64, f64> for RunningMean {
///     fn process_element(&mut self, value: u64, ctx: &mut KeyedContext<'_, u64>, out: &mut Collector<'_, f64>) -> Result<(), BoxError> {
///         self.mean.add(ctx, value)?;
///         out.collect(self.mean.get(ctx)?.unwrap_or(0.0));
///         Ok(())
///     }
/// }
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// let out = env
///     .generate(3, |i| i * 2)
///     .key_by(|_: &u64| 0u64)
///     .process(RunningMean { mean: AggregatingState::new("mean", Mean) })
///     .collect();
/// env.execute("means")?;
/// assert_eq!(out.take(), vec![0.0, 1.0, 2.0]);
/// # Ok::<(), WeirError>(())
/// ```
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
        let index = self.core.index::<K, ACC>(ctx.backend, StateKind::Value)?;
        let f = &self.function;
        match access::<K, ACC>(index, ctx)? {
            (Access::Heap(t, g), k) => Ok(t.get_touch(g, k).map(|acc| f.get_result(acc))),
            (Access::Serialized(s, slot), k) => Ok(s
                .get::<ACC>(index, StateKind::Value, k, slot)?
                .map(|acc| f.get_result(&acc))),
        }
    }
    /// Adds `value` to the current key's accumulator.
    pub fn add<K: Key>(&self, ctx: &mut KeyedContext<'_, K>, value: IN) -> Result<(), StateError> {
        let index = self.core.index::<K, ACC>(ctx.backend, StateKind::Value)?;
        let f = &self.function;
        match access::<K, ACC>(index, ctx)? {
            (Access::Heap(t, g), k) => {
                match t.get_mut(g, k) {
                    Some(acc) => f.add(value, acc),
                    None => {
                        let mut acc = f.create_accumulator();
                        f.add(value, &mut acc);
                        t.insert(g, k, acc);
                    }
                }
                Ok(())
            }
            (Access::Serialized(s, slot), k) => {
                let mut acc = s
                    .get::<ACC>(index, StateKind::Value, k, slot)?
                    .unwrap_or_else(|| f.create_accumulator());
                f.add(value, &mut acc);
                s.put(index, StateKind::Value, k, slot, &acc)
            }
        }
    }
    /// Removes the current key's accumulator.
    pub fn clear<K: Key>(&self, ctx: &mut KeyedContext<'_, K>) -> Result<(), StateError> {
        let index = self.core.index::<K, ACC>(ctx.backend, StateKind::Value)?;
        ctx.backend.delete::<ACC>(index, ctx.key, ctx.slot)
    }
}

keyed_state_handle!(ValueState<V> stores V as Value where V: StateValue);
keyed_state_handle!(ListState<V> stores Vec<V> as List where V: StateValue);
keyed_state_handle!(ReducingState<V, F> stores V as Value where V: StateValue);
keyed_state_handle!(AggregatingState<IN, ACC, OUT, A> stores ACC as Value where ACC: StateValue);

impl<UK: StateValue + Hash + Eq, UV: StateValue> KeyedState for MapState<UK, UV> {
    fn state_name(&self) -> &str {
        &self.core.name
    }
    fn keys<K: Key>(
        &self,
        store: &mut KeyedStateStore<K>,
    ) -> Result<Vec<(K, KeyGroupSlot)>, StateError> {
        let index = self.core.map_index::<K, UK, UV>(store)?;
        store.keys::<HashMap<UK, UV>>(index)
    }
}
