//! A job ready to deploy: its plan plus what instantiates each node.

use std::sync::Arc;

use crate::config::ExecutionConfig;
use crate::graph::explain::ExecutionPlan;
use crate::runtime::operator_factory::NodeFactory;
use crate::runtime::stream_type::{SharedAny, StreamType};

/// Everything the runtime needs to run a job: the translated plan and, per node and edge,
/// the typed factories that the untyped plan refers to by index.
pub struct JobDefinition {
    /// The four layers.
    pub plan: ExecutionPlan,
    /// The job's configuration.
    pub config: ExecutionConfig,
    /// How each node is instantiated, indexed by node id.
    pub factories: Vec<NodeFactory>,
    /// The output record type of each node, indexed by node id.
    pub output_types: Vec<Arc<dyn StreamType>>,
    /// The key selector of each hash edge, indexed by edge id.
    pub key_selectors: Vec<Option<SharedAny>>,
    /// The record type of each side-output edge (others carry their source's output type),
    /// indexed by edge id.
    pub edge_types: Vec<Option<Arc<dyn StreamType>>>,
}

impl JobDefinition {
    /// The type of the records edge `edge` carries.
    pub fn edge_type(&self, edge: crate::graph::ids::EdgeId) -> &Arc<dyn StreamType> {
        let source = self.plan.stream_graph.edges[edge.index()].source;
        self.edge_types
            .get(edge.index())
            .and_then(Option::as_ref)
            .unwrap_or(&self.output_types[source.index()])
    }

    /// A fingerprint of the job's graph: its four layers and the record type of every edge.
    /// Processes of one cluster build the job from the same code; a TaskManager whose
    /// fingerprint differs from its JobManager's was built from other code and is refused.
    /// Checkpoint settings that do not change the graph are left out, so that, say, a
    /// different checkpoint interval does not matter.
    pub fn fingerprint(&self) -> u64 {
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        // The plan serializes deterministically (vectors and ordered maps only).
        match serde_json::to_vec(&self.plan) {
            Ok(bytes) => hasher.update(&bytes),
            Err(e) => hasher.update(e.to_string().as_bytes()),
        }
        for edge in &self.plan.stream_graph.edges {
            hasher.update(self.edge_type(edge.id).type_name().as_bytes());
        }
        hasher.digest()
    }
}
