//! The exactly-once sink's bookkeeping, free of I/O: transactional ids, which restored
//! subtask's transactions a new subtask takes care of, and which producer slot is free.
//!
//! Each sink subtask owns a small pool of transactional producers ("slots"), with ids
//! `{prefix}-{operator uid}-{subtask}-{slot}`. A transaction runs on a slot from its first
//! record until its checkpoint's commit is confirmed; the slot is not reused before that. A
//! transaction's fate is the first marker of its producer id after its records (see
//! `LogReader::transaction_outcome`); records sent again after an abort carry a header naming
//! the original, so that the re-send is recognized after another crash. After a restart the
//! same ids come back, so initializing them fences the producers of the failed run and aborts
//! what they left open.

use serde::{Deserialize, Serialize};

/// A record of a transaction, kept (and checkpointed) until its commit is confirmed so that
/// it can be sent again if the broker aborted the transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BufferedRecord {
    /// Topic.
    pub topic: String,
    /// The partition it went to (fixed once delivered, so a re-send goes to the same one).
    pub partition: i32,
    /// Key bytes.
    pub key: Option<Vec<u8>>,
    /// Value bytes.
    pub value: Option<Vec<u8>>,
    /// Timestamp (ms), when set.
    pub timestamp: Option<i64>,
}

/// Where a delivered record of a transaction sits: its fate is the transaction's fate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeRecord {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
}

/// A transaction flushed at a checkpoint barrier and not yet known to be committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingTransaction {
    /// The checkpoint whose completion commits it.
    pub checkpoint_id: u64,
    /// The producer slot it runs on.
    pub slot: u32,
    /// One of its delivered records (`None` when it has no records).
    pub probe: Option<ProbeRecord>,
    /// Its records, for a re-send.
    pub records: Vec<BufferedRecord>,
}

/// What one sink subtask checkpoints (as modulo-subtask list state: after a rescale, old
/// subtask `s` goes to new subtask `s mod P`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtaskTransactions {
    /// `{prefix}-{operator uid}`.
    pub id_base: String,
    /// The subtask.
    pub subtask: u32,
    /// Its number of producer slots.
    pub pool_size: u32,
    /// Its pending transactions.
    pub pending: Vec<PendingTransaction>,
}

/// [`SubtaskTransactions`] by reference, serialized identically, so that a snapshot does not
/// copy the pending records first.
#[derive(Debug, Serialize)]
pub struct SubtaskTransactionsRef<'a> {
    /// `{prefix}-{operator uid}`.
    pub id_base: &'a str,
    /// The subtask.
    pub subtask: u32,
    /// Its number of producer slots.
    pub pool_size: u32,
    /// Its pending transactions.
    pub pending: &'a [PendingTransaction],
}

/// The transactional id of `slot` of `subtask`.
pub fn transactional_id(id_base: &str, subtask: u32, slot: u32) -> String {
    format!("{id_base}-{subtask}-{slot}")
}

/// `{prefix}-{operator uid}`.
pub fn id_base(prefix: &str, operator_uid: &str) -> String {
    format!("{prefix}-{operator_uid}")
}

/// The restored subtasks whose transactions subtask `subtask` of `parallelism` resolves and
/// whose slots it fences: old subtask `s` goes to new subtask `s % parallelism`, so each old
/// subtask is handled exactly once, whatever the change of parallelism.
pub fn restored_for_subtask(
    restored: &[SubtaskTransactions],
    subtask: u32,
    parallelism: u32,
) -> Vec<&SubtaskTransactions> {
    restored
        .iter()
        .filter(|r| r.subtask % parallelism.max(1) == subtask)
        .collect()
}

/// Every transactional id a subtask must fence before writing: its own slots (`own`: id
/// base, subtask, pool size; none when it writes without transactions) and those of the
/// restored subtasks it handles — their recorded slots plus one, because the pool may have
/// grown by one after their last checkpoint (deduplicated, in a stable order).
pub fn ids_to_fence(
    own: Option<(&str, u32, u32)>,
    handled: &[&SubtaskTransactions],
) -> Vec<String> {
    let mut ids: Vec<String> = own
        .map(|(base, subtask, pool_size)| {
            (0..pool_size)
                .map(|slot| transactional_id(base, subtask, slot))
                .collect()
        })
        .unwrap_or_default();
    for restored in handled {
        for slot in 0..=restored.pool_size {
            ids.push(transactional_id(&restored.id_base, restored.subtask, slot));
        }
    }
    let mut seen = std::collections::HashSet::new();
    ids.retain(|id| seen.insert(id.clone()));
    ids
}

/// The lowest slot no pending transaction holds, if any.
pub fn free_slot(pending: &[PendingTransaction], pool_size: u32) -> Option<u32> {
    (0..pool_size).find(|slot| pending.iter().all(|p| p.slot != *slot))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn restored(subtask: u32, pending_slots: &[u32]) -> SubtaskTransactions {
        SubtaskTransactions {
            id_base: "p-sink".into(),
            subtask,
            pool_size: 3,
            pending: pending_slots
                .iter()
                .map(|slot| PendingTransaction {
                    checkpoint_id: 1,
                    slot: *slot,
                    probe: None,
                    records: vec![],
                })
                .collect(),
        }
    }

    #[test]
    fn every_old_subtask_is_handled_exactly_once_after_any_rescale() {
        let old: Vec<_> = (0..5).map(|s| restored(s, &[])).collect();
        for new_parallelism in 1..8 {
            let mut handled: Vec<u32> = (0..new_parallelism)
                .flat_map(|i| restored_for_subtask(&old, i, new_parallelism))
                .map(|r| r.subtask)
                .collect();
            handled.sort_unstable();
            assert_eq!(
                handled,
                vec![0, 1, 2, 3, 4],
                "parallelism {new_parallelism}"
            );
        }
    }

    #[test]
    fn fencing_covers_own_and_inherited_slots_once() {
        let old = [restored(0, &[]), restored(2, &[])];
        let handled = restored_for_subtask(&old, 0, 2);
        let ids = ids_to_fence(Some(("p-sink", 0, 3)), &handled);
        assert_eq!(
            ids,
            vec![
                "p-sink-0-0",
                "p-sink-0-1",
                "p-sink-0-2",
                "p-sink-0-3",
                "p-sink-2-0",
                "p-sink-2-1",
                "p-sink-2-2",
                "p-sink-2-3"
            ]
        );
        // Without transactions of its own, a subtask still fences what it inherits.
        assert_eq!(ids_to_fence(None, &handled).len(), 8);
    }

    #[test]
    fn the_borrowed_state_reads_back_as_the_owned_one() {
        let owned = restored(3, &[1, 2]);
        let borrowed = SubtaskTransactionsRef {
            id_base: &owned.id_base,
            subtask: owned.subtask,
            pool_size: owned.pool_size,
            pending: &owned.pending,
        };
        let bytes = postcard::to_allocvec(&borrowed).unwrap();
        assert_eq!(
            postcard::from_bytes::<SubtaskTransactions>(&bytes).unwrap(),
            owned
        );
    }

    #[test]
    fn a_slot_with_a_pending_transaction_is_not_reused() {
        let pending = restored(0, &[0, 2]).pending;
        assert_eq!(free_slot(&pending, 3), Some(1));
        let pending = restored(0, &[0, 1, 2]).pending;
        assert_eq!(free_slot(&pending, 3), None);
        assert_eq!(free_slot(&[], 3), Some(0));
        assert_eq!(
            transactional_id(&id_base("app", "counts"), 1, 2),
            "app-counts-1-2"
        );
    }
}
