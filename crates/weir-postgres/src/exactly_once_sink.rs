//! The exactly-once sink through PostgreSQL's two-phase commit, as a
//! [`TwoPhaseCommitSink`] for Weir's [`TwoPhaseCommit`](weir::connectors::two_phase_commit)
//! framework: per checkpoint and subtask, rows are written in one database transaction,
//! `PREPARE TRANSACTION '{gid}'` at the barrier makes it durable but invisible, and
//! `COMMIT PREPARED '{gid}'` publishes it when the checkpoint completes. Recovery commits
//! the prepared transactions the restored checkpoint names (a missing one was committed
//! already) and rolls back this sink's other prepared transactions — those of checkpoints
//! that never completed.
//!
//! PostgreSQL itself fences the sink ([`crate::fence`]): every prepared transaction holds the
//! sink's fence row, which names the process that owns the sink, and a successor advances the
//! row only after it settled everything an older process prepared. A stalled process that
//! wakes after a successor took over can then neither prepare nor commit anything.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use postgres::error::SqlState;
use postgres::Client;
use serde::{Deserialize, Serialize};
use weir::connectors::two_phase_commit::TwoPhaseCommitSink;
use weir::{BoxError, RuntimeContext};

use crate::error::PostgresError;
use crate::fence::{self, FenceTables, Owner, Takeover};
use crate::row_encoder::RowBatch;
use crate::settings::SinkSettings;
use crate::statements::{global_id, quote_literal, subtask_of};
use crate::upsert_sink::connected;

/// How long a write may wait for a row lock before the task fails (and recovery commits the
/// prepared transaction holding it).
const LOCK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a transaction holding locks another process may need — the fence row, or the
/// rows an upsert wrote at the barrier — may sit idle before PostgreSQL ends its session. Only
/// a stalled process (stopped, swapped out) waits that long between those statements; its
/// session's end releases the locks, so that a successor is not blocked by it for good, and
/// the stalled process, when it wakes, finds its session gone and prepares nothing.
const STALL_LIMIT_MS: u64 = 10_000;

/// How long one attempt to take the fence row waits for prepared transactions that hold it.
const FENCE_LOCK_TIMEOUT_MS: u64 = 1000;

/// Attempts to take the fence row before the start fails: each settles what this subtask
/// owns, and sibling subtasks settle theirs meanwhile.
const FENCE_ATTEMPTS: u32 = 120;

/// A transaction of the sink, as checkpoints store it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PostgresTransaction {
    /// Its global id.
    pub gid: String,
    /// Whether it was prepared (a transaction without rows is never opened).
    pub prepared: bool,
}

/// One subtask's side of the exactly-once sink; build it with
/// [`crate::PostgresSink::builder`] and `.exactly_once(prefix)`.
pub struct PostgresTransactionalSink<T> {
    settings: Arc<SinkSettings>,
    prefix: String,
    /// The session the rows are written on.
    client: Option<Client>,
    /// A second session for COMMIT/ROLLBACK PREPARED, which cannot run inside the
    /// transaction the first one may have open for the next checkpoint.
    control: Option<Client>,
    batch: RowBatch,
    /// The gid whose database transaction is open on the session (`BEGIN` was sent).
    open: Option<String>,
    /// `{epoch}-{start time}` of this process's run: every gid it prepares says which
    /// process (epoch) wrote it.
    run: String,
    sequence: u64,
    /// Set once recovery is over: commits before that settle restored transactions.
    started: bool,
    /// The fence tables beside the sink's table.
    tables: FenceTables,
    /// `{prefix}:{operator uid}`: the sink, in the fence tables (set at start).
    sink_id: String,
    /// This subtask's index (set at start).
    subtask: u32,
    /// This process, as the fence row names it (set at start).
    owner: Owner,
    /// The epoch and checkpoint each prepared transaction of this run recorded, so that a
    /// commit prunes the older commit rows.
    recorded: HashMap<String, u64>,
    _records: PhantomData<fn(T)>,
}

impl<T> PostgresTransactionalSink<T> {
    pub(crate) fn new(settings: Arc<SinkSettings>, prefix: String) -> Self {
        Self {
            tables: FenceTables::beside(&settings.spec.table),
            settings,
            prefix,
            client: None,
            control: None,
            batch: RowBatch::default(),
            open: None,
            run: String::new(),
            sequence: 0,
            started: false,
            sink_id: String::new(),
            subtask: 0,
            owner: Owner {
                epoch: 0,
                holder: String::new(),
                attempt: 0,
            },
            recorded: HashMap::new(),
            _records: PhantomData,
        }
    }

    fn table(&self) -> &str {
        &self.settings.spec.table
    }

    /// Writes the collected rows into `transaction`, opening it on the session first.
    fn write_rows(&mut self, transaction: &PostgresTransaction) -> Result<(), PostgresError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        self.check_session()?;
        let table = self.table().to_string();
        let client = connected(&self.settings, &mut self.client)?;
        if self.open.as_deref() != Some(transaction.gid.as_str()) {
            // Should a row still be locked by a prepared transaction whose commit notice is
            // late, fail (and recover, which commits it) instead of waiting forever.
            client
                .batch_execute(&format!("SET lock_timeout = {}", LOCK_TIMEOUT.as_millis()))
                .map_err(|e| PostgresError::database("setting lock_timeout", &table, e))?;
            client
                .batch_execute("BEGIN")
                .map_err(|e| PostgresError::database("beginning a transaction", &table, e))?;
            if !self.settings.spec.key_columns.is_empty() {
                // Upserts are written at the barrier and lock their keys from here on.
                limit_stall(client, &table)?;
            }
            self.open = Some(transaction.gid.clone());
        }
        let rows = self.batch.len();
        let json = self.batch.take_json();
        client
            .execute(self.settings.statement.as_str(), &[&json])
            .map_err(|e| {
                PostgresError::database(format!("writing {rows} rows to {table}"), &table, e)
            })?;
        Ok(())
    }

    /// Writes the remaining rows and prepares the transaction, naming it after the
    /// checkpoint when there is one: `{prefix}:{uid}:{subtask}:{checkpoint}-{epoch}-{start}`.
    fn prepare(
        &mut self,
        transaction: &mut PostgresTransaction,
        checkpoint_id: Option<u64>,
    ) -> Result<(), BoxError> {
        self.write_rows(transaction)?;
        if self.open.as_deref() != Some(transaction.gid.as_str()) {
            // No rows: nothing to prepare or commit.
            return Ok(());
        }
        self.check_session()?;
        if let Some(checkpoint_id) = checkpoint_id {
            if let Some((base, _)) = transaction.gid.rsplit_once(':') {
                // The run carries the epoch: `{checkpoint}-{epoch}-{start}`.
                transaction.gid = format!("{base}:{checkpoint_id}-{}", self.run);
                self.open = Some(transaction.gid.clone());
            }
        }
        let table = self.table().to_string();
        let server = self.settings.connection.server().to_string();
        let client = connected(&self.settings, &mut self.client)?;
        if let Some(hook) = &self.settings.before_prepare {
            hook(&transaction.gid);
        }
        limit_stall(client, &table)?;
        // The fence row, share-locked until the prepared transaction ends: no successor can
        // take the sink over while it is prepared, and none of this process's can prepare
        // once a successor has.
        fence::hold_in_transaction(client, &self.tables, &self.sink_id, &self.owner, &server)?;
        let checkpoint = checkpoint_id.unwrap_or(0);
        fence::record_commit(
            client,
            &self.tables,
            &self.sink_id,
            &table,
            self.subtask,
            self.owner.epoch,
            checkpoint,
        )?;
        client
            .batch_execute(&format!(
                "PREPARE TRANSACTION {}",
                quote_literal(&transaction.gid)
            ))
            .map_err(|e| {
                PostgresError::database(
                    format!("preparing transaction {}", transaction.gid),
                    &table,
                    e,
                )
            })?;
        self.open = None;
        transaction.prepared = true;
        self.recorded.insert(transaction.gid.clone(), checkpoint);
        Ok(())
    }

    /// Fails when the session that holds the open transaction is gone: reconnecting would
    /// lose its rows and run the next ones outside any transaction.
    fn check_session(&mut self) -> Result<(), PostgresError> {
        if self.open.is_some() && self.client.as_ref().is_none_or(Client::is_closed) {
            let gid = self.open.take().unwrap_or_default();
            return Err(PostgresError::Config(format!(
                "the session of transaction {gid} to {} was lost; the job recovers from its last checkpoint",
                self.settings.connection.server()
            )));
        }
        Ok(())
    }

    /// Runs `COMMIT PREPARED` or `ROLLBACK PREPARED` for `gid`. During recovery a
    /// transaction that no longer exists was finished already (by an earlier attempt, or
    /// another subtask after a rescale). Afterwards, a transaction of this run's own that is
    /// gone before its commit was settled by someone else — another process that took the
    /// job over while this one stalled — so this one must not go on as if it committed.
    fn finish_prepared(&mut self, verb: &str, gid: &str) -> Result<(), PostgresError> {
        let table = self.table().to_string();
        let recovering = !self.started;
        let client = connected(&self.settings, &mut self.control)?;
        match client.batch_execute(&format!("{verb} PREPARED {}", quote_literal(gid))) {
            Ok(()) => Ok(()),
            Err(e) if e.code() == Some(&SqlState::UNDEFINED_OBJECT) && (recovering || verb != "COMMIT") => {
                tracing::debug!(gid, verb, "prepared transaction already finished");
                Ok(())
            }
            Err(e) if e.code() == Some(&SqlState::UNDEFINED_OBJECT) => {
                Err(PostgresError::Config(format!(
                    "prepared transaction {gid} on {table} is gone before this process committed it: another process settled it (this one must have lost its job); nothing more is committed"
                )))
            }
            Err(e) => Err(PostgresError::database(
                format!("{verb} PREPARED {gid}"),
                &table,
                e,
            )),
        }
    }

    /// `{prefix}:{operator uid}`: the sink, in gids and the fence tables.
    fn sink_id_for(&self, context: &RuntimeContext) -> Result<String, PostgresError> {
        let uid = context.operator_uid().to_string();
        crate::statements::check_id_part("operator uid", &uid)?;
        Ok(format!("{}:{uid}", self.prefix))
    }

    /// Rolls back this sink's prepared transactions that this subtask owns (old subtask `s`
    /// goes to `s % parallelism`) and `known` does not name: those of checkpoints that never
    /// completed, or that a process which lost the job prepared.
    fn roll_back_lingering(
        &mut self,
        context: &RuntimeContext,
        known: &[PostgresTransaction],
    ) -> Result<(), PostgresError> {
        let table = self.table().to_string();
        let client = connected(&self.settings, &mut self.control)?;
        let rows = client
            .query("SELECT gid FROM pg_prepared_xacts", &[])
            .map_err(|e| PostgresError::database("listing prepared transactions", &table, e))?;
        let uid = context.operator_uid().to_string();
        let subtask = context.subtask_index();
        let parallelism = context.parallelism().max(1);
        for row in rows {
            let gid: String = row.get(0);
            let Some(owner) = subtask_of(&gid, &self.prefix, &uid) else {
                continue;
            };
            if owner % parallelism != subtask || known.iter().any(|k| k.gid == gid) {
                continue;
            }
            // Never a newer process's: one that took the job while this one stalled here.
            let epoch = gid.rsplit(':').next().and_then(fence::epoch_of_sequence);
            if epoch.is_some_and(|epoch| epoch > self.owner.epoch) {
                continue;
            }
            tracing::info!(
                gid,
                "rolling back a prepared transaction of a checkpoint that did not complete"
            );
            self.finish_prepared("ROLLBACK", &gid)?;
        }
        Ok(())
    }

    /// Makes the fence row name this process: after this subtask's lingering transactions
    /// are rolled back, the row is advanced once every transaction an older process prepared
    /// is settled (sibling subtasks settle theirs meanwhile). A row naming a newer epoch, or
    /// another process of this one's, is taken over only while this process still holds its
    /// job — then the other is another job writing with the same prefix.
    fn take_fence(
        &mut self,
        context: &RuntimeContext,
        known: &[PostgresTransaction],
    ) -> Result<(), BoxError> {
        for _ in 0..FENCE_ATTEMPTS {
            let client = connected(&self.settings, &mut self.control)?;
            let seen = fence::read_owner(client, &self.tables, &self.sink_id)?;
            match fence::takeover(seen.as_ref(), &self.owner) {
                Takeover::Held => return Ok(()),
                Takeover::Advance => {}
                Takeover::Superseded(newer) => {
                    return Err(PostgresError::Fenced {
                        sink: self.sink_id.clone(),
                        server: self.settings.connection.server().to_string(),
                        table: self.tables.fences.clone(),
                        epoch: self.owner.epoch,
                        found: newer.to_string(),
                    }
                    .into())
                }
                Takeover::Contested(other) => {
                    context.fencing_token().check()?;
                    tracing::warn!(
                        sink = self.sink_id,
                        other_epoch = other.epoch,
                        other_holder = other.holder,
                        "the fence row names another process while this one holds its job: \
                         another job writes with the same transaction prefix; taking it over"
                    );
                }
            }
            // Only a process entitled to the row settles what others prepared.
            context.fencing_token().check()?;
            self.roll_back_lingering(context, known)?;
            let client = connected(&self.settings, &mut self.control)?;
            if fence::try_take(
                client,
                &self.tables,
                &self.sink_id,
                seen.as_ref(),
                &self.owner,
                FENCE_LOCK_TIMEOUT_MS,
            )? {
                tracing::info!(
                    sink = self.sink_id,
                    epoch = self.owner.epoch,
                    "took the sink's fence row"
                );
                return Ok(());
            }
        }
        let table = self.table().to_string();
        let client = connected(&self.settings, &mut self.control)?;
        let holding: Vec<String> = client
            .query(
                "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE $1",
                &[&format!("{}:%", self.sink_id)],
            )
            .map_err(|e| PostgresError::database("listing prepared transactions", &table, e))?
            .iter()
            .map(|row| row.get(0))
            .collect();
        Err(PostgresError::Config(format!(
            "sink {} cannot take its fence row in {}: prepared transactions of the sink keep it locked ({}); they belong to subtasks that did not settle them — restart the job, or settle them with COMMIT PREPARED / ROLLBACK PREPARED",
            self.sink_id,
            self.tables.fences,
            if holding.is_empty() { "none listed now".to_string() } else { holding.join(", ") }
        ))
        .into())
    }
}

/// Sets [`STALL_LIMIT_MS`] for the rest of the open transaction.
fn limit_stall(client: &mut Client, table: &str) -> Result<(), PostgresError> {
    client
        .batch_execute(&format!(
            "SET LOCAL idle_in_transaction_session_timeout = {STALL_LIMIT_MS}"
        ))
        .map_err(|e| {
            PostgresError::database("limiting how long the transaction may stall", table, e)
        })
}

impl<T> Clone for PostgresTransactionalSink<T> {
    /// A fresh sink for another subtask: same settings, its own session.
    fn clone(&self) -> Self {
        Self::new(self.settings.clone(), self.prefix.clone())
    }
}

impl<T: Serialize + Send + 'static> TwoPhaseCommitSink<T> for PostgresTransactionalSink<T> {
    type Transaction = PostgresTransaction;

    fn find_committed_output(
        &mut self,
        context: &RuntimeContext,
    ) -> Result<Option<String>, BoxError> {
        let sink_id = self.sink_id_for(context)?;
        let table = self.table().to_string();
        let client = connected(&self.settings, &mut self.control)?;
        Ok(fence::committed_output(
            client,
            &self.tables,
            &sink_id,
            &table,
        )?)
    }

    fn abort_lingering(
        &mut self,
        context: &RuntimeContext,
        known: &[PostgresTransaction],
    ) -> Result<(), BoxError> {
        let table = self.table().to_string();
        let server = self.settings.connection.server().to_string();
        let client = connected(&self.settings, &mut self.control)?;
        // Checked at start, so that a server without prepared transactions fails the job
        // now rather than at its first checkpoint.
        let row = client
            .query_one(
                "SELECT current_setting('max_prepared_transactions')::int",
                &[],
            )
            .map_err(|e| PostgresError::database("reading max_prepared_transactions", &table, e))?;
        let max_prepared: i32 = row.get(0);
        if max_prepared == 0 {
            return Err(PostgresError::PreparedTransactionsDisabled { server }.into());
        }
        fence::ensure_tables(client, &self.tables)?;
        self.sink_id = self.sink_id_for(context)?;
        self.subtask = context.subtask_index();
        let token = context.fencing_token();
        self.owner = Owner {
            epoch: token.epoch(),
            holder: token.holder().to_string(),
            attempt: context.attempt_number(),
        };
        self.take_fence(context, known)?;
        let start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros().to_string())
            .unwrap_or_default();
        self.run = format!("{}-{start}", token.epoch());
        self.started = true;
        Ok(())
    }

    fn begin_transaction(
        &mut self,
        context: &RuntimeContext,
    ) -> Result<PostgresTransaction, BoxError> {
        self.sequence += 1;
        Ok(PostgresTransaction {
            gid: global_id(
                &self.prefix,
                context.operator_uid(),
                context.subtask_index(),
                &format!("{}-{}", self.run, self.sequence),
            ),
            prepared: false,
        })
    }

    fn write(&mut self, transaction: &mut PostgresTransaction, record: T) -> Result<(), BoxError> {
        self.batch.push(&record, &self.settings.spec)?;
        // Upserts wait for the barrier: the previous checkpoint's prepared transaction holds
        // locks on the rows it upserted until its completion notice commits it, and an
        // upsert of the same keys before that would wait on it, on the very thread that
        // has to deliver the notice. Inserts of new rows take no such locks.
        if self.settings.spec.key_columns.is_empty() && self.batch.len() >= self.settings.batch_size
        {
            self.write_rows(transaction)?;
        }
        Ok(())
    }

    fn pre_commit(&mut self, transaction: &mut PostgresTransaction) -> Result<(), BoxError> {
        self.prepare(transaction, None)
    }

    fn pre_commit_for_checkpoint(
        &mut self,
        transaction: &mut PostgresTransaction,
        checkpoint_id: u64,
    ) -> Result<(), BoxError> {
        self.prepare(transaction, Some(checkpoint_id))
    }

    fn commit(&mut self, transaction: &PostgresTransaction) -> Result<(), BoxError> {
        if !transaction.prepared {
            return Ok(());
        }
        if let (true, Some(hook)) = (self.started, &self.settings.before_commit) {
            hook(&transaction.gid);
        }
        self.finish_prepared("COMMIT", &transaction.gid)?;
        if let Some(checkpoint) = self.recorded.remove(&transaction.gid) {
            let client = connected(&self.settings, &mut self.control)?;
            fence::prune_commits(
                client,
                &self.tables,
                &self.sink_id,
                &self.settings.spec.table,
                self.subtask,
                self.owner.epoch,
                checkpoint,
            )?;
        }
        Ok(())
    }

    fn abort(&mut self, transaction: &PostgresTransaction) -> Result<(), BoxError> {
        if self.started
            && (!self.batch.is_empty() || self.open.as_deref() == Some(transaction.gid.as_str()))
        {
            // The writer aborts its open transaction only at the end of input, right after the
            // final checkpoint: rows in it arrived after that checkpoint (emitted when the
            // input ended) and can no longer be committed exactly once.
            return Err(PostgresError::Config(format!(
                "rows for {} arrived after the final checkpoint and cannot be committed exactly once",
                self.table()
            ))
            .into());
        }
        if self.open.as_deref() == Some(transaction.gid.as_str()) {
            self.open = None;
            self.batch = RowBatch::default();
            if let Some(client) = self.client.as_mut() {
                let _ = client.batch_execute("ROLLBACK");
            }
            return Ok(());
        }
        if transaction.prepared {
            self.finish_prepared("ROLLBACK", &transaction.gid)?;
        }
        Ok(())
    }
}
