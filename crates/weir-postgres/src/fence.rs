//! The fence that PostgreSQL itself enforces for the exactly-once sink: a row per sink in
//! `weir_fences` names the process (epoch and holder) that owns the sink's prepared
//! transactions, and a row per committed transaction in `weir_commits` says that output of
//! the sink exists.
//!
//! Why in the database: a process that checked its fencing token and then stalled must not
//! commit after a successor took the job over — nor a task of an earlier attempt (a
//! TaskManager the JobManager gave up on, which restarted the job elsewhere under the same
//! epoch) after the next attempt started: the row names the attempt too. Every prepared transaction reads the fence
//! row `FOR SHARE` and fails unless it names its own process; the share lock stays with the
//! prepared transaction until it is committed or rolled back. A successor's takeover
//! advances the row with `FOR UPDATE`, which waits for every prepared transaction holding
//! it: it gets the row only once everything the older process prepared is settled (the
//! restored checkpoint's transactions committed, the others rolled back), and afterwards no
//! transaction of the older process can prepare. Processes of one epoch share the row
//! (share locks do not conflict), so parallel subtasks never wait on each other.
//!
//! `weir_commits` gets one row per prepared transaction, inside it: it becomes visible
//! exactly when the transaction commits, so a job that starts from empty state can tell
//! that output of its sink was committed before and refuse to write it again.

use postgres::error::SqlState;
use postgres::Client;

use crate::error::PostgresError;
use crate::statements::{quote_identifier, quote_literal};

/// The tables of the fence, in the schema of the sink's table (or the search path's first
/// schema when the table name is unqualified).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceTables {
    /// `weir_fences`, quoted and qualified.
    pub fences: String,
    /// `weir_commits`, quoted and qualified.
    pub commits: String,
}

impl FenceTables {
    /// The fence tables beside `table` (`schema.table` or `table`).
    pub fn beside(table: &str) -> Self {
        // Split as the sink's table is quoted: every part but the last names the schema
        // (and the database, when there are three).
        let schema = table.rsplit_once('.').map(|(schema, _)| {
            let parts: Vec<String> = schema.split('.').map(quote_identifier).collect();
            format!("{}.", parts.join("."))
        });
        let qualified = |name: &str| format!("{}{name}", schema.as_deref().unwrap_or(""));
        Self {
            fences: qualified("weir_fences"),
            commits: qualified("weir_commits"),
        }
    }

    /// The statements creating both tables when they are missing.
    pub fn create_statements(&self) -> [String; 2] {
        [
            format!(
                "CREATE TABLE IF NOT EXISTS {} (sink text PRIMARY KEY, epoch bigint NOT NULL, \
                 holder text NOT NULL, attempt bigint NOT NULL DEFAULT 0, \
                 taken_at timestamptz NOT NULL DEFAULT now())",
                self.fences
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {} (sink text NOT NULL, target text NOT NULL, \
                 subtask integer NOT NULL, epoch bigint NOT NULL, checkpoint bigint NOT NULL, \
                 committed_at timestamptz NOT NULL DEFAULT now(), \
                 PRIMARY KEY (sink, target, subtask, epoch, checkpoint))",
                self.commits
            ),
        ]
    }

    /// What a user runs to start the sink over on purpose, once its output is gone from
    /// `target`.
    pub fn start_over_statement(&self, sink: &str, target: &str) -> String {
        format!(
            "DELETE FROM {} WHERE sink = {} AND target = {}",
            self.commits,
            quote_literal(sink),
            quote_literal(target)
        )
    }
}

/// Who owns a sink's transactions: an attempt of a process of a job, by its fencing token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The epoch of the process (0 for a job without checkpoint storage).
    pub epoch: u64,
    /// The process, as its job record describes it.
    pub holder: String,
    /// The attempt of the job's run in that process (Flink's attempt number).
    pub attempt: u64,
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "epoch {}, attempt {} ({})",
            self.epoch, self.attempt, self.holder
        )
    }
}

/// What a subtask does with the fence row it found at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Takeover {
    /// The row names this process already (a sibling subtask or an earlier attempt of this
    /// process took it).
    Held,
    /// No row, an older epoch of the job, or an earlier attempt of this process: advance it.
    Advance,
    /// A later attempt of this same process holds it: this task belongs to an attempt the
    /// job gave up on, and commits nothing.
    Superseded(Owner),
    /// The row names a newer epoch, or another process of the same epoch: either this
    /// process lost its job (its fencing token says so), or another job writes with the
    /// same transaction prefix (its token holds, and it takes the row over).
    Contested(Owner),
}

/// Decides what to do with the fence row `found` for the process `mine`.
pub fn takeover(found: Option<&Owner>, mine: &Owner) -> Takeover {
    match found {
        None => Takeover::Advance,
        Some(found) if found == mine => Takeover::Held,
        Some(found) if found.epoch < mine.epoch => Takeover::Advance,
        Some(found) if found.epoch == mine.epoch && found.holder == mine.holder => {
            if found.attempt < mine.attempt {
                Takeover::Advance
            } else {
                Takeover::Superseded(found.clone())
            }
        }
        Some(found) => Takeover::Contested(found.clone()),
    }
}

/// Whether an error is a `CREATE TABLE IF NOT EXISTS` that lost a race with the same
/// statement in another session (PostgreSQL then reports the duplicate type or table).
fn lost_creation_race(e: &postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::UNIQUE_VIOLATION || *c == SqlState::DUPLICATE_TABLE
    )
}

/// Creates the fence tables when they are missing. Tables that exist are left alone, so a
/// role without `CREATE` on the schema works once they were made for it (PostgreSQL checks
/// that privilege even for `CREATE TABLE IF NOT EXISTS` of an existing table).
pub fn ensure_tables(client: &mut Client, tables: &FenceTables) -> Result<(), PostgresError> {
    let action = "creating the fence tables of the exactly-once sink";
    for (name, statement) in [&tables.fences, &tables.commits]
        .into_iter()
        .zip(tables.create_statements())
    {
        let exists: Option<String> = client
            .query_one("SELECT to_regclass($1)::text", &[name])
            .map_err(|e| PostgresError::database(action, name, e))?
            .get(0);
        if exists.is_some() {
            continue;
        }
        match client.batch_execute(&statement) {
            Ok(()) => {}
            Err(e) if lost_creation_race(&e) => {}
            Err(e) => return Err(PostgresError::database(action, name, e)),
        }
    }
    Ok(())
}

/// The owner the fence row of `sink` names, read without locking.
pub fn read_owner(
    client: &mut Client,
    tables: &FenceTables,
    sink: &str,
) -> Result<Option<Owner>, PostgresError> {
    let row = client
        .query_opt(
            &format!(
                "SELECT epoch, holder, attempt FROM {} WHERE sink = $1",
                tables.fences
            ),
            &[&sink],
        )
        .map_err(|e| PostgresError::database("reading the sink's fence row", &tables.fences, e))?;
    Ok(row.map(|row| Owner {
        epoch: u64::try_from(row.get::<_, i64>(0)).unwrap_or(0),
        holder: row.get(1),
        attempt: u64::try_from(row.get::<_, i64>(2)).unwrap_or(0),
    }))
}

/// Sets the fence row of `sink` to `mine` if it still names `seen`, waiting at most
/// `lock_timeout_ms` for the prepared transactions that hold it. Returns `false` when it
/// changed meanwhile or the wait timed out: the caller settles what it can and tries again.
pub fn try_take(
    client: &mut Client,
    tables: &FenceTables,
    sink: &str,
    seen: Option<&Owner>,
    mine: &Owner,
    lock_timeout_ms: u64,
) -> Result<bool, PostgresError> {
    let action = "taking the sink's fence row";
    let epoch = i64::try_from(mine.epoch).unwrap_or(i64::MAX);
    let attempt = i64::try_from(mine.attempt).unwrap_or(i64::MAX);
    let mut transaction = client
        .transaction()
        .map_err(|e| PostgresError::database(action, &tables.fences, e))?;
    transaction
        .batch_execute(&format!("SET LOCAL lock_timeout = {lock_timeout_ms}"))
        .map_err(|e| PostgresError::database(action, &tables.fences, e))?;
    let current = match transaction.query_opt(
        &format!(
            "SELECT epoch, holder, attempt FROM {} WHERE sink = $1 FOR UPDATE",
            tables.fences
        ),
        &[&sink],
    ) {
        Ok(row) => row.map(|row| Owner {
            epoch: u64::try_from(row.get::<_, i64>(0)).unwrap_or(0),
            holder: row.get(1),
            attempt: u64::try_from(row.get::<_, i64>(2)).unwrap_or(0),
        }),
        Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => return Ok(false),
        Err(e) => return Err(PostgresError::database(action, &tables.fences, e)),
    };
    if current.as_ref() != seen {
        return Ok(false);
    }
    let statement = if current.is_some() {
        format!(
            "UPDATE {} SET epoch = $2, holder = $3, attempt = $4, taken_at = now() WHERE sink = $1",
            tables.fences
        )
    } else {
        // A concurrent insert by a sibling makes this one fail: try again, and find it.
        format!(
            "INSERT INTO {} (sink, epoch, holder, attempt) VALUES ($1, $2, $3, $4) ON CONFLICT (sink) DO NOTHING",
            tables.fences
        )
    };
    let changed = transaction
        .execute(&statement, &[&sink, &epoch, &mine.holder, &attempt])
        .map_err(|e| PostgresError::database(action, &tables.fences, e))?;
    transaction
        .commit()
        .map_err(|e| PostgresError::database(action, &tables.fences, e))?;
    Ok(changed == 1)
}

/// Inside a transaction about to be prepared: fails unless the fence row of `sink` names
/// `mine`, and keeps the row share-locked until the transaction ends, so that no takeover
/// can pass it while it is prepared.
pub fn hold_in_transaction(
    client: &mut Client,
    tables: &FenceTables,
    sink: &str,
    mine: &Owner,
    server: &str,
) -> Result<(), PostgresError> {
    let row = client
        .query_opt(
            &format!(
                "SELECT epoch, holder, attempt FROM {} WHERE sink = $1 FOR SHARE",
                tables.fences
            ),
            &[&sink],
        )
        .map_err(|e| PostgresError::database("checking the sink's fence row", &tables.fences, e))?;
    let found = row.map(|row| Owner {
        epoch: u64::try_from(row.get::<_, i64>(0)).unwrap_or(0),
        holder: row.get(1),
        attempt: u64::try_from(row.get::<_, i64>(2)).unwrap_or(0),
    });
    if found.as_ref() == Some(mine) {
        return Ok(());
    }
    Err(PostgresError::Fenced {
        sink: sink.to_string(),
        server: server.to_string(),
        table: tables.fences.clone(),
        epoch: mine.epoch,
        found: match found {
            Some(owner) => owner.to_string(),
            None => "no row (it was deleted)".into(),
        },
    })
}

/// Inside a transaction about to be prepared: the row saying that, once it commits, output of
/// `sink` into `target` exists.
pub fn record_commit(
    client: &mut Client,
    tables: &FenceTables,
    sink: &str,
    target: &str,
    subtask: u32,
    epoch: u64,
    checkpoint: u64,
) -> Result<(), PostgresError> {
    client
        .execute(
            &format!(
                "INSERT INTO {} (sink, target, subtask, epoch, checkpoint) VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT DO NOTHING",
                tables.commits
            ),
            &[
                &sink,
                &target,
                &i32::try_from(subtask).unwrap_or(i32::MAX),
                &i64::try_from(epoch).unwrap_or(i64::MAX),
                &i64::try_from(checkpoint).unwrap_or(i64::MAX),
            ],
        )
        .map_err(|e| PostgresError::database("recording the commit", &tables.commits, e))?;
    Ok(())
}

/// After a commit: removes this subtask's older commit rows, keeping the newest (outside any
/// prepared transaction, so no prepared transaction ever holds a lock a later one needs).
pub fn prune_commits(
    client: &mut Client,
    tables: &FenceTables,
    sink: &str,
    target: &str,
    subtask: u32,
    epoch: u64,
    checkpoint: u64,
) -> Result<(), PostgresError> {
    client
        .execute(
            &format!(
                "DELETE FROM {} WHERE sink = $1 AND target = $2 AND subtask = $3 \
                 AND (epoch, checkpoint) < ($4, $5)",
                tables.commits
            ),
            &[
                &sink,
                &target,
                &i32::try_from(subtask).unwrap_or(i32::MAX),
                &i64::try_from(epoch).unwrap_or(i64::MAX),
                &i64::try_from(checkpoint).unwrap_or(i64::MAX),
            ],
        )
        .map_err(|e| PostgresError::database("pruning older commit rows", &tables.commits, e))?;
    Ok(())
}

/// The epoch a global id's sequence names: `{checkpoint}-{epoch}-{start}` once prepared at a
/// checkpoint, `{epoch}-{start}-{counter}` before (and in jobs without checkpoints). The start
/// is a time in microseconds, far above any checkpoint id or epoch, which tells the two apart.
pub fn epoch_of_sequence(sequence: &str) -> Option<u64> {
    let fields: Vec<u64> = sequence
        .split('-')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    const MICROS: u64 = 1_000_000_000_000;
    match fields.as_slice() {
        [epoch, start, _] if *start >= MICROS => Some(*epoch),
        [_, epoch, start] if *start >= MICROS => Some(*epoch),
        _ => None,
    }
}

/// The newest commit row of `sink` into `target`, described for a refusal to start from
/// empty state over it; `None` when there is none (or no fence tables yet).
pub fn committed_output(
    client: &mut Client,
    tables: &FenceTables,
    sink: &str,
    target: &str,
) -> Result<Option<String>, PostgresError> {
    let action = "looking for committed output of the sink";
    let exists: Option<String> = client
        .query_one("SELECT to_regclass($1)::text", &[&tables.commits])
        .map_err(|e| PostgresError::database(action, &tables.commits, e))?
        .get(0);
    if exists.is_none() {
        return Ok(None);
    }
    let row = client
        .query_opt(
            &format!(
                "SELECT subtask, epoch, checkpoint, committed_at::text FROM {} \
                 WHERE sink = $1 AND target = $2 ORDER BY committed_at DESC LIMIT 1",
                tables.commits
            ),
            &[&sink, &target],
        )
        .map_err(|e| PostgresError::database(action, &tables.commits, e))?;
    Ok(row.map(|row| {
        let subtask: i32 = row.get(0);
        let epoch: i64 = row.get(1);
        let checkpoint: i64 = row.get(2);
        let at: String = row.get(3);
        format!(
            "rows in table {target}, written in a transaction begun at {at} by subtask {subtask} (checkpoint \
             {checkpoint}, epoch {epoch}) as {} records; to start over on purpose, remove that \
             output from {target} and run `{}`",
            tables.commits,
            tables.start_over_statement(sink, target)
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(epoch: u64, holder: &str) -> Owner {
        attempt(epoch, holder, 0)
    }

    fn attempt(epoch: u64, holder: &str, attempt: u64) -> Owner {
        Owner {
            epoch,
            holder: holder.into(),
            attempt,
        }
    }

    #[test]
    fn the_fence_tables_sit_beside_the_sinks_table() {
        let qualified = FenceTables::beside("analytics.word_counts");
        assert_eq!(qualified.fences, r#""analytics".weir_fences"#);
        assert_eq!(qualified.commits, r#""analytics".weir_commits"#);
        assert_eq!(
            FenceTables::beside("db.analytics.counts").fences,
            r#""db"."analytics".weir_fences"#
        );
        let plain = FenceTables::beside("word_counts");
        assert_eq!(plain.fences, "weir_fences");
        assert!(plain.create_statements()[1]
            .contains("PRIMARY KEY (sink, target, subtask, epoch, checkpoint)"));
        assert_eq!(
            plain.start_over_statement("p:it's", "t"),
            "DELETE FROM weir_commits WHERE sink = 'p:it''s' AND target = 't'"
        );
    }

    #[test]
    fn the_epoch_is_read_from_both_forms_of_a_sequence() {
        assert_eq!(epoch_of_sequence("3-1796665787539022-7"), Some(3));
        assert_eq!(epoch_of_sequence("12-4-1796665787539022"), Some(4));
        assert_eq!(epoch_of_sequence("5-2"), None);
        assert_eq!(epoch_of_sequence("x-1-2"), None);
    }

    #[test]
    fn only_an_older_epoch_or_no_row_is_advanced_without_question() {
        let mine = owner(3, "pid 7");
        assert_eq!(takeover(None, &mine), Takeover::Advance);
        assert_eq!(takeover(Some(&owner(2, "pid 5")), &mine), Takeover::Advance);
        assert_eq!(takeover(Some(&owner(3, "pid 7")), &mine), Takeover::Held);
        // The same epoch by another process (a record lost, or another job), or a newer one.
        assert_eq!(
            takeover(Some(&owner(3, "pid 8")), &mine),
            Takeover::Contested(owner(3, "pid 8"))
        );
        assert_eq!(
            takeover(Some(&owner(4, "pid 9")), &mine),
            Takeover::Contested(owner(4, "pid 9"))
        );
    }

    #[test]
    fn a_later_attempt_of_the_same_process_supersedes_an_earlier_one() {
        let second = attempt(3, "pid 7", 2);
        assert_eq!(
            takeover(Some(&attempt(3, "pid 7", 1)), &second),
            Takeover::Advance
        );
        // A task of attempt 1, stalled while attempt 2 took the row, is done.
        assert_eq!(
            takeover(Some(&second), &attempt(3, "pid 7", 1)),
            Takeover::Superseded(second.clone())
        );
        // Attempts of another process of the same epoch are no later or earlier: contested.
        assert_eq!(
            takeover(Some(&attempt(3, "pid 8", 0)), &second),
            Takeover::Contested(attempt(3, "pid 8", 0))
        );
    }
}
