//! Renders the four layers of a job: as text for people, JSON for tools, DOT for drawings.

use std::fmt::Write as _;

use serde::Serialize;

use crate::config::ExecutionConfig;
use crate::graph::execution_graph::ExecutionGraph;
use crate::graph::job_graph::JobGraph;
use crate::graph::stream_graph::StreamGraph;

/// The physical layer's settings: how channels behave at run time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PhysicalPlan {
    /// One task (thread) per subtask.
    pub tasks: usize,
    /// One bounded channel per execution channel.
    pub channels: usize,
    /// Records per batch.
    pub buffer_size: usize,
    /// Batches a channel holds before its producer blocks.
    pub channel_capacity: usize,
    /// Flush timeout of partly filled batches, in milliseconds.
    pub buffer_timeout_ms: u64,
}

/// All four layers of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExecutionPlan {
    /// Operators and edges, as written.
    pub stream_graph: StreamGraph,
    /// Operator chains.
    pub job_graph: JobGraph,
    /// Subtasks and channels.
    pub execution_graph: ExecutionGraph,
    /// Running tasks and channel settings.
    pub physical: PhysicalPlan,
}

impl ExecutionPlan {
    /// Translates a validated StreamGraph through the layers below it.
    pub fn new(stream_graph: StreamGraph, config: &ExecutionConfig) -> ExecutionPlan {
        let job_graph = JobGraph::from_stream_graph(&stream_graph);
        let execution_graph = ExecutionGraph::from_job_graph(&job_graph);
        let physical = PhysicalPlan {
            tasks: execution_graph.vertices.len(),
            channels: execution_graph.channels.len(),
            buffer_size: config.buffer_size,
            channel_capacity: config.channel_capacity,
            buffer_timeout_ms: config.buffer_timeout.as_millis() as u64,
        };
        ExecutionPlan {
            stream_graph,
            job_graph,
            execution_graph,
            physical,
        }
    }

    /// The plan as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        // Serializing plain structs with string keys cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// The plan as readable text, one section per layer.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let sg = &self.stream_graph;
        let _ = writeln!(s, "Job `{}`", sg.job_name);
        let _ = writeln!(s, "== 1. StreamGraph: {} operators ==", sg.nodes.len());
        for n in &sg.nodes {
            let inputs: Vec<String> = sg
                .in_edges(n.id)
                .map(|e| format!("{} via {}", e.source, e.partitioner))
                .collect();
            let _ = write!(
                s,
                "  {:<5} {:<28} parallelism={} out={}",
                n.id.to_string(),
                n.name,
                n.parallelism,
                n.output_type
            );
            if let Some(uid) = &n.uid {
                let _ = write!(s, " uid={uid}");
            }
            if n.keyed {
                let _ = write!(s, " keyed(max_parallelism={})", n.max_parallelism);
            }
            if let Some(watermarks) = &n.watermarks {
                let _ = write!(s, " event-time({watermarks})");
            }
            if !inputs.is_empty() {
                let _ = write!(s, " <- {}", inputs.join(", "));
            }
            s.push('\n');
        }
        let jg = &self.job_graph;
        let _ = writeln!(s, "== 2. JobGraph: {} chains ==", jg.vertices.len());
        for v in &jg.vertices {
            let ops: Vec<String> = v.operators.iter().map(ToString::to_string).collect();
            let _ = writeln!(
                s,
                "  {:<4} [{}] parallelism={}  {}",
                v.id.to_string(),
                ops.join(" "),
                v.parallelism,
                v.name
            );
        }
        for e in &jg.edges {
            let _ = writeln!(s, "  {} --{}--> {}", e.source, e.partitioner, e.target);
        }
        let eg = &self.execution_graph;
        let _ = writeln!(
            s,
            "== 3. ExecutionGraph: {} subtasks, {} channels ==",
            eg.vertices.len(),
            eg.channels.len()
        );
        for v in &eg.vertices {
            let keyed = jg.vertices[v.id.vertex.index()]
                .operators
                .iter()
                .any(|n| sg.node(*n).keyed);
            if keyed {
                let _ = writeln!(s, "  {}  {}", v.name, v.key_groups);
            } else {
                let _ = writeln!(s, "  {}", v.name);
            }
        }
        for (i, e) in jg.edges.iter().enumerate() {
            let n = eg.channels.iter().filter(|c| c.job_edge == i).count();
            let (p, c) = (
                jg.vertices[e.source.index()].parallelism,
                jg.vertices[e.target.index()].parallelism,
            );
            let _ = writeln!(
                s,
                "  {} -> {}: {} {} channel(s) ({}x{})",
                e.source, e.target, n, e.partitioner, p, c
            );
        }
        let ph = &self.physical;
        let _ = writeln!(
            s,
            "== 4. Physical: {} tasks (one thread each), {} bounded channels ==",
            ph.tasks, ph.channels
        );
        let _ = writeln!(
            s,
            "  batches of {} records, {} batches per channel, flush after {} ms",
            ph.buffer_size, ph.channel_capacity, ph.buffer_timeout_ms
        );
        for v in &eg.vertices {
            let inputs = eg.input_channels(v.id);
            let outputs = eg.channels.iter().filter(|c| c.producer == v.id).count();
            let _ = writeln!(
                s,
                "  task {:<40} inputs={} outputs={}",
                v.name,
                inputs.len(),
                outputs
            );
        }
        s
    }

    /// The plan as Graphviz DOT: one cluster per chain, operators inside, edges labelled with
    /// their partitioner and channel count.
    pub fn to_dot(&self) -> String {
        let sg = &self.stream_graph;
        let jg = &self.job_graph;
        let eg = &self.execution_graph;
        let mut s = String::from("digraph weir {\n  rankdir=LR;\n  node [shape=box];\n");
        for v in &jg.vertices {
            let _ = writeln!(
                s,
                "  subgraph cluster_{} {{\n    label=\"{} x{}\";\n    style=rounded;",
                v.id.0,
                escape(&format!("chain {}", v.id)),
                v.parallelism
            );
            for n in &v.operators {
                let node = sg.node(*n);
                let _ = writeln!(s, "    {} [label=\"{}\"];", n, escape(&node.name));
            }
            s.push_str("  }\n");
        }
        for e in &sg.edges {
            let label = match jg.job_edge_of(e.id) {
                Some(i) => format!(
                    "{} ({} ch)",
                    e.partitioner,
                    eg.channels.iter().filter(|c| c.job_edge == i).count()
                ),
                None => "chained".to_string(),
            };
            let style = if jg.is_chained(e.id) {
                ",style=dashed"
            } else {
                ""
            };
            let _ = writeln!(
                s,
                "  {} -> {} [label=\"{}\"{}];",
                e.source, e.target, label, style
            );
        }
        s.push_str("}\n");
        s
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::partitioner::PartitionerKind;
    use crate::graph::stream_graph::test_graphs::TestGraph;
    use crate::graph::stream_graph::OperatorKind;

    fn plan() -> ExecutionPlan {
        let mut g = TestGraph::new();
        let s = g.node("Source: \"gen\"", OperatorKind::Source, 2);
        let m = g.node("Map", OperatorKind::Operator, 2);
        let c = g.node("Count", OperatorKind::Operator, 3);
        g.edge(s, m, PartitionerKind::Forward);
        g.edge(m, c, PartitionerKind::Hash);
        ExecutionPlan::new(g.0, &ExecutionConfig::default())
    }

    #[test]
    fn text_shows_every_layer() {
        let text = plan().to_text();
        for needle in [
            "1. StreamGraph: 3 operators",
            "2. JobGraph: 2 chains",
            "3. ExecutionGraph: 5 subtasks, 6 channels",
            "4. Physical: 5 tasks",
            "v0 --HASH--> v1",
            "Count (3/3)",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
    }

    #[test]
    fn json_round_trips_the_graphs() {
        let p = plan();
        let v: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
        let jg: JobGraph = serde_json::from_value(v["job_graph"].clone()).unwrap();
        assert_eq!(jg, p.job_graph);
        assert_eq!(
            v["execution_graph"]["channels"].as_array().unwrap().len(),
            6
        );
    }

    #[test]
    fn dot_has_clusters_and_escaped_labels() {
        let dot = plan().to_dot();
        assert!(dot.starts_with("digraph weir {"));
        assert_eq!(dot.matches("subgraph cluster_").count(), 2);
        assert!(
            dot.contains("op0 -> op1 [label=\"chained\",style=dashed]"),
            "{dot}"
        );
        assert!(dot.contains("HASH (6 ch)"), "{dot}");
        assert!(dot.contains("Source: \\\"gen\\\""), "{dot}");
    }
}
