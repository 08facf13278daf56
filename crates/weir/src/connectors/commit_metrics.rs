//! The live metrics every exactly-once sink reports: what waits for its checkpoint to
//! complete, and how long records wait to become visible.

use crate::api::functions::RuntimeContext;
use crate::metrics::{Counter, Gauge};

/// A transactional or write-ahead-log sink's live metrics.
pub(crate) struct CommitMetrics {
    /// Transactions pre-committed and not yet committed (`pendingTransactions`).
    pub(crate) pending: Gauge,
    /// Milliseconds from the last committed transaction's pre-commit (at its checkpoint's
    /// barrier) to its commit: how long its records waited to become visible
    /// (`commitLatencyMs`).
    latency: Gauge,
    /// Transactions committed (`numCommittedTransactions`).
    committed: Counter,
    /// When each pending checkpoint's transaction was pre-committed, in this process.
    pub(crate) pre_committed: std::collections::BTreeMap<u64, std::time::Instant>,
}

impl CommitMetrics {
    pub(crate) fn new(context: &RuntimeContext) -> Self {
        let group = context.metric_group();
        Self {
            pending: group.gauge("pendingTransactions"),
            latency: group.gauge("commitLatencyMs"),
            committed: group.counter("numCommittedTransactions"),
            pre_committed: std::collections::BTreeMap::new(),
        }
    }

    pub(crate) fn committed(&mut self, checkpoint_id: Option<u64>) {
        self.committed.inc();
        if let Some(at) = checkpoint_id.and_then(|id| self.pre_committed.remove(&id)) {
            self.latency.set(at.elapsed().as_millis() as i64);
        }
    }
}
