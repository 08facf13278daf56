//! Collects the operators and edges that DataStream calls create, and turns them into a
//! validated StreamGraph plus the typed factories behind it.

use std::sync::Arc;

use crate::config::ExecutionConfig;
use crate::error::{GraphError, WeirError};
use crate::graph::explain::ExecutionPlan;
use crate::graph::ids::{EdgeId, NodeId};
use crate::graph::partitioner::PartitionerKind;
use crate::graph::stream_graph::{
    ChainingStrategy, OperatorKind, StreamEdge, StreamGraph, StreamNode,
};
use crate::runtime::job_definition::JobDefinition;
use crate::runtime::operator_factory::NodeFactory;
use crate::runtime::stream_type::{SharedAny, StreamType};

/// The partitioner a user asked for on an edge; `Default` is resolved once parallelism is
/// final (forward when equal, rebalance otherwise), as Flink does.
#[derive(Clone)]
pub(crate) enum PartitionerSpec {
    Default,
    Forward,
    Rebalance,
    Broadcast,
    /// Hash by key; carries `Arc<dyn KeyGroupOf<T>>` behind `Any`.
    Hash(SharedAny),
}

/// One input of an operator about to be added: the upstream node and how to partition.
#[derive(Clone)]
pub(crate) struct Upstream {
    pub node: NodeId,
    pub partitioner: PartitionerSpec,
    /// Set when the stream is a side output of `node`.
    pub side_output: Option<SideOutputSpec>,
}

/// A side output an edge carries: its tag and the type of its records.
#[derive(Clone)]
pub(crate) struct SideOutputSpec {
    pub tag: Arc<str>,
    pub record_type: Arc<dyn StreamType>,
}

/// An operator as declared, before parallelism defaults are applied.
pub(crate) struct PendingNode {
    pub name: String,
    pub uid: Option<String>,
    pub kind: OperatorKind,
    pub parallelism: Option<u32>,
    pub max_parallelism: Option<u32>,
    pub chaining: ChainingStrategy,
    pub keyed: bool,
    pub commits_on_checkpoint: bool,
    pub output_type: Arc<dyn StreamType>,
    pub factory: NodeFactory,
    /// Whether records leave it with event timestamps and watermarks (a source with a
    /// watermark strategy, or `assign_timestamps_and_watermarks`).
    pub generates_event_time: bool,
    /// How, for plans.
    pub watermarks: Option<String>,
    /// What about it needs event time from upstream (an event-time window, an interval
    /// join), if anything.
    pub requires_event_time: Option<&'static str>,
}

impl PendingNode {
    pub fn new(
        name: String,
        kind: OperatorKind,
        output_type: Arc<dyn StreamType>,
        factory: NodeFactory,
    ) -> Self {
        Self {
            name,
            uid: None,
            kind,
            parallelism: None,
            max_parallelism: None,
            chaining: ChainingStrategy::Always,
            keyed: false,
            commits_on_checkpoint: false,
            output_type,
            factory,
            generates_event_time: false,
            watermarks: None,
            requires_event_time: None,
        }
    }
}

struct PendingEdge {
    source: NodeId,
    target: NodeId,
    partitioner: PartitionerSpec,
    side_output: Option<SideOutputSpec>,
    /// Which input of the target: 1, or 2 for a two-input operator's second.
    input: u8,
}

/// The job under construction.
pub(crate) struct GraphBuilder {
    pub config: ExecutionConfig,
    nodes: Vec<PendingNode>,
    edges: Vec<PendingEdge>,
    errors: Vec<GraphError>,
    /// The name of the job this builder handed over for execution, once it did.
    executed: Option<String>,
}

impl GraphBuilder {
    pub fn new(config: ExecutionConfig) -> Self {
        Self {
            config,
            nodes: Vec::new(),
            edges: Vec::new(),
            errors: Vec::new(),
            executed: None,
        }
    }

    /// Records a misuse of the API; `execute` and `explain` report it.
    pub fn error(&mut self, error: GraphError) {
        self.errors.push(error);
    }

    /// Adds an operator fed by `inputs`.
    pub fn add_node(&mut self, node: PendingNode, inputs: &[Upstream]) -> NodeId {
        self.add_node_with_inputs(node, &[inputs])
    }

    /// Adds a two-input operator fed by `first` and `second`.
    pub fn add_two_input_node(
        &mut self,
        node: PendingNode,
        first: &[Upstream],
        second: &[Upstream],
    ) -> NodeId {
        self.add_node_with_inputs(node, &[first, second])
    }

    fn add_node_with_inputs(&mut self, node: PendingNode, inputs: &[&[Upstream]]) -> NodeId {
        if let Some(job) = &self.executed {
            let job = job.clone();
            self.error(GraphError::AlreadyExecuted { job });
        }
        let id = NodeId(self.nodes.len() as u32);
        self.nodes.push(node);
        for (number, upstreams) in inputs.iter().enumerate() {
            for input in upstreams.iter() {
                self.edges.push(PendingEdge {
                    source: input.node,
                    target: id,
                    partitioner: input.partitioner.clone(),
                    side_output: input.side_output.clone(),
                    input: number as u8 + 1,
                });
            }
        }
        id
    }

    /// Whether node `id` is an operator (not a source).
    pub fn is_operator(&self, id: NodeId) -> bool {
        self.nodes
            .get(id.index())
            .is_some_and(|n| matches!(n.factory, NodeFactory::Operator(_)))
    }

    /// The declared node `id`, to configure it.
    pub fn node_mut(&mut self, id: NodeId) -> &mut PendingNode {
        &mut self.nodes[id.index()]
    }

    fn source_limit(node: &PendingNode) -> Option<u32> {
        match &node.factory {
            NodeFactory::Source(factory) => factory.max_parallelism(),
            NodeFactory::Operator(_) => None,
        }
    }

    /// The StreamGraph with defaults applied and partitioners resolved, validated.
    pub fn stream_graph(&self, job_name: &str) -> Result<StreamGraph, WeirError> {
        if let Some(job) = &self.executed {
            return Err(GraphError::AlreadyExecuted { job: job.clone() }.into());
        }
        if let Some(first) = self.errors.first() {
            return Err(first.clone().into());
        }
        let mut nodes = Vec::with_capacity(self.nodes.len());
        for (i, n) in self.nodes.iter().enumerate() {
            let limit = Self::source_limit(n);
            let parallelism = match (n.parallelism, limit) {
                (Some(p), Some(limit)) if p > limit => {
                    return Err(GraphError::InvalidParallelism {
                        operator: n.name.clone(),
                        parallelism: p,
                        reason: format!("this source supports at most {limit}"),
                    }
                    .into())
                }
                (Some(p), _) => p,
                (None, Some(limit)) => self.config.parallelism.min(limit),
                (None, None) => self.config.parallelism,
            };
            nodes.push(StreamNode {
                id: NodeId(i as u32),
                name: n.name.clone(),
                uid: n.uid.clone(),
                kind: n.kind,
                parallelism,
                max_parallelism: n.max_parallelism.unwrap_or(self.config.max_parallelism),
                chaining: n.chaining,
                keyed: n.keyed,
                output_type: n.output_type.type_name().to_string(),
                commits_on_checkpoint: n.commits_on_checkpoint,
                watermarks: n.watermarks.clone(),
            });
        }
        let edges = self
            .edges
            .iter()
            .enumerate()
            .map(|(i, e)| StreamEdge {
                id: EdgeId(i as u32),
                source: e.source,
                target: e.target,
                side_output: e.side_output.as_ref().map(|s| s.tag.to_string()),
                input: e.input,
                partitioner: match e.partitioner {
                    PartitionerSpec::Default => {
                        if nodes[e.source.index()].parallelism
                            == nodes[e.target.index()].parallelism
                        {
                            PartitionerKind::Forward
                        } else {
                            PartitionerKind::Rebalance
                        }
                    }
                    PartitionerSpec::Forward => PartitionerKind::Forward,
                    PartitionerSpec::Rebalance => PartitionerKind::Rebalance,
                    PartitionerSpec::Broadcast => PartitionerKind::Broadcast,
                    PartitionerSpec::Hash(_) => PartitionerKind::Hash,
                },
            })
            .collect();
        let graph = StreamGraph {
            job_name: job_name.to_string(),
            chaining_enabled: self.config.chaining_enabled,
            nodes,
            edges,
        };
        graph.validate()?;
        self.check_event_time()?;
        Ok(graph)
    }

    /// Fails if an operator that works in event time has no watermark strategy upstream:
    /// no watermark would ever reach it, so its windows or timers would only fire at the end
    /// of a bounded input, and never on an unbounded one.
    fn check_event_time(&self) -> Result<(), GraphError> {
        // Nodes are in topological order: inputs come first.
        let mut has_event_time: Vec<bool> =
            self.nodes.iter().map(|n| n.generates_event_time).collect();
        for (i, node) in self.nodes.iter().enumerate() {
            let upstream = self
                .edges
                .iter()
                .filter(|e| e.target.index() == i)
                .any(|e| has_event_time[e.source.index()]);
            has_event_time[i] |= upstream;
            if let (Some(what), false) = (node.requires_event_time, has_event_time[i]) {
                return Err(GraphError::NoEventTime {
                    operator: node.name.clone(),
                    what,
                });
            }
        }
        Ok(())
    }

    /// The four layers of the job as it stands.
    pub fn plan(&self, job_name: &str) -> Result<ExecutionPlan, WeirError> {
        Ok(ExecutionPlan::new(
            self.stream_graph(job_name)?,
            &self.config,
        ))
    }

    /// Hands the job over for execution; the builder cannot be used afterwards.
    pub fn take_definition(&mut self, job_name: &str) -> Result<JobDefinition, WeirError> {
        self.config.validate()?;
        let plan = self.plan(job_name)?;
        self.executed = Some(job_name.to_string());
        let (key_selectors, edge_types) = self
            .edges
            .drain(..)
            .map(|e| {
                let selector = match e.partitioner {
                    PartitionerSpec::Hash(selector) => Some(selector),
                    _ => None,
                };
                (selector, e.side_output.map(|s| s.record_type))
            })
            .unzip();
        let (factories, output_types) = self
            .nodes
            .drain(..)
            .map(|n| (n.factory, n.output_type))
            .unzip();
        Ok(JobDefinition {
            plan,
            config: self.config.clone(),
            factories,
            output_types,
            key_selectors,
            edge_types,
        })
    }
}
