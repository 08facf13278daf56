//! The JobGraph: the StreamGraph with operators fused into chains, one vertex per chain.
//! Chained operators run in one task and call each other directly.

use serde::{Deserialize, Serialize};

use crate::graph::ids::{EdgeId, JobVertexId, NodeId};
use crate::graph::partitioner::PartitionerKind;
use crate::graph::stream_graph::{ChainingStrategy, OperatorKind, StreamEdge, StreamGraph};

/// A chain of operators that runs as one task per subtask.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobVertex {
    /// Its id (index in [`JobGraph::vertices`]).
    pub id: JobVertexId,
    /// The chain's name: operator names joined by ` -> `.
    pub name: String,
    /// Operators of the chain in topological order; the first is the head.
    pub operators: Vec<NodeId>,
    /// Number of parallel subtasks.
    pub parallelism: u32,
    /// Number of key groups of the head operator (the only one of the chain that can be
    /// keyed, since a keyed input is a hash edge, which never chains).
    pub max_parallelism: u32,
    /// Whether the head is a source.
    pub is_source: bool,
}

impl JobVertex {
    /// The head operator, which receives the vertex's input (or is its source).
    pub fn head(&self) -> NodeId {
        self.operators[0]
    }
}

/// A connection between two chains, realised by channels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEdge {
    /// Producing vertex.
    pub source: JobVertexId,
    /// Consuming vertex.
    pub target: JobVertexId,
    /// The StreamGraph edge it realises.
    pub stream_edge: EdgeId,
    /// How records are distributed.
    pub partitioner: PartitionerKind,
}

/// The job as chains of operators.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobGraph {
    /// The job's name.
    pub job_name: String,
    /// Chains, indexed by [`JobVertexId`], in topological order.
    pub vertices: Vec<JobVertex>,
    /// Edges between chains, in StreamGraph edge order.
    pub edges: Vec<JobEdge>,
    /// StreamGraph edges inside chains (no channel).
    pub chained_edges: Vec<EdgeId>,
    /// The vertex of each StreamGraph node, indexed by [`NodeId`].
    pub vertex_of_node: Vec<JobVertexId>,
}

/// Whether `edge` may be chained, as Flink decides it — the downstream has a single input,
/// the edge is forward, parallelism is equal, the downstream chains to its predecessor
/// (strategy `Always`), the upstream allows successors (not `Never`), and chaining is enabled
/// for the job — with one addition: an edge between two operators of parallelism 1 chains
/// whatever its partitioner, since a hash, rebalance or broadcast exchange between single
/// subtasks sends every record to the one subtask there is, as a forward edge does. Handing
/// records to another thread costs more than the work on them in a keyed aggregation (the
/// instructions are the same; the records change cores), so a parallelism-1 keyed job runs
/// as one task.
pub fn is_chainable(graph: &StreamGraph, edge: &StreamEdge) -> bool {
    let upstream = graph.node(edge.source);
    let downstream = graph.node(edge.target);
    let single_subtasks = upstream.parallelism == 1 && downstream.parallelism == 1;
    graph.chaining_enabled
        && graph.in_edges(edge.target).count() == 1
        && (edge.partitioner == PartitionerKind::Forward || single_subtasks)
        && upstream.parallelism == downstream.parallelism
        && downstream.chaining == ChainingStrategy::Always
        && upstream.chaining != ChainingStrategy::Never
        && downstream.kind != OperatorKind::Source
}

impl JobGraph {
    /// Builds the chains of `graph`, which must be valid ([`StreamGraph::validate`]).
    ///
    /// Nodes are visited in topological order: a node joins the chain of its single
    /// upstream when that edge is chainable, and starts a new chain otherwise. A chain may
    /// branch (an operator with several chained successors), but never merges.
    pub fn from_stream_graph(graph: &StreamGraph) -> JobGraph {
        let mut vertices: Vec<JobVertex> = Vec::new();
        let mut vertex_of_node: Vec<JobVertexId> = Vec::with_capacity(graph.nodes.len());
        let mut chained_edges = Vec::new();
        for node in &graph.nodes {
            let mut inputs = graph.in_edges(node.id);
            let chained_to = match (inputs.next(), inputs.next()) {
                (Some(edge), None) if is_chainable(graph, edge) => Some(edge),
                _ => None,
            };
            match chained_to {
                Some(edge) => {
                    let vertex = vertex_of_node[edge.source.index()];
                    let v = &mut vertices[vertex.index()];
                    v.operators.push(node.id);
                    v.name = format!("{} -> {}", v.name, node.name);
                    chained_edges.push(edge.id);
                    vertex_of_node.push(vertex);
                }
                None => {
                    let id = JobVertexId(vertices.len() as u32);
                    vertices.push(JobVertex {
                        id,
                        name: node.name.clone(),
                        operators: vec![node.id],
                        parallelism: node.parallelism,
                        max_parallelism: node.max_parallelism,
                        is_source: node.kind == OperatorKind::Source,
                    });
                    vertex_of_node.push(id);
                }
            }
        }
        let edges = graph
            .edges
            .iter()
            .filter(|e| !chained_edges.contains(&e.id))
            .map(|e| JobEdge {
                source: vertex_of_node[e.source.index()],
                target: vertex_of_node[e.target.index()],
                stream_edge: e.id,
                partitioner: e.partitioner,
            })
            .collect();
        JobGraph {
            job_name: graph.job_name.clone(),
            vertices,
            edges,
            chained_edges,
            vertex_of_node,
        }
    }

    /// Whether a StreamGraph edge lies inside a chain.
    pub fn is_chained(&self, edge: EdgeId) -> bool {
        self.chained_edges.contains(&edge)
    }

    /// The index in [`JobGraph::edges`] of the job edge realising a StreamGraph edge.
    pub fn job_edge_of(&self, edge: EdgeId) -> Option<usize> {
        self.edges.iter().position(|e| e.stream_edge == edge)
    }

    /// Job edges into `vertex`, in order (this order numbers the input gate's channels).
    pub fn in_edges(&self, vertex: JobVertexId) -> impl Iterator<Item = (usize, &JobEdge)> {
        self.edges
            .iter()
            .enumerate()
            .filter(move |(_, e)| e.target == vertex)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::stream_graph::test_graphs::TestGraph;
    use crate::graph::stream_graph::OperatorKind::{Operator, Sink, Source};
    use PartitionerKind::*;

    fn chains(g: &StreamGraph) -> Vec<Vec<u32>> {
        JobGraph::from_stream_graph(g)
            .vertices
            .iter()
            .map(|v| v.operators.iter().map(|n| n.0).collect())
            .collect()
    }

    #[test]
    fn forward_edges_of_equal_parallelism_chain() {
        let mut g = TestGraph::new();
        let s = g.node("Source: gen", Source, 2);
        let m = g.node("Map", Operator, 2);
        let f = g.node("Filter", Operator, 2);
        let k = g.node("Sink: out", Sink, 2);
        g.edge(s, m, Forward);
        g.edge(m, f, Forward);
        g.edge(f, k, Forward);
        let jg = JobGraph::from_stream_graph(&g.0);
        assert_eq!(chains(&g.0), vec![vec![0, 1, 2, 3]]);
        assert_eq!(
            jg.vertices[0].name,
            "Source: gen -> Map -> Filter -> Sink: out"
        );
        assert!(jg.edges.is_empty());
    }

    #[test]
    fn hash_and_rebalance_edges_break_chains() {
        for partitioner in [Hash, Rebalance, Broadcast] {
            let mut g = TestGraph::new();
            let s = g.node("src", Source, 2);
            let c = g.node("count", Operator, 2);
            let k = g.node("sink", Sink, 2);
            g.edge(s, c, partitioner);
            g.edge(c, k, Forward);
            assert_eq!(chains(&g.0), vec![vec![0], vec![1, 2]], "{partitioner}");
            let jg = JobGraph::from_stream_graph(&g.0);
            assert_eq!(jg.edges.len(), 1);
            assert_eq!(jg.edges[0].partitioner, partitioner);
        }
    }

    #[test]
    fn any_exchange_between_single_subtasks_chains() {
        for partitioner in [Hash, Rebalance, Broadcast] {
            let mut g = TestGraph::new();
            let s = g.node("src", Source, 1);
            let c = g.node("count", Operator, 1);
            let k = g.node("sink", Sink, 1);
            g.edge(s, c, partitioner);
            g.edge(c, k, Forward);
            assert_eq!(chains(&g.0), vec![vec![0, 1, 2]], "{partitioner}");
            assert!(JobGraph::from_stream_graph(&g.0).edges.is_empty());
            // Not when chaining is off for the job.
            g.0.chaining_enabled = false;
            assert_eq!(chains(&g.0).len(), 3, "{partitioner}");
        }
    }

    #[test]
    fn parallelism_mismatch_breaks_chain() {
        let mut g = TestGraph::new();
        let s = g.node("src", Source, 1);
        let m = g.node("map", Operator, 4);
        g.edge(s, m, Rebalance);
        assert_eq!(chains(&g.0), vec![vec![0], vec![1]]);
    }

    #[test]
    fn disabled_chaining_on_either_side_breaks_chain() {
        let mut g = TestGraph::new();
        let s = g.node("src", Source, 1);
        let m = g.node("map", Operator, 1);
        let k = g.node("sink", Sink, 1);
        g.edge(s, m, Forward);
        g.edge(m, k, Forward);
        g.0.nodes[1].chaining = ChainingStrategy::Never;
        assert_eq!(chains(&g.0), vec![vec![0], vec![1], vec![2]]);
    }

    #[test]
    fn start_new_chain_only_breaks_upstream_link() {
        let mut g = TestGraph::new();
        let s = g.node("src", Source, 1);
        let m = g.node("map", Operator, 1);
        let k = g.node("sink", Sink, 1);
        g.edge(s, m, Forward);
        g.edge(m, k, Forward);
        g.0.nodes[1].chaining = ChainingStrategy::Head;
        assert_eq!(chains(&g.0), vec![vec![0], vec![1, 2]]);
    }

    #[test]
    fn job_wide_chaining_switch() {
        let mut g = TestGraph::new();
        let s = g.node("src", Source, 1);
        let m = g.node("map", Operator, 1);
        g.edge(s, m, Forward);
        g.0.chaining_enabled = false;
        assert_eq!(chains(&g.0), vec![vec![0], vec![1]]);
    }

    #[test]
    fn union_input_never_chains() {
        // Two sources forward into one map: the map has two inputs, so it heads its own chain.
        let mut g = TestGraph::new();
        let a = g.node("a", Source, 2);
        let b = g.node("b", Source, 2);
        let m = g.node("map", Operator, 2);
        g.edge(a, m, Forward);
        g.edge(b, m, Forward);
        let jg = JobGraph::from_stream_graph(&g.0);
        assert_eq!(chains(&g.0), vec![vec![0], vec![1], vec![2]]);
        assert_eq!(jg.in_edges(JobVertexId(2)).count(), 2);
    }

    #[test]
    fn branching_chain_keeps_both_successors() {
        let mut g = TestGraph::new();
        let s = g.node("src", Source, 1);
        let m1 = g.node("m1", Operator, 1);
        let m2 = g.node("m2", Operator, 1);
        g.edge(s, m1, Forward);
        g.edge(s, m2, Forward);
        assert_eq!(chains(&g.0), vec![vec![0, 1, 2]]);
    }
}
