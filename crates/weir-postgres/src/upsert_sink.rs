//! The at-least-once upsert sink: rows are batched and written with
//! `INSERT … ON CONFLICT (key) DO UPDATE` (one atomic statement per batch), and every
//! checkpoint barrier flushes, so a completed checkpoint's rows are in the table and a
//! replay rewrites the same values.

use std::marker::PhantomData;
use std::sync::Arc;

use postgres::Client;
use serde::Serialize;
use weir::connectors::sink::{Sink, SinkWriter};
use weir::{BoxError, RuntimeContext};

use crate::error::PostgresError;
use crate::row_encoder::RowBatch;
use crate::settings::SinkSettings;

/// The upsert sink; build it with [`crate::PostgresSink::builder`] and `.upsert()`.
pub struct PostgresUpsertSink<T> {
    settings: Arc<SinkSettings>,
    _records: PhantomData<fn(T)>,
}

impl<T> PostgresUpsertSink<T> {
    pub(crate) fn new(settings: Arc<SinkSettings>) -> Self {
        Self {
            settings,
            _records: PhantomData,
        }
    }
}

/// The writer of one upsert sink subtask.
pub struct PostgresUpsertWriter<T> {
    settings: Arc<SinkSettings>,
    client: Option<Client>,
    batch: RowBatch,
    _records: PhantomData<fn(T)>,
}

impl<T: Serialize + Send + 'static> Sink<T> for PostgresUpsertSink<T> {
    type Writer = PostgresUpsertWriter<T>;
    /// Replays overwrite rows by key: harmless.
    fn commits_on_checkpoint_completion(&self) -> bool {
        false
    }
    fn create_writer(&self, _context: &RuntimeContext) -> Result<Self::Writer, BoxError> {
        Ok(PostgresUpsertWriter {
            settings: self.settings.clone(),
            client: None,
            batch: RowBatch::default(),
            _records: PhantomData,
        })
    }
}

/// Writes `batch` with one statement, connecting first if needed.
pub(crate) fn write_batch(
    settings: &SinkSettings,
    client: &mut Option<Client>,
    batch: &mut RowBatch,
) -> Result<(), PostgresError> {
    if batch.is_empty() {
        return Ok(());
    }
    let client = connected(settings, client)?;
    let rows = batch.len();
    let json = batch.take_json();
    client
        .execute(settings.statement.as_str(), &[&json])
        .map_err(|e| {
            PostgresError::database(
                format!("writing {rows} rows to {}", settings.spec.table),
                &settings.spec.table,
                e,
            )
        })?;
    Ok(())
}

/// The session, opened on first use.
pub(crate) fn connected<'a>(
    settings: &SinkSettings,
    client: &'a mut Option<Client>,
) -> Result<&'a mut Client, PostgresError> {
    if client.as_ref().is_none_or(Client::is_closed) {
        *client = Some(settings.connection.connect(&settings.application_name)?);
    }
    client
        .as_mut()
        .ok_or_else(|| PostgresError::Config("no session".into()))
}

impl<T: Serialize + Send + 'static> SinkWriter<T> for PostgresUpsertWriter<T> {
    fn write(&mut self, record: T) -> Result<(), BoxError> {
        self.batch.push(&record, &self.settings.spec)?;
        if self.batch.len() >= self.settings.batch_size {
            write_batch(&self.settings, &mut self.client, &mut self.batch)?;
        }
        Ok(())
    }

    fn flush(&mut self, _end_of_input: bool) -> Result<(), BoxError> {
        Ok(write_batch(
            &self.settings,
            &mut self.client,
            &mut self.batch,
        )?)
    }
}
