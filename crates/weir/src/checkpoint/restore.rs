//! Which state each subtask of a (possibly rescaled) job starts from: pure assignment from
//! checkpoint metadata to the new graph, by operator uid.
//!
//! Keyed state moves by key group: a new subtask takes every key group of its new range from
//! whichever old subtask wrote it. Even-split list state is pooled and dealt out in
//! contiguous shares (unchanged when parallelism is unchanged); union list state goes whole
//! to every subtask; modulo-subtask list state goes from old subtask `s` to new subtask
//! `s mod P`. Items stored in files move as references: a subtask reads only its own. A
//! source's enumerator state goes to its coordinator.

use std::collections::HashMap;

use crate::checkpoint::metadata::{
    CheckpointMetadata, IncrementalKeyedStateHandle, KeyGroupEntry, KeyedStateHandle, ListItem,
    ListRedistribution, ListStateHandle, OperatorState,
};
use crate::graph::ids::NodeId;
use crate::graph::stream_graph::StreamGraph;
use crate::state::key_group::{key_group_range_for_operator, operator_index_for_key_group};

/// Why a checkpoint cannot be mapped onto the job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestoreError {
    /// The checkpoint holds state for operators the job no longer has.
    #[error(
        "checkpoint {checkpoint_id} holds state for operator uid(s) {uids:?} that the job no longer \
         has; give the operators their old uids, or set allow_non_restored_state to drop that state"
    )]
    NonRestoredState {
        /// The checkpoint.
        checkpoint_id: u64,
        /// Uids without an operator.
        uids: Vec<String>,
    },
    /// An operator's number of key groups changed, so its keyed state cannot be split.
    #[error(
        "operator `{uid}` had max parallelism {old} in checkpoint {checkpoint_id} but has {new} now; \
         keyed state can only be restored with the same number of key groups"
    )]
    MaxParallelismChanged {
        /// The operator.
        uid: String,
        /// The checkpoint.
        checkpoint_id: u64,
        /// Before.
        old: u32,
        /// Now.
        new: u32,
    },
}

/// What one new subtask of one operator restores.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SubtaskRestorePlan {
    /// Key-group blocks to read: (file, entry).
    pub keyed: Vec<(String, KeyGroupEntry)>,
    /// A backend's own files whose key groups overlap the subtask's (its backend cuts the
    /// subtask's range out of them).
    pub incremental: Vec<IncrementalKeyedStateHandle>,
    /// Operator list states after redistribution.
    pub lists: Vec<ListStateHandle>,
}

/// The restore plan of a whole job.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RestoreAssignment {
    /// Per operator, per new subtask.
    pub subtasks: HashMap<NodeId, Vec<SubtaskRestorePlan>>,
    /// Enumerator state per source.
    pub coordinators: HashMap<NodeId, Vec<u8>>,
}

/// Deals `items` out to `parallelism` subtasks in contiguous shares.
fn split_evenly<T: Clone>(items: &[T], parallelism: u32) -> Vec<Vec<T>> {
    let (n, p) = (items.len(), parallelism as usize);
    (0..p)
        .map(|i| items[i * n / p..(i + 1) * n / p].to_vec())
        .collect()
}

fn redistribute_lists(
    old: &OperatorState,
    parallelism: u32,
    max_parallelism: u32,
) -> Vec<Vec<ListStateHandle>> {
    let p = parallelism.max(1) as usize;
    let mut out: Vec<Vec<ListStateHandle>> = vec![Vec::new(); p];
    let mut names: Vec<(&str, ListRedistribution)> = Vec::new();
    for s in &old.subtasks {
        for l in &s.lists {
            if !names.iter().any(|(n, _)| *n == l.name) {
                names.push((&l.name, l.mode));
            }
        }
    }
    for (name, mode) in names {
        // Per old subtask: its index and its items of this state.
        let per_old: Vec<(u32, Vec<ListItem>)> = old
            .subtasks
            .iter()
            .map(|s| {
                let items = s
                    .lists
                    .iter()
                    .filter(|l| l.name == name)
                    .flat_map(|l| l.items.iter().cloned())
                    .collect();
                (s.subtask, items)
            })
            .collect();
        let all = || {
            per_old
                .iter()
                .flat_map(|(_, items)| items.iter().cloned())
                .collect::<Vec<_>>()
        };
        let shares: Vec<Vec<ListItem>> = match mode {
            ListRedistribution::Union => vec![all(); p],
            ListRedistribution::EvenSplit
                if old.parallelism == parallelism && per_old.len() == p =>
            {
                // Same parallelism: each subtask keeps exactly its own items.
                let mut by_subtask = vec![Vec::new(); p];
                for (subtask, items) in per_old {
                    if let Some(slot) = by_subtask.get_mut(subtask as usize) {
                        *slot = items;
                    }
                }
                by_subtask
            }
            ListRedistribution::EvenSplit => split_evenly(&all(), parallelism),
            ListRedistribution::ModuloSubtask => {
                let mut by_subtask = vec![Vec::new(); p];
                for (subtask, items) in per_old {
                    by_subtask[subtask as usize % p].extend(items);
                }
                by_subtask
            }
            ListRedistribution::KeyGroup(group) => {
                let mut by_subtask = vec![Vec::new(); p];
                let owner =
                    operator_index_for_key_group(max_parallelism, parallelism, group) as usize;
                if let Some(slot) = by_subtask.get_mut(owner) {
                    *slot = all();
                }
                by_subtask
            }
            ListRedistribution::Broadcast => {
                let old_p = old.parallelism.max(1);
                (0..p)
                    .map(|j| {
                        per_old
                            .iter()
                            .filter(|(s, _)| *s == j as u32 % old_p)
                            .flat_map(|(_, items)| items.iter().cloned())
                            .collect()
                    })
                    .collect()
            }
        };
        for (i, items) in shares.into_iter().enumerate() {
            out[i].push(ListStateHandle {
                name: name.to_string(),
                mode,
                items,
            });
        }
    }
    out
}

/// Maps `metadata` onto `graph`.
pub fn assign_state(
    metadata: &CheckpointMetadata,
    graph: &StreamGraph,
    allow_non_restored_state: bool,
) -> Result<RestoreAssignment, RestoreError> {
    let mut assignment = RestoreAssignment::default();
    let orphans: Vec<String> = metadata
        .operators
        .iter()
        .filter(|op| !graph.nodes.iter().any(|n| n.effective_uid() == op.uid))
        .map(|op| op.uid.clone())
        .collect();
    if !orphans.is_empty() && !allow_non_restored_state {
        return Err(RestoreError::NonRestoredState {
            checkpoint_id: metadata.checkpoint_id,
            uids: orphans,
        });
    }
    for node in &graph.nodes {
        let Some(old) = metadata.operator(&node.effective_uid()) else {
            continue;
        };
        let has_keyed = old.subtasks.iter().any(|s| s.keyed.is_some());
        if has_keyed && old.max_parallelism != node.max_parallelism {
            return Err(RestoreError::MaxParallelismChanged {
                uid: old.uid.clone(),
                checkpoint_id: metadata.checkpoint_id,
                old: old.max_parallelism,
                new: node.max_parallelism,
            });
        }
        let lists = redistribute_lists(old, node.parallelism, node.max_parallelism);
        let plans = lists
            .into_iter()
            .enumerate()
            .map(|(i, lists)| {
                let range =
                    key_group_range_for_operator(node.max_parallelism, node.parallelism, i as u32);
                let mut keyed = Vec::new();
                let mut incremental = Vec::new();
                for handle in old.subtasks.iter().filter_map(|s| s.keyed.as_ref()) {
                    match handle {
                        KeyedStateHandle::KeyGroups(h) => keyed.extend(
                            h.key_groups
                                .iter()
                                .filter(|e| range.contains(e.key_group))
                                .map(|e| (h.file.clone(), *e)),
                        ),
                        KeyedStateHandle::Incremental(h) if h.key_groups.overlaps(&range) => {
                            incremental.push(h.clone())
                        }
                        KeyedStateHandle::Incremental(_) => {}
                    }
                }
                SubtaskRestorePlan {
                    keyed,
                    incremental,
                    lists,
                }
            })
            .collect();
        assignment.subtasks.insert(node.id, plans);
        if let Some(state) = &old.coordinator {
            assignment.coordinators.insert(node.id, state.clone());
        }
    }
    Ok(assignment)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::metadata::{KeyGroupsStateHandle, OperatorSubtaskState};
    use crate::graph::partitioner::PartitionerKind;
    use crate::graph::stream_graph::test_graphs::TestGraph;
    use crate::graph::stream_graph::OperatorKind;
    use crate::runtime::stream_element::SnapshotType;

    fn entry(kg: u32) -> KeyGroupEntry {
        KeyGroupEntry {
            key_group: kg,
            offset: u64::from(kg) * 10,
            length: 10,
            crc32: kg,
        }
    }

    fn metadata(parallelism: u32) -> CheckpointMetadata {
        let subtasks = (0..parallelism)
            .map(|i| {
                let range = key_group_range_for_operator(128, parallelism, i);
                OperatorSubtaskState {
                    subtask: i,
                    keyed: Some(KeyedStateHandle::KeyGroups(KeyGroupsStateHandle {
                        file: format!("f{i}"),
                        key_groups: range.iter().map(entry).collect(),
                    })),
                    lists: vec![
                        ListStateHandle {
                            name: "splits".into(),
                            mode: ListRedistribution::EvenSplit,
                            items: (0..3).map(|k| ListItem::Inline(vec![i as u8, k])).collect(),
                        },
                        ListStateHandle {
                            name: "config".into(),
                            mode: ListRedistribution::Union,
                            items: vec![ListItem::Inline(vec![i as u8])],
                        },
                        ListStateHandle {
                            name: "transactions".into(),
                            mode: ListRedistribution::ModuloSubtask,
                            items: vec![ListItem::Inline(vec![100 + i as u8])],
                        },
                    ],
                }
            })
            .collect();
        CheckpointMetadata {
            checkpoint_id: 3,
            kind: SnapshotType::Savepoint,
            job_name: "j".into(),
            epoch: 1,
            timestamp_millis: 0,
            operators: vec![OperatorState {
                uid: "op".into(),
                name: "op".into(),
                parallelism,
                max_parallelism: 128,
                subtasks,
                coordinator: Some(vec![7]),
            }],
        }
    }

    fn graph(parallelism: u32, uid: &str) -> StreamGraph {
        let mut g = TestGraph::new();
        let s = g.node("src", OperatorKind::Source, 1);
        let o = g.node("op", OperatorKind::Operator, parallelism);
        g.edge(s, o, PartitionerKind::Hash);
        g.0.nodes[1].uid = Some(uid.into());
        g.0
    }

    #[test]
    fn rescaling_moves_every_key_group_exactly_once() {
        for (old_p, new_p) in [(2, 3), (3, 1), (1, 4), (4, 4)] {
            let a = assign_state(&metadata(old_p), &graph(new_p, "op"), false).unwrap();
            let plans = &a.subtasks[&NodeId(1)];
            assert_eq!(plans.len(), new_p as usize);
            let mut all: Vec<u32> = plans
                .iter()
                .flat_map(|p| p.keyed.iter().map(|(_, e)| e.key_group))
                .collect();
            all.sort_unstable();
            assert_eq!(all, (0..128).collect::<Vec<_>>(), "{old_p}->{new_p}");
            for (i, p) in plans.iter().enumerate() {
                let range = key_group_range_for_operator(128, new_p, i as u32);
                assert!(p.keyed.iter().all(|(_, e)| range.contains(e.key_group)));
            }
            assert_eq!(a.coordinators[&NodeId(1)], vec![7]);
        }
    }

    #[test]
    fn list_state_is_split_evenly_or_unioned() {
        let a = assign_state(&metadata(2), &graph(3, "op"), false).unwrap();
        let plans = &a.subtasks[&NodeId(1)];
        let splits: Vec<usize> = plans.iter().map(|p| p.lists[0].items.len()).collect();
        assert_eq!(splits, vec![2, 2, 2], "6 items over 3 subtasks");
        for p in plans {
            assert_eq!(p.lists[1].items.len(), 2, "union: everyone gets all");
        }
        // Same parallelism: each subtask keeps its own items.
        let a = assign_state(&metadata(2), &graph(2, "op"), false).unwrap();
        assert_eq!(
            a.subtasks[&NodeId(1)][1].lists[0].items[0],
            ListItem::Inline(vec![1, 0])
        );
    }

    #[test]
    fn modulo_subtask_state_goes_from_old_subtask_s_to_new_subtask_s_mod_p() {
        for (old_p, new_p) in [(3, 2), (2, 3), (4, 1), (2, 2)] {
            let a = assign_state(&metadata(old_p), &graph(new_p, "op"), false).unwrap();
            let plans = &a.subtasks[&NodeId(1)];
            let mut seen = Vec::new();
            for (i, plan) in plans.iter().enumerate() {
                for item in &plan.lists[2].items {
                    let ListItem::Inline(bytes) = item else {
                        panic!("inline")
                    };
                    let old = u32::from(bytes[0] - 100);
                    assert_eq!(old % new_p, i as u32, "{old_p}->{new_p}");
                    seen.push(old);
                }
            }
            seen.sort_unstable();
            assert_eq!(
                seen,
                (0..old_p).collect::<Vec<_>>(),
                "each old subtask once"
            );
        }
    }

    #[test]
    fn in_flight_records_go_to_their_key_groups_owner_or_by_broadcast_copy() {
        for (old_p, new_p) in [(2, 3), (3, 1), (1, 4), (2, 2)] {
            let mut m = metadata(old_p);
            for s in &mut m.operators[0].subtasks {
                // Each old subtask captured records of one key group it owned, and a copy
                // of the broadcast records it had not processed.
                let group = key_group_range_for_operator(128, old_p, s.subtask).start;
                s.lists.push(ListStateHandle {
                    name: format!("in-flight kg {group}"),
                    mode: ListRedistribution::KeyGroup(group),
                    items: vec![ListItem::Inline(vec![group as u8])],
                });
                s.lists.push(ListStateHandle {
                    name: "in-flight broadcast".into(),
                    mode: ListRedistribution::Broadcast,
                    items: vec![ListItem::Inline(vec![200 + s.subtask as u8])],
                });
            }
            let a = assign_state(&m, &graph(new_p, "op"), false).unwrap();
            let plans = &a.subtasks[&NodeId(1)];
            let mut groups = Vec::new();
            for (i, plan) in plans.iter().enumerate() {
                let range = key_group_range_for_operator(128, new_p, i as u32);
                for list in plan
                    .lists
                    .iter()
                    .filter(|l| l.name.starts_with("in-flight kg"))
                {
                    for item in &list.items {
                        let ListItem::Inline(bytes) = item else {
                            panic!("inline")
                        };
                        assert!(range.contains(u32::from(bytes[0])), "{old_p}->{new_p}");
                        groups.push(bytes[0]);
                    }
                }
                let broadcast: Vec<&ListItem> = plan
                    .lists
                    .iter()
                    .filter(|l| l.name == "in-flight broadcast")
                    .flat_map(|l| &l.items)
                    .collect();
                let from = 200 + (i as u32 % old_p) as u8;
                assert_eq!(
                    broadcast,
                    vec![&ListItem::Inline(vec![from])],
                    "{old_p}->{new_p}"
                );
            }
            assert_eq!(
                groups.len(),
                old_p as usize,
                "each key group's records once"
            );
        }
    }

    #[test]
    fn orphaned_state_needs_allow_non_restored_state() {
        let err = assign_state(&metadata(2), &graph(2, "renamed"), false).unwrap_err();
        assert!(
            matches!(err, RestoreError::NonRestoredState { .. }),
            "{err}"
        );
        let a = assign_state(&metadata(2), &graph(2, "renamed"), true).unwrap();
        assert!(a.subtasks.is_empty());
    }

    #[test]
    fn changed_max_parallelism_is_rejected() {
        let mut g = graph(2, "op");
        g.nodes[1].max_parallelism = 64;
        assert!(matches!(
            assign_state(&metadata(2), &g, false),
            Err(RestoreError::MaxParallelismChanged {
                old: 128,
                new: 64,
                ..
            })
        ));
    }
}
