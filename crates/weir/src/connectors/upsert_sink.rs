//! Idempotent output for stores with primary keys: every record becomes an upsert under a
//! deterministic key, so records replayed after a recovery overwrite what they wrote before
//! with the same value. Delivery is at-least-once (upserts are flushed at every checkpoint
//! barrier and at the end of input); the results are exactly-once.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use crate::api::functions::RuntimeContext;
use crate::connectors::sink::{Sink, SinkWriter};
use crate::error::BoxError;
use crate::record::Record;

/// A store of values by primary key (a database table, a key-value store).
pub trait UpsertStore<K, V>: Send + 'static {
    /// Writes every `(key, value)`, replacing existing values of those keys.
    fn upsert(&mut self, rows: Vec<(K, V)>) -> Result<(), BoxError>;
}

/// Turns a record into its primary key and row.
pub type ToRow<T, K, V> = Arc<dyn Fn(&T) -> (K, V) + Send + Sync>;

/// A [`Sink`] writing records as upserts; each subtask gets a clone of the store.
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::{Arc, Mutex};
/// use weir::prelude::*;
/// use weir::connectors::upsert_sink::{UpsertSink, UpsertStore};
///
/// /// A table in memory, by primary key.
/// #[derive(Clone, Default)]
/// struct Table(Arc<Mutex<HashMap<u64, u64>>>);
///
/// impl UpsertStore<u64, u64> for Table {
///     fn upsert(&mut self, rows: Vec<(u64, u64)>) -> Result<(), BoxError> {
///         self.0.lock().map_err(|_| "poisoned")?.extend(rows);
///         Ok(())
///     }
/// }
///
/// let table = Table::default();
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))?;
/// env.generate(1000, |i| i % 10)
///     .key_by(|k: &u64| *k)
///     .count()
///     .sink_to(UpsertSink::new(table.clone(), |(k, n): &(u64, u64)| (*k, *n)), "counts");
/// env.execute("upserts")?;
/// // Every key holds its final count, whatever order the updates came in.
/// assert_eq!(table.0.lock().unwrap().values().sum::<u64>(), 1000);
/// # Ok::<(), WeirError>(())
/// ```
pub struct UpsertSink<T, K, V, S> {
    store: S,
    to_row: ToRow<T, K, V>,
}

impl<T, K, V, S: Clone> Clone for UpsertSink<T, K, V, S> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            to_row: self.to_row.clone(),
        }
    }
}

impl<T, K, V, S> UpsertSink<T, K, V, S> {
    /// Writes each record into `store` as `to_row(record)`.
    pub fn new(store: S, to_row: impl Fn(&T) -> (K, V) + Send + Sync + 'static) -> Self {
        Self {
            store,
            to_row: Arc::new(to_row),
        }
    }
}

/// The writer of one [`UpsertSink`] subtask: keeps the latest row per key until a flush.
pub struct UpsertWriter<T, K, V, S> {
    store: S,
    to_row: ToRow<T, K, V>,
    buffer: HashMap<K, V>,
}

impl<T, K, V, S> Sink<T> for UpsertSink<T, K, V, S>
where
    T: Record,
    K: Hash + Eq + Send + 'static,
    V: Send + 'static,
    S: UpsertStore<K, V> + Clone,
{
    type Writer = UpsertWriter<T, K, V, S>;
    /// Replays overwrite rows by key: harmless.
    fn commits_on_checkpoint_completion(&self) -> bool {
        false
    }
    fn create_writer(&self, _context: &RuntimeContext) -> Result<Self::Writer, BoxError> {
        Ok(UpsertWriter {
            store: self.store.clone(),
            to_row: self.to_row.clone(),
            buffer: HashMap::new(),
        })
    }
}

impl<T, K, V, S> SinkWriter<T> for UpsertWriter<T, K, V, S>
where
    T: Record,
    K: Hash + Eq + Send + 'static,
    V: Send + 'static,
    S: UpsertStore<K, V>,
{
    fn write(&mut self, record: T) -> Result<(), BoxError> {
        let (key, value) = (self.to_row)(&record);
        self.buffer.insert(key, value);
        Ok(())
    }

    fn flush(&mut self, _end_of_input: bool) -> Result<(), BoxError> {
        if !self.buffer.is_empty() {
            let rows: Vec<(K, V)> = self.buffer.drain().collect();
            self.store.upsert(rows)?;
        }
        Ok(())
    }
}
