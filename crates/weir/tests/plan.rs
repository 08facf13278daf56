//! The four layers as the API builds them: chaining, subtasks, channels, and their renderings.

use weir::graph::{JobVertexId, PartitionerKind};
use weir::{ExecutionConfig, StreamExecutionEnvironment};

fn env(config: ExecutionConfig) -> StreamExecutionEnvironment {
    StreamExecutionEnvironment::new(config).unwrap()
}

#[test]
fn keyed_pipeline_chains_around_the_shuffle() {
    let env = env(ExecutionConfig::default().with_parallelism(2));
    env.generate(100, |i| i)
        .map(|i| i + 1)
        .filter(|i| i % 2 == 0)
        .key_by(|i: &u64| i % 10)
        .count()
        .print();
    let plan = env.plan("keyed").unwrap();
    let chains: Vec<&str> = plan
        .job_graph
        .vertices
        .iter()
        .map(|v| v.name.as_str())
        .collect();
    assert_eq!(
        chains,
        vec![
            "Source: Generator -> Map -> Filter",
            "Keyed Count -> Sink: Print"
        ]
    );
    assert_eq!(plan.job_graph.edges.len(), 1);
    assert_eq!(plan.job_graph.edges[0].partitioner, PartitionerKind::Hash);
    assert_eq!(plan.execution_graph.vertices.len(), 4);
    assert_eq!(plan.execution_graph.channels.len(), 4);
    let text = env.explain("keyed").unwrap();
    assert!(text.contains("v0 --HASH--> v1"), "{text}");
    assert!(text.contains("Keyed Count -> Sink: Print (2/2)"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&plan.to_json()).unwrap();
    assert_eq!(json["job_graph"]["vertices"].as_array().unwrap().len(), 2);
    assert!(plan.to_dot().contains("HASH (4 ch)"));
}

#[test]
fn chaining_controls_in_the_api() {
    let build = |config: ExecutionConfig, new_chain: bool, disable: bool| {
        let env = env(config);
        let mapped = env.generate(10, |i| i).map(|i| i);
        let mapped = if new_chain {
            mapped.start_new_chain()
        } else {
            mapped
        };
        let filtered = mapped.filter(|_| true);
        let filtered = if disable {
            filtered.disable_chaining()
        } else {
            filtered
        };
        filtered.collect();
        env.plan("chaining").unwrap().job_graph.vertices.len()
    };
    let p1 = ExecutionConfig::default().with_parallelism(1);
    assert_eq!(build(p1.clone(), false, false), 1);
    assert_eq!(build(p1.clone(), true, false), 2);
    assert_eq!(build(p1.clone(), false, true), 3);
    assert_eq!(build(p1.with_chaining(false), false, false), 4);
}

#[test]
fn parallelism_change_uses_rebalance_and_all_to_all_channels() {
    let env = env(ExecutionConfig::default().with_parallelism(3));
    env.generate(10, |i| i).parallelism(2).map(|i| i).collect();
    let plan = env.plan("rescale").unwrap();
    assert_eq!(
        plan.stream_graph.edges[0].partitioner,
        PartitionerKind::Rebalance
    );
    assert_eq!(plan.execution_graph.channels.len(), 6);
    assert_eq!(plan.execution_graph.subtasks_of(JobVertexId(1)).count(), 3);
}

#[test]
fn uids_names_and_metrics() {
    let env = env(ExecutionConfig::default().with_parallelism(2));
    env.generate(1_000, |i| i)
        .filter(|i| i % 4 == 0)
        .name("quarter")
        .uid("quarter-filter")
        .collect();
    let plan = env.plan("metrics").unwrap();
    assert_eq!(
        plan.stream_graph.nodes[1].uid.as_deref(),
        Some("quarter-filter")
    );
    let result = env.execute("metrics").unwrap();
    let q = result.operator("quarter").unwrap();
    assert_eq!((q.records_in, q.records_out), (1_000, 250));
    assert_eq!(
        result.operator("Source: Generator").unwrap().records_out,
        1_000
    );
    assert!(result.to_string().contains("quarter"));
}
