//! The ExecutionGraph: each JobGraph vertex expanded to its parallel subtasks, each job edge
//! expanded to the channels between them.

use serde::{Deserialize, Serialize};

use crate::graph::ids::JobVertexId;
use crate::graph::job_graph::JobGraph;
use crate::graph::partitioner::PartitionerKind;
use crate::state::key_group::{key_group_range_for_operator, KeyGroupRange};

/// One subtask of a vertex.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SubtaskRef {
    /// The vertex.
    pub vertex: JobVertexId,
    /// Zero-based subtask index.
    pub subtask: u32,
}

/// A parallel instance of a chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionVertex {
    /// Which vertex and subtask.
    pub id: SubtaskRef,
    /// Parallelism of the vertex.
    pub parallelism: u32,
    /// Flink-style task name: `chain name (i/p)`.
    pub name: String,
    /// Key groups this subtask owns, for keyed operators in the chain.
    pub key_groups: KeyGroupRange,
}

/// A channel from one producer subtask to one consumer subtask.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionChannel {
    /// Index of the job edge (in [`JobGraph::edges`]) it belongs to.
    pub job_edge: usize,
    /// Partitioner of that edge.
    pub partitioner: PartitionerKind,
    /// Producing subtask.
    pub producer: SubtaskRef,
    /// Consuming subtask.
    pub consumer: SubtaskRef,
    /// Position among the producer's channels of this job edge (the partitioner's target).
    pub output_index: usize,
    /// Position in the consumer's input gate.
    pub input_index: usize,
}

/// The job as subtasks and channels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionGraph {
    /// The job's name.
    pub job_name: String,
    /// Subtasks, grouped by vertex in vertex order, then by subtask index.
    pub vertices: Vec<ExecutionVertex>,
    /// Channels, grouped by job edge, then producer, then output index.
    pub channels: Vec<ExecutionChannel>,
}

impl ExecutionGraph {
    /// Expands `job` into subtasks and channels.
    ///
    /// A forward edge gets one channel per subtask pair `i → i`; every other partitioner
    /// connects each producer subtask to each consumer subtask. A consumer numbers its input
    /// channels edge by edge, producer by producer.
    pub fn from_job_graph(job: &JobGraph) -> ExecutionGraph {
        let vertices = job
            .vertices
            .iter()
            .flat_map(|v| {
                (0..v.parallelism).map(move |i| ExecutionVertex {
                    id: SubtaskRef {
                        vertex: v.id,
                        subtask: i,
                    },
                    parallelism: v.parallelism,
                    name: format!("{} ({}/{})", v.name, i + 1, v.parallelism),
                    key_groups: key_group_range_for_operator(v.max_parallelism, v.parallelism, i),
                })
            })
            .collect();
        let mut channels = Vec::new();
        // Next free input index of each consumer subtask.
        let mut next_input = vec![Vec::new(); job.vertices.len()];
        for (v, vertex) in job.vertices.iter().enumerate() {
            next_input[v] = vec![0usize; vertex.parallelism as usize];
        }
        for (edge_index, edge) in job.edges.iter().enumerate() {
            let producers = job.vertices[edge.source.index()].parallelism;
            let consumers = job.vertices[edge.target.index()].parallelism;
            for p in 0..producers {
                let targets: Vec<u32> = if edge.partitioner.is_all_to_all() {
                    (0..consumers).collect()
                } else {
                    vec![p]
                };
                for (output_index, c) in targets.into_iter().enumerate() {
                    let slot = &mut next_input[edge.target.index()][c as usize];
                    channels.push(ExecutionChannel {
                        job_edge: edge_index,
                        partitioner: edge.partitioner,
                        producer: SubtaskRef {
                            vertex: edge.source,
                            subtask: p,
                        },
                        consumer: SubtaskRef {
                            vertex: edge.target,
                            subtask: c,
                        },
                        output_index,
                        input_index: *slot,
                    });
                    *slot += 1;
                }
            }
        }
        ExecutionGraph {
            job_name: job.job_name.clone(),
            vertices,
            channels,
        }
    }

    /// Subtasks of `vertex`.
    pub fn subtasks_of(&self, vertex: JobVertexId) -> impl Iterator<Item = &ExecutionVertex> {
        self.vertices.iter().filter(move |v| v.id.vertex == vertex)
    }

    /// Channels into `consumer`, ordered by input index.
    pub fn input_channels(&self, consumer: SubtaskRef) -> Vec<&ExecutionChannel> {
        let mut inputs: Vec<_> = self
            .channels
            .iter()
            .filter(|c| c.consumer == consumer)
            .collect();
        inputs.sort_by_key(|c| c.input_index);
        inputs
    }

    /// Channels of job edge `job_edge` out of `producer`, ordered by output index.
    pub fn output_channels(&self, job_edge: usize, producer: SubtaskRef) -> Vec<&ExecutionChannel> {
        let mut outputs: Vec<_> = self
            .channels
            .iter()
            .filter(|c| c.job_edge == job_edge && c.producer == producer)
            .collect();
        outputs.sort_by_key(|c| c.output_index);
        outputs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::stream_graph::test_graphs::TestGraph;
    use crate::graph::stream_graph::OperatorKind::{Operator, Source};
    use PartitionerKind::*;

    fn two_vertex_graph(p_up: u32, p_down: u32, partitioner: PartitionerKind) -> ExecutionGraph {
        let mut g = TestGraph::new();
        let s = g.node("src", Source, p_up);
        let m = g.node("op", Operator, p_down);
        g.edge(s, m, partitioner);
        g.0.chaining_enabled = false;
        ExecutionGraph::from_job_graph(&JobGraph::from_stream_graph(&g.0))
    }

    #[test]
    fn channel_counts_per_partitioner() {
        assert_eq!(two_vertex_graph(3, 3, Forward).channels.len(), 3);
        assert_eq!(two_vertex_graph(2, 3, Rebalance).channels.len(), 6);
        assert_eq!(two_vertex_graph(2, 4, Hash).channels.len(), 8);
        assert_eq!(two_vertex_graph(4, 2, Broadcast).channels.len(), 8);
        assert_eq!(two_vertex_graph(2, 4, Hash).vertices.len(), 6);
    }

    #[test]
    fn forward_connects_equal_indices() {
        let eg = two_vertex_graph(3, 3, Forward);
        for c in &eg.channels {
            assert_eq!(c.producer.subtask, c.consumer.subtask);
            assert_eq!((c.output_index, c.input_index), (0, 0));
        }
    }

    #[test]
    fn input_indices_are_dense_per_consumer() {
        let eg = two_vertex_graph(3, 2, Hash);
        for consumer in 0..2 {
            let inputs = eg.input_channels(SubtaskRef {
                vertex: JobVertexId(1),
                subtask: consumer,
            });
            let idx: Vec<usize> = inputs.iter().map(|c| c.input_index).collect();
            assert_eq!(idx, vec![0, 1, 2]);
            let producers: Vec<u32> = inputs.iter().map(|c| c.producer.subtask).collect();
            assert_eq!(producers, vec![0, 1, 2]);
        }
        let out = eg.output_channels(
            0,
            SubtaskRef {
                vertex: JobVertexId(0),
                subtask: 1,
            },
        );
        let targets: Vec<u32> = out.iter().map(|c| c.consumer.subtask).collect();
        assert_eq!(targets, vec![0, 1]);
    }

    #[test]
    fn subtasks_own_disjoint_key_group_ranges() {
        let eg = two_vertex_graph(1, 3, Hash);
        let ranges: Vec<_> = eg
            .subtasks_of(JobVertexId(1))
            .map(|v| v.key_groups)
            .collect();
        assert_eq!(ranges[0].start, 0);
        assert_eq!(ranges[2].end, 127);
        assert_eq!(ranges[0].end + 1, ranges[1].start);
        assert_eq!(eg.vertices[1].name, "op (1/3)");
    }

    #[test]
    fn union_numbers_channels_across_edges() {
        let mut g = TestGraph::new();
        let a = g.node("a", Source, 2);
        let b = g.node("b", Source, 1);
        let m = g.node("m", Operator, 1);
        g.edge(a, m, Rebalance);
        g.edge(b, m, Forward);
        let eg = ExecutionGraph::from_job_graph(&JobGraph::from_stream_graph(&g.0));
        let inputs = eg.input_channels(SubtaskRef {
            vertex: JobVertexId(2),
            subtask: 0,
        });
        assert_eq!(inputs.len(), 3);
        assert_eq!(inputs[2].producer.vertex, JobVertexId(1));
    }
}
