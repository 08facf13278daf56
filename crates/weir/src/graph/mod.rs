//! The graph layers of a job: StreamGraph → JobGraph → ExecutionGraph, all plain data built
//! by pure functions, and their rendering.

pub mod execution_graph;
pub mod explain;
pub mod ids;
pub mod job_graph;
pub mod partitioner;
pub mod stream_graph;

pub use execution_graph::{ExecutionChannel, ExecutionGraph, ExecutionVertex, SubtaskRef};
pub use explain::{ExecutionPlan, PhysicalPlan};
pub use ids::{EdgeId, JobVertexId, NodeId};
pub use job_graph::{is_chainable, JobEdge, JobGraph, JobVertex};
pub use partitioner::PartitionerKind;
pub use stream_graph::{ChainingStrategy, OperatorKind, StreamEdge, StreamGraph, StreamNode};
