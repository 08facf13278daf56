//! Exactly-once output through two-phase commit (Flink's `TwoPhaseCommitSinkFunction`).
//!
//! Each subtask writes into a transaction. At a checkpoint barrier the transaction is
//! pre-committed (flushed, durable, invisible), stored in the checkpoint, and a new one
//! begins; when the checkpoint completes, every pre-committed transaction up to it is
//! committed. A lost completion notice is covered by the next one, and by recovery: a restored
//! job commits every transaction its checkpoint holds (commits are idempotent) and aborts
//! what the failed run left open. Pre-committed transactions travel as union list state, so
//! after a rescale every subtask knows them all and none of them is mistaken for a leftover.

use std::fmt::Debug;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::api::functions::{FunctionStateContext, RuntimeContext};
use crate::connectors::commit_metrics::CommitMetrics;
use crate::connectors::sink::{committed_output_error, starts_from_empty_state, Sink, SinkWriter};
use crate::error::BoxError;

/// A transactional external system, seen from one sink subtask.
pub trait TwoPhaseCommitSink<T>: Send + 'static {
    /// A transaction's durable handle (file names, a transaction id…), stored in checkpoints.
    type Transaction: Serialize + DeserializeOwned + Clone + Debug + Send + Sync + 'static;

    /// Some committed output of this sink that exists already (a file name, a row), if the
    /// sink can tell: a job that starts from empty state (no checkpoint or savepoint to
    /// restore) refuses to start over it. By default the sink cannot tell.
    fn find_committed_output(
        &mut self,
        _context: &RuntimeContext,
    ) -> Result<Option<String>, BoxError> {
        Ok(None)
    }
    /// Called once at start, after restored transactions were committed or aborted: abort
    /// anything this sink's subtask left open that `known` does not name.
    fn abort_lingering(
        &mut self,
        context: &RuntimeContext,
        known: &[Self::Transaction],
    ) -> Result<(), BoxError>;
    /// Starts a transaction.
    fn begin_transaction(
        &mut self,
        context: &RuntimeContext,
    ) -> Result<Self::Transaction, BoxError>;
    /// Writes one record into `transaction`.
    fn write(&mut self, transaction: &mut Self::Transaction, record: T) -> Result<(), BoxError>;
    /// Makes `transaction` durable but invisible.
    fn pre_commit(&mut self, transaction: &mut Self::Transaction) -> Result<(), BoxError>;
    /// Pre-commits `transaction` at the barrier of checkpoint `checkpoint_id` (sinks that
    /// name their transactions after the checkpoint override this).
    fn pre_commit_for_checkpoint(
        &mut self,
        transaction: &mut Self::Transaction,
        _checkpoint_id: u64,
    ) -> Result<(), BoxError> {
        self.pre_commit(transaction)
    }
    /// Makes a pre-committed `transaction` visible. Must be idempotent: it may be called again
    /// for a transaction already committed (after a crash, or by another subtask).
    fn commit(&mut self, transaction: &Self::Transaction) -> Result<(), BoxError>;
    /// Discards `transaction` (idempotent as well).
    fn abort(&mut self, transaction: &Self::Transaction) -> Result<(), BoxError>;
}

/// A [`Sink`] from a [`TwoPhaseCommitSink`]; each subtask gets a clone of it.
///
/// ```
/// use std::collections::BTreeMap;
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
/// use weir::prelude::*;
/// use weir::connectors::two_phase_commit::{TwoPhaseCommit, TwoPhaseCommitSink};
///
/// /// A "database" whose transactions are staged rows, visible once committed.
/// #[derive(Clone, Default)]
/// struct Db {
///     staged: Arc<Mutex<BTreeMap<String, Vec<u64>>>>,
///     visible: Arc<Mutex<Vec<u64>>>,
/// }
///
/// #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
/// struct Txn(String);
///
/// impl TwoPhaseCommitSink<u64> for Db {
///     type Transaction = Txn;
///     fn abort_lingering(&mut self, _: &RuntimeContext, _known: &[Txn]) -> Result<(), BoxError> {
///         Ok(())
///     }
///     fn begin_transaction(&mut self, ctx: &RuntimeContext) -> Result<Txn, BoxError> {
///         let mut staged = self.staged.lock().map_err(|_| "poisoned")?;
///         let id = format!("{}-{}", ctx.subtask_index(), staged.len());
///         staged.insert(id.clone(), Vec::new());
///         Ok(Txn(id))
///     }
///     fn write(&mut self, txn: &mut Txn, record: u64) -> Result<(), BoxError> {
///         let mut staged = self.staged.lock().map_err(|_| "poisoned")?;
///         staged.get_mut(&txn.0).ok_or("unknown transaction")?.push(record);
///         Ok(())
///     }
///     fn pre_commit(&mut self, _txn: &mut Txn) -> Result<(), BoxError> {
///         Ok(()) // staged rows are durable here
///     }
///     fn commit(&mut self, txn: &Txn) -> Result<(), BoxError> {
///         // Idempotent: a transaction committed before is gone from `staged`.
///         let rows = self.staged.lock().map_err(|_| "poisoned")?.remove(&txn.0);
///         self.visible.lock().map_err(|_| "poisoned")?.extend(rows.unwrap_or_default());
///         Ok(())
///     }
///     fn abort(&mut self, txn: &Txn) -> Result<(), BoxError> {
///         self.staged.lock().map_err(|_| "poisoned")?.remove(&txn.0);
///         Ok(())
///     }
/// }
///
/// let db = Db::default();
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))?;
/// env.enable_checkpointing(Duration::from_millis(20));
/// env.generate(300, |i| i).sink_to(TwoPhaseCommit(db.clone()), "db");
/// env.execute("two-phase commit")?;
/// let mut rows = db.visible.lock().unwrap().clone();
/// rows.sort();
/// assert_eq!(rows, (0..300).collect::<Vec<_>>());
/// # Ok::<(), WeirError>(())
/// ```
#[derive(Debug, Clone)]
pub struct TwoPhaseCommit<S>(pub S);

/// A pre-committed transaction and the checkpoint it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Pending<X> {
    checkpoint_id: u64,
    transaction: X,
}

const PENDING_STATE: &str = "two-phase-commit-pending";
const OPEN_STATE: &str = "two-phase-commit-open";

/// The writer of one [`TwoPhaseCommit`] subtask.
pub struct TwoPhaseCommitWriter<T, S: TwoPhaseCommitSink<T>> {
    sink: S,
    context: RuntimeContext,
    current: Option<S::Transaction>,
    pending: Vec<Pending<S::Transaction>>,
    metrics: CommitMetrics,
}

impl<T: Send + 'static, S: TwoPhaseCommitSink<T> + Clone> Sink<T> for TwoPhaseCommit<S> {
    type Writer = TwoPhaseCommitWriter<T, S>;
    fn create_writer(&self, context: &RuntimeContext) -> Result<Self::Writer, BoxError> {
        Ok(TwoPhaseCommitWriter {
            sink: self.0.clone(),
            context: context.clone(),
            current: None,
            pending: Vec::new(),
            metrics: CommitMetrics::new(context),
        })
    }
}

impl<T, S: TwoPhaseCommitSink<T>> TwoPhaseCommitWriter<T, S> {
    /// Commits every pending transaction of checkpoints up to `checkpoint_id`, oldest first.
    fn commit_up_to(&mut self, checkpoint_id: u64) -> Result<(), BoxError> {
        self.pending.sort_by_key(|p| p.checkpoint_id);
        while self
            .pending
            .first()
            .is_some_and(|p| p.checkpoint_id <= checkpoint_id)
        {
            let p = self.pending.remove(0);
            self.commit(&p.transaction)?;
            self.metrics.committed(Some(p.checkpoint_id));
        }
        self.metrics.set_pending(self.pending.len());
        Ok(())
    }

    /// Commits one transaction, unless this process lost its job: a stalled process that
    /// wakes up after another one took over must commit nothing.
    fn commit(&mut self, transaction: &S::Transaction) -> Result<(), BoxError> {
        self.context.fencing_token().check()?;
        self.sink.commit(transaction)
    }
}

impl<T: Send + 'static, S: TwoPhaseCommitSink<T>> SinkWriter<T> for TwoPhaseCommitWriter<T, S> {
    fn initialize_state(&mut self, ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
        // Recovery below commits and aborts transactions: not in a process that lost its job,
        // where they could be the new holder's.
        self.context.fencing_token().check()?;
        if starts_from_empty_state(&self.context) {
            if let Some(found) = self.sink.find_committed_output(&self.context)? {
                return Err(committed_output_error(&self.context, &found));
            }
        }
        let restored: Vec<Pending<S::Transaction>> =
            ctx.operator_state().get_union_list(PENDING_STATE)?;
        let open: Vec<S::Transaction> = ctx.operator_state().get_union_list(OPEN_STATE)?;
        // Everything pre-committed in a completed checkpoint is committed now: this covers
        // completion notices lost in the crash.
        for p in &restored {
            self.commit(&p.transaction)?;
            self.metrics.committed(None);
        }
        for transaction in &open {
            self.sink.abort(transaction)?;
        }
        let known: Vec<S::Transaction> = restored
            .into_iter()
            .map(|p| p.transaction)
            .chain(open)
            .collect();
        self.sink.abort_lingering(&self.context, &known)?;
        ctx.operator_state()
            .update_union_list::<Pending<S::Transaction>>(PENDING_STATE, &[])?;
        ctx.operator_state()
            .update_union_list::<S::Transaction>(OPEN_STATE, &[])?;
        self.current = Some(self.sink.begin_transaction(&self.context)?);
        Ok(())
    }

    fn write(&mut self, record: T) -> Result<(), BoxError> {
        if self.current.is_none() {
            self.current = Some(self.sink.begin_transaction(&self.context)?);
        }
        match self.current.as_mut() {
            Some(transaction) => self.sink.write(transaction, record),
            None => Err("no open transaction".into()),
        }
    }

    fn flush(&mut self, end_of_input: bool) -> Result<(), BoxError> {
        if !end_of_input {
            return Ok(());
        }
        if self.context.is_checkpointing() {
            // The final checkpoint's barrier follows the end of input: it pre-commits the open
            // transaction — with what operators emitted when their input ended — and its
            // completion commits it (FLIP-147).
            return Ok(());
        }
        // Without checkpoints nothing is replayed: commit everything now.
        if let Some(mut transaction) = self.current.take() {
            self.sink.pre_commit(&mut transaction)?;
            self.commit(&transaction)?;
        }
        self.commit_up_to(u64::MAX)
    }

    fn snapshot_state(&mut self, ctx: &mut FunctionStateContext<'_>) -> Result<(), BoxError> {
        let checkpoint_id = ctx
            .checkpoint_id()
            .ok_or("snapshot without a checkpoint id")?;
        if let Some(mut transaction) = self.current.take() {
            // A process that lost its job prepares nothing more: the new holder would never
            // hear of the transaction, which would linger in the external system.
            self.context.fencing_token().check()?;
            self.sink
                .pre_commit_for_checkpoint(&mut transaction, checkpoint_id)?;
            self.pending.push(Pending {
                checkpoint_id,
                transaction,
            });
            self.metrics
                .pre_committed(checkpoint_id, self.pending.len());
        }
        let next = self.sink.begin_transaction(&self.context)?;
        ctx.operator_state()
            .update_union_list(PENDING_STATE, &self.pending)?;
        ctx.operator_state()
            .update_union_list(OPEN_STATE, std::slice::from_ref(&next))?;
        self.current = Some(next);
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), BoxError> {
        self.commit_up_to(checkpoint_id)
    }

    fn close(&mut self) -> Result<(), BoxError> {
        // The stream has ended after the final checkpoint's barrier: the transaction begun
        // there stays empty.
        if let Some(transaction) = self.current.take() {
            self.sink.abort(&transaction)?;
        }
        Ok(())
    }
}
