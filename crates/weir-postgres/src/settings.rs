//! Building a PostgreSQL sink: where, which table and columns, and how many rows per
//! statement; then either [`PostgresSinkBuilder::upsert`] (at-least-once delivery with
//! idempotent results) or [`PostgresSinkBuilder::exactly_once`] (two-phase commit).

use std::marker::PhantomData;
use std::sync::Arc;

use serde::Serialize;
use weir::connectors::two_phase_commit::TwoPhaseCommit;

use crate::connection::PostgresConnection;
use crate::error::PostgresError;
use crate::exactly_once_sink::PostgresTransactionalSink;
use crate::statements::TableSpec;
use crate::upsert_sink::PostgresUpsertSink;

/// Called with a prepared transaction's global id right before `COMMIT PREPARED` (or
/// `PREPARE TRANSACTION`).
pub type BeforeCommitHook = Arc<dyn Fn(&str) + Send + Sync>;

/// What every writer of a sink shares.
pub(crate) struct SinkSettings {
    pub connection: PostgresConnection,
    pub spec: TableSpec,
    pub statement: String,
    pub batch_size: usize,
    pub application_name: String,
    pub before_commit: Option<BeforeCommitHook>,
    pub before_prepare: Option<BeforeCommitHook>,
}

/// Entry point: `PostgresSink::builder(url, table)`.
pub struct PostgresSink;

impl PostgresSink {
    /// A sink writing records of type `T` (serialized with serde, one field per column) to
    /// `table` of the database at `url`.
    pub fn builder<T: Serialize>(url: &str, table: &str) -> PostgresSinkBuilder<T> {
        PostgresSinkBuilder {
            url: url.to_string(),
            spec: TableSpec {
                table: table.to_string(),
                columns: Vec::new(),
                key_columns: Vec::new(),
            },
            batch_size: 1000,
            application_name: "weir-sink".into(),
            before_commit: None,
            before_prepare: None,
            _records: PhantomData,
        }
    }
}

/// Configures a PostgreSQL sink.
pub struct PostgresSinkBuilder<T> {
    url: String,
    spec: TableSpec,
    batch_size: usize,
    application_name: String,
    before_commit: Option<BeforeCommitHook>,
    before_prepare: Option<BeforeCommitHook>,
    _records: PhantomData<fn(T)>,
}

impl<T: Serialize + Send + 'static> PostgresSinkBuilder<T> {
    /// The columns written: the record's fields of the same names.
    pub fn columns<I: IntoIterator<Item = S>, S: Into<String>>(mut self, columns: I) -> Self {
        self.spec.columns = columns.into_iter().map(Into::into).collect();
        self
    }
    /// The primary-key (or unique) columns: rows with an existing key update it.
    pub fn key_columns<I: IntoIterator<Item = S>, S: Into<String>>(mut self, keys: I) -> Self {
        self.spec.key_columns = keys.into_iter().map(Into::into).collect();
        self
    }
    /// Rows per statement (default 1000).
    pub fn batch_size(mut self, rows: usize) -> Self {
        self.batch_size = rows;
        self
    }
    /// `application_name` of the sink's sessions (default `weir-sink`).
    pub fn application_name(mut self, name: impl Into<String>) -> Self {
        self.application_name = name.into();
        self
    }
    /// Calls `hook` with the global id right before each `COMMIT PREPARED`: the moment
    /// between a checkpoint's completion and its commit, for fault-injection tests.
    pub fn before_commit(mut self, hook: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.before_commit = Some(Arc::new(hook));
        self
    }

    /// Calls `hook` with the global id right before each `PREPARE TRANSACTION`: the moment
    /// after a process checked that it holds its job and before the database takes its
    /// transaction, for fault-injection tests.
    pub fn before_prepare(mut self, hook: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.before_prepare = Some(Arc::new(hook));
        self
    }

    fn settings(self) -> Result<SinkSettings, PostgresError> {
        self.spec.validate()?;
        if self.batch_size == 0 {
            return Err(PostgresError::Config(
                "batch size must be at least 1".into(),
            ));
        }
        Ok(SinkSettings {
            connection: PostgresConnection::new(&self.url)?,
            statement: self.spec.write_statement(),
            spec: self.spec,
            batch_size: self.batch_size,
            application_name: self.application_name,
            before_commit: self.before_commit,
            before_prepare: self.before_prepare,
        })
    }

    /// An at-least-once sink whose results are idempotent: batched
    /// `INSERT … ON CONFLICT (key) DO UPDATE`, flushed at every checkpoint barrier, so a
    /// replay after a failure rewrites the same values.
    pub fn upsert(self) -> Result<PostgresUpsertSink<T>, PostgresError> {
        if self.spec.key_columns.is_empty() {
            return Err(PostgresError::Config(format!(
                "an upsert sink needs key columns for table {}",
                self.spec.table
            )));
        }
        Ok(PostgresUpsertSink::new(Arc::new(self.settings()?)))
    }

    /// An exactly-once sink through PostgreSQL's two-phase commit. With key columns, feed it
    /// a stream partitioned by those columns (`key_by`), so that each row is written by one
    /// subtask: a prepared transaction keeps its rows locked until its checkpoint
    /// completes, and another subtask upserting the same row in the same checkpoint would
    /// wait on it (the lock timeout then fails the job).
    ///
    /// Per checkpoint and
    /// subtask, the rows are written in a transaction that is prepared
    /// (`PREPARE TRANSACTION`) at the barrier and committed (`COMMIT PREPARED`) when the
    /// checkpoint completes. Global ids start with `prefix`, which must be unique per job
    /// and stable across its restarts. Rows are inserted, or upserted when key columns are
    /// set.
    pub fn exactly_once(
        self,
        prefix: &str,
    ) -> Result<TwoPhaseCommit<PostgresTransactionalSink<T>>, PostgresError> {
        crate::statements::check_id_part("transaction id prefix", prefix)?;
        Ok(TwoPhaseCommit(PostgresTransactionalSink::new(
            Arc::new(self.settings()?),
            prefix.to_string(),
        )))
    }
}
