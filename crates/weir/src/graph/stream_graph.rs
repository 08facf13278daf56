//! The StreamGraph: one node per API call, edges carrying partitioners. Plain data, so it can
//! be printed, serialized and translated by pure functions.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::error::GraphError;
use crate::graph::ids::{EdgeId, NodeId};
use crate::graph::partitioner::PartitionerKind;

/// What role an operator plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperatorKind {
    /// Produces records, has no inputs.
    Source,
    /// Transforms records.
    Operator,
    /// Consumes records, has no outputs.
    Sink,
}

/// Whether an operator may be chained with its neighbours (Flink's `ChainingStrategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChainingStrategy {
    /// Chains with upstream and downstream where the edge allows.
    Always,
    /// Starts a new chain (`start_new_chain`), but downstream may chain to it.
    Head,
    /// Never chains (`disable_chaining`).
    Never,
}

/// One operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamNode {
    /// Its id (index in [`StreamGraph::nodes`]).
    pub id: NodeId,
    /// Display name.
    pub name: String,
    /// Stable id that maps state to the operator across job versions.
    pub uid: Option<String>,
    /// Source, operator or sink.
    pub kind: OperatorKind,
    /// Number of parallel subtasks.
    pub parallelism: u32,
    /// Number of key groups.
    pub max_parallelism: u32,
    /// Chaining strategy.
    pub chaining: ChainingStrategy,
    /// Whether it holds keyed state (its input is hash partitioned by key).
    pub keyed: bool,
    /// Rust type of the records it emits.
    pub output_type: String,
    /// A sink that makes output visible when a checkpoint completes (two-phase commit,
    /// write-ahead log): recovery never restores a checkpoint older than one it was
    /// notified of.
    #[serde(default)]
    pub commits_on_checkpoint: bool,
    /// How its records get event time, if it gives them any (a source's watermark strategy,
    /// or `assign_timestamps_and_watermarks`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermarks: Option<String>,
}

impl StreamNode {
    /// The uid that maps this operator's state: the one given with `uid()`, or one derived
    /// from its position in the graph (stable only while the graph's shape is unchanged).
    pub fn effective_uid(&self) -> String {
        self.uid
            .clone()
            .unwrap_or_else(|| format!("auto-{}", self.id.0))
    }
}

/// A connection between two operators.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamEdge {
    /// Its id (index in [`StreamGraph::edges`]).
    pub id: EdgeId,
    /// Producing operator.
    pub source: NodeId,
    /// Consuming operator.
    pub target: NodeId,
    /// How records are distributed.
    pub partitioner: PartitionerKind,
    /// The side output of `source` the edge carries (`None`: its main output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub side_output: Option<String>,
    /// Which input of `target` it feeds: 1, or 2 for a two-input operator's second.
    #[serde(default = "first_input")]
    pub input: u8,
}

fn first_input() -> u8 {
    1
}

/// The logical job: operators and their connections, in topological order (an operator's
/// inputs always have smaller ids).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamGraph {
    /// The job's name.
    pub job_name: String,
    /// Whether chaining is enabled for the job.
    pub chaining_enabled: bool,
    /// Operators, indexed by [`NodeId`].
    pub nodes: Vec<StreamNode>,
    /// Edges, indexed by [`EdgeId`].
    pub edges: Vec<StreamEdge>,
}

impl StreamGraph {
    /// Names of the sinks that commit output on checkpoint completion.
    pub fn committing_sinks(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.commits_on_checkpoint)
            .map(|n| n.name.clone())
            .collect()
    }

    /// The node with id `id`.
    pub fn node(&self, id: NodeId) -> &StreamNode {
        &self.nodes[id.index()]
    }

    /// Edges into `node`, in creation order.
    pub fn in_edges(&self, node: NodeId) -> impl Iterator<Item = &StreamEdge> {
        self.edges.iter().filter(move |e| e.target == node)
    }

    /// Edges out of `node`, in creation order.
    pub fn out_edges(&self, node: NodeId) -> impl Iterator<Item = &StreamEdge> {
        self.edges.iter().filter(move |e| e.source == node)
    }

    /// Checks what every later layer relies on: ids match positions, edges point forward,
    /// parallelism is in range, forward edges keep parallelism, and uids are unique.
    pub fn validate(&self) -> Result<(), GraphError> {
        if self.nodes.is_empty() {
            return Err(GraphError::EmptyJob);
        }
        if !self.nodes.iter().any(|n| n.kind == OperatorKind::Source) {
            return Err(GraphError::NoSource);
        }
        let mut uids: HashMap<&str, &str> = HashMap::new();
        for (i, node) in self.nodes.iter().enumerate() {
            if node.id.index() != i {
                return Err(GraphError::InvalidApiUse(format!(
                    "node `{}` has id {} at position {i}",
                    node.name, node.id
                )));
            }
            if node.parallelism == 0 || node.parallelism > node.max_parallelism {
                return Err(GraphError::InvalidParallelism {
                    operator: node.name.clone(),
                    parallelism: node.parallelism,
                    reason: format!(
                        "must be between 1 and the max parallelism {}",
                        node.max_parallelism
                    ),
                });
            }
            if let Some(uid) = &node.uid {
                if let Some(first) = uids.insert(uid, &node.name) {
                    return Err(GraphError::DuplicateUid {
                        uid: uid.clone(),
                        first: first.to_string(),
                        second: node.name.clone(),
                    });
                }
            }
        }
        for (i, edge) in self.edges.iter().enumerate() {
            let (source, target) = (self.node(edge.source), self.node(edge.target));
            if edge.id.index() != i || edge.source >= edge.target {
                return Err(GraphError::InvalidApiUse(format!(
                    "edge {} from `{}` to `{}` is not in topological order",
                    edge.id, source.name, target.name
                )));
            }
            if edge.partitioner == PartitionerKind::Forward
                && source.parallelism != target.parallelism
            {
                return Err(GraphError::ForwardParallelismMismatch {
                    upstream: source.name.clone(),
                    upstream_parallelism: source.parallelism,
                    downstream: target.name.clone(),
                    downstream_parallelism: target.parallelism,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod test_graphs {
    //! Hand-built graphs for the translation tests.
    use super::*;

    /// A graph builder for tests: nodes with parallelism, edges with partitioners.
    pub struct TestGraph(pub StreamGraph);

    impl TestGraph {
        pub fn new() -> Self {
            Self(StreamGraph {
                job_name: "test".into(),
                chaining_enabled: true,
                nodes: vec![],
                edges: vec![],
            })
        }
        pub fn node(&mut self, name: &str, kind: OperatorKind, parallelism: u32) -> NodeId {
            let id = NodeId(self.0.nodes.len() as u32);
            self.0.nodes.push(StreamNode {
                id,
                name: name.into(),
                uid: None,
                kind,
                parallelism,
                max_parallelism: 128,
                chaining: ChainingStrategy::Always,
                keyed: false,
                output_type: "u64".into(),
                commits_on_checkpoint: false,
                watermarks: None,
            });
            id
        }
        pub fn edge(
            &mut self,
            source: NodeId,
            target: NodeId,
            partitioner: PartitionerKind,
        ) -> EdgeId {
            let id = EdgeId(self.0.edges.len() as u32);
            self.0.edges.push(StreamEdge {
                id,
                source,
                target,
                partitioner,
                side_output: None,
                input: 1,
            });
            id
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_graphs::TestGraph;
    use super::*;

    #[test]
    fn forward_with_parallelism_change_is_rejected() {
        let mut g = TestGraph::new();
        let s = g.node("src", OperatorKind::Source, 2);
        let m = g.node("map", OperatorKind::Operator, 3);
        g.edge(s, m, PartitionerKind::Forward);
        let err = g.0.validate().unwrap_err();
        assert!(
            matches!(err, GraphError::ForwardParallelismMismatch { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("`src` has parallelism 2"), "{err}");
    }

    #[test]
    fn duplicate_uids_are_rejected() {
        let mut g = TestGraph::new();
        let s = g.node("src", OperatorKind::Source, 1);
        let m = g.node("map", OperatorKind::Operator, 1);
        g.edge(s, m, PartitionerKind::Forward);
        g.0.nodes[0].uid = Some("x".into());
        g.0.nodes[1].uid = Some("x".into());
        assert!(matches!(
            g.0.validate(),
            Err(GraphError::DuplicateUid { .. })
        ));
    }

    #[test]
    fn parallelism_above_max_is_rejected() {
        let mut g = TestGraph::new();
        g.node("src", OperatorKind::Source, 129);
        assert!(matches!(
            g.0.validate(),
            Err(GraphError::InvalidParallelism { .. })
        ));
    }
}
