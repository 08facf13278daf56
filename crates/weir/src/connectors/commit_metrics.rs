//! The live metrics every exactly-once sink reports: what waits for its checkpoint to
//! complete, and how long records wait to become visible. Sinks in other crates (Kafka) use
//! it too, so that every exactly-once sink reports the same names.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::api::functions::RuntimeContext;
use crate::metrics::{Counter, Gauge};

/// A transactional or write-ahead-log sink's live metrics, registered in its subtask's
/// metric group: `pendingTransactions`, `commitLatencyMs` and `numCommittedTransactions`.
pub struct CommitMetrics {
    /// Transactions pre-committed and not yet committed (`pendingTransactions`).
    pending: Gauge,
    /// Milliseconds from the last committed transaction's pre-commit (at its checkpoint's
    /// barrier) to its commit: how long its records waited to become visible
    /// (`commitLatencyMs`).
    latency: Gauge,
    /// Transactions committed (`numCommittedTransactions`).
    committed: Counter,
    /// When each pending checkpoint's transaction was pre-committed, in this process.
    pre_committed: BTreeMap<u64, Instant>,
}

impl CommitMetrics {
    /// Registers the metrics in `context`'s metric group.
    pub fn new(context: &RuntimeContext) -> Self {
        let group = context.metric_group();
        Self {
            pending: group.gauge("pendingTransactions"),
            latency: group.gauge("commitLatencyMs"),
            committed: group.counter("numCommittedTransactions"),
            pre_committed: BTreeMap::new(),
        }
    }

    /// A transaction was pre-committed for `checkpoint_id`; `pending` transactions now wait.
    pub fn pre_committed(&mut self, checkpoint_id: u64, pending: usize) {
        self.pre_committed.insert(checkpoint_id, Instant::now());
        self.set_pending(pending);
    }

    /// A transaction was committed: the one of `checkpoint_id` if known (a transaction
    /// restored from a checkpoint was pre-committed by another process, so its latency is
    /// not known here).
    pub fn committed(&mut self, checkpoint_id: Option<u64>) {
        self.committed.inc();
        if let Some(at) = checkpoint_id.and_then(|id| self.pre_committed.remove(&id)) {
            self.latency.set(at.elapsed().as_millis() as i64);
        }
    }

    /// `pending` transactions wait for their checkpoint to complete.
    pub fn set_pending(&mut self, pending: usize) {
        self.pending.set(pending as i64);
    }
}
