//! Local mode: the job manager and the task managers in one process, one thread per subtask,
//! talking through the same channels and messages that would cross processes in a cluster.

use std::collections::HashMap;
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::Receiver;

use crate::error::{OperatorFailure, SubtaskDisplay, TaskError, WeirError};
use crate::graph::execution_graph::SubtaskRef;
use crate::graph::ids::NodeId;
use crate::runtime::channel::{cancel_pair, CancelHandle, CancelToken};
use crate::runtime::job_definition::JobDefinition;
use crate::runtime::job_result::{JobExecutionResult, OperatorSummary};
use crate::runtime::operator_factory::{NodeFactory, SourceCoordinatorRunner};
use crate::runtime::output::OperatorMetrics;
use crate::runtime::stream_type::{AnyBox, WriterSpec};
use crate::runtime::task::{run_task, Invokable, OperatorSetup, TaskEvent};

/// A deployed but not yet started job.
struct Deployment {
    tasks: Vec<(SubtaskRef, String, Box<dyn Invokable>)>,
    coordinators: Vec<(NodeId, String, Box<dyn SourceCoordinatorRunner>)>,
}

/// Runs jobs in this process.
pub struct MiniCluster;

impl MiniCluster {
    /// Deploys `job`, runs it to its end, and reports per-operator counts; on the first
    /// failure cancels every task and returns the root cause.
    pub fn execute(job: JobDefinition) -> Result<JobExecutionResult, WeirError> {
        let started = Instant::now();
        let (cancel_handle, cancel) = cancel_pair();
        let deployment = deploy(&job, &cancel)?;
        let (events_tx, events) = crossbeam_channel::unbounded();
        let expected = deployment.tasks.len();
        let mut threads: Vec<JoinHandle<()>> = Vec::new();
        let mut names: HashMap<SubtaskRef, String> = HashMap::new();
        let mut cancel_handle = Some(cancel_handle);
        let spawn_result = (|| {
            for (node, name, coordinator) in deployment.coordinators {
                let tx = events_tx.clone();
                let handle = std::thread::Builder::new()
                    .name(format!("{name} coordinator"))
                    .spawn(move || {
                        if let Err(error) = coordinator.run() {
                            let _ = tx.send(TaskEvent::CoordinatorFailed { node, error });
                        }
                    })
                    .map_err(|source| WeirError::Spawn {
                        what: format!("coordinator of {name}"),
                        source,
                    })?;
                threads.push(handle);
            }
            for (task, name, body) in deployment.tasks {
                let tx = events_tx.clone();
                names.insert(task, name.clone());
                let handle = std::thread::Builder::new()
                    .name(name.clone())
                    .spawn(move || run_task(task, body, tx))
                    .map_err(|source| WeirError::Spawn { what: name, source })?;
                threads.push(handle);
            }
            Ok(())
        })();
        drop(events_tx);
        if let Err(e) = spawn_result {
            drop(cancel_handle.take());
            threads.into_iter().for_each(|t| {
                let _ = t.join();
            });
            return Err(e);
        }
        tracing::info!(job = %job.plan.stream_graph.job_name, tasks = expected, "job running");
        let outcome = supervise(&job, &events, expected, &names, &mut cancel_handle);
        drop(cancel_handle);
        for t in threads {
            let _ = t.join();
        }
        let metrics = outcome?;
        let wall_time = started.elapsed();
        tracing::info!(job = %job.plan.stream_graph.job_name, ?wall_time, "job finished");
        Ok(summarize(&job, wall_time, metrics))
    }
}

/// Waits for every task; on the first root-cause failure cancels the job, keeps draining
/// reports until every task has stopped, and returns that failure.
fn supervise(
    job: &JobDefinition,
    events: &Receiver<TaskEvent>,
    expected: usize,
    names: &HashMap<SubtaskRef, String>,
    cancel: &mut Option<CancelHandle>,
) -> Result<Vec<OperatorMetrics>, WeirError> {
    let mut done = 0;
    let mut metrics = Vec::new();
    let mut root_cause: Option<(String, SubtaskRef, TaskError)> = None;
    let mut secondary: Option<(String, SubtaskRef, TaskError)> = None;
    while done < expected {
        let Ok(event) = events.recv() else {
            return Err(WeirError::Internal(
                "every task thread exited without reporting".into(),
            ));
        };
        let (where_, task, error) = match event {
            TaskEvent::Finished { metrics: m, .. } => {
                done += 1;
                metrics.extend(m);
                continue;
            }
            TaskEvent::Failed { task, error } => {
                done += 1;
                let name = names.get(&task).cloned().unwrap_or_default();
                (name, task, error)
            }
            TaskEvent::CoordinatorFailed { node, error } => {
                let vertex = job.plan.job_graph.vertex_of_node[node.index()];
                let name = format!("{} (coordinator)", job.plan.stream_graph.node(node).name);
                (name, SubtaskRef { vertex, subtask: 0 }, error)
            }
        };
        let slot = if error.is_secondary() {
            &mut secondary
        } else {
            &mut root_cause
        };
        if slot.is_none() {
            *slot = Some((where_, task, error));
        }
        // The first failure of any kind cancels the rest of the job.
        drop(cancel.take());
    }
    match root_cause.or(secondary) {
        None => Ok(metrics),
        Some((task_name, task, error)) => {
            let vertex = &job.plan.job_graph.vertices[task.vertex.index()];
            let (operator, cause) = match error {
                TaskError::Operator { operator, cause } => (operator, *cause),
                other => (task_name, other),
            };
            Err(WeirError::JobFailed {
                job: job.plan.stream_graph.job_name.clone(),
                failure: Box::new(OperatorFailure {
                    operator,
                    subtask: task.subtask,
                    subtask_display: SubtaskDisplay {
                        index: task.subtask,
                        parallelism: vertex.parallelism,
                    },
                    cause,
                }),
            })
        }
    }
}

fn summarize(
    job: &JobDefinition,
    wall_time: std::time::Duration,
    mut subtasks: Vec<OperatorMetrics>,
) -> JobExecutionResult {
    subtasks.sort_by_key(|m| (m.node, m.subtask));
    let operators = job
        .plan
        .stream_graph
        .nodes
        .iter()
        .map(|n| {
            let of_node = subtasks.iter().filter(|m| m.node == n.id);
            OperatorSummary {
                node: n.id,
                name: n.name.clone(),
                parallelism: n.parallelism,
                records_in: of_node.clone().map(|m| m.records_in).sum(),
                records_out: of_node.map(|m| m.records_out).sum(),
            }
        })
        .collect();
    JobExecutionResult {
        job_name: job.plan.stream_graph.job_name.clone(),
        wall_time,
        operators,
        subtasks,
    }
}

fn setup_error(
    operator: &str,
    subtask: u32,
    cause: impl Into<crate::error::BoxError>,
) -> WeirError {
    WeirError::Setup {
        operator: operator.to_string(),
        subtask,
        cause: cause.into(),
    }
}

/// Creates every channel, coordinator and task of the job, wired but not started.
fn deploy(job: &JobDefinition, cancel: &CancelToken) -> Result<Deployment, WeirError> {
    let plan = &job.plan;
    let (sg, jg, eg) = (&plan.stream_graph, &plan.job_graph, &plan.execution_graph);
    let config = &job.config;

    // Channels: senders by (job edge, producer) in output order, receivers by consumer in
    // input order.
    let mut senders: HashMap<(usize, SubtaskRef), Vec<AnyBox>> = HashMap::new();
    let mut receivers: HashMap<SubtaskRef, Vec<AnyBox>> = HashMap::new();
    for ch in &eg.channels {
        let producer_node = sg.edges[jg.edges[ch.job_edge].stream_edge.index()].source;
        let (tx, rx) = job.output_types[producer_node.index()].channel(config.channel_capacity);
        senders
            .entry((ch.job_edge, ch.producer))
            .or_default()
            .push(tx);
        receivers.entry(ch.consumer).or_default().push(rx);
    }
    // Channels were created in output order per producer and input order per consumer.

    let mut coordinators = Vec::new();
    let mut endpoints: HashMap<NodeId, Vec<Option<AnyBox>>> = HashMap::new();
    for vertex in jg.vertices.iter().filter(|v| v.is_source) {
        let head = sg.node(vertex.head());
        let NodeFactory::Source(factory) = &job.factories[head.id.index()] else {
            return Err(WeirError::Internal(format!(
                "source `{}` has no source factory",
                head.name
            )));
        };
        let (coordinator, eps) = factory
            .create_coordinator(vertex.parallelism, &head.name, cancel.clone())
            .map_err(|e| setup_error(&head.name, 0, e))?;
        coordinators.push((head.id, head.name.clone(), coordinator));
        endpoints.insert(head.id, eps.into_iter().map(Some).collect());
    }

    let mut tasks = Vec::new();
    for ev in &eg.vertices {
        let vertex = &jg.vertices[ev.id.vertex.index()];
        let mut chained_inputs: HashMap<NodeId, AnyBox> = HashMap::new();
        let mut source_task = None;
        for &node_id in vertex.operators.iter().rev() {
            let node = sg.node(node_id);
            let ty = &job.output_types[node_id.index()];
            let mut outputs = Vec::new();
            for edge in sg.out_edges(node_id) {
                if jg.is_chained(edge.id) {
                    let input = chained_inputs.remove(&edge.target).ok_or_else(|| {
                        WeirError::Internal(format!("chained successor of `{}` missing", node.name))
                    })?;
                    outputs.push(input);
                } else {
                    let job_edge = jg.job_edge_of(edge.id).ok_or_else(|| {
                        WeirError::Internal(format!("edge {} has no job edge", edge.id))
                    })?;
                    let chans = senders.remove(&(job_edge, ev.id)).unwrap_or_default();
                    let writer = ty
                        .record_writer(
                            chans,
                            WriterSpec {
                                partitioner: edge.partitioner,
                                key_selector: job.key_selectors[edge.id.index()].as_ref(),
                                max_parallelism: sg.node(edge.target).max_parallelism,
                                producer_subtask: ev.id.subtask,
                                batch_size: config.buffer_size,
                                cancel: cancel.clone(),
                            },
                        )
                        .map_err(WeirError::Internal)?;
                    outputs.push(writer);
                }
            }
            let output = match outputs.len() {
                0 => ty.discard(),
                1 => outputs
                    .pop()
                    .ok_or_else(|| WeirError::Internal("no output".into()))?,
                _ => ty.fan_out(outputs).map_err(WeirError::Internal)?,
            };
            let setup = OperatorSetup {
                node: node_id,
                name: node.name.as_str().into(),
                subtask: ev.id.subtask,
                parallelism: ev.parallelism,
                max_parallelism: node.max_parallelism,
                key_groups: crate::state::key_group::key_group_range_for_operator(
                    node.max_parallelism,
                    ev.parallelism,
                    ev.id.subtask,
                ),
                config: config.clone(),
                cancel: cancel.clone(),
            };
            match &job.factories[node_id.index()] {
                NodeFactory::Source(factory) => {
                    let endpoint = endpoints
                        .get_mut(&node_id)
                        .and_then(|eps| eps.get_mut(ev.id.subtask as usize))
                        .and_then(Option::take)
                        .ok_or_else(|| WeirError::Internal("missing reader endpoint".into()))?;
                    let task = factory
                        .create_task(&setup, output, endpoint)
                        .map_err(|e| setup_error(&node.name, ev.id.subtask, e))?;
                    source_task = Some(task);
                }
                NodeFactory::Operator(factory) => {
                    let input = factory
                        .create(&setup, output)
                        .map_err(|e| setup_error(&node.name, ev.id.subtask, e))?;
                    chained_inputs.insert(node_id, input);
                }
            }
        }
        let body = match source_task {
            Some(task) => task,
            None => {
                let head = vertex.head();
                let input_type = sg
                    .in_edges(head)
                    .next()
                    .map(|e| &job.output_types[e.source.index()])
                    .ok_or_else(|| {
                        WeirError::Internal(format!(
                            "operator `{}` has no input",
                            sg.node(head).name
                        ))
                    })?;
                let head_input = chained_inputs
                    .remove(&head)
                    .ok_or_else(|| WeirError::Internal("chain head missing".into()))?;
                input_type
                    .input_task(
                        receivers.remove(&ev.id).unwrap_or_default(),
                        head_input,
                        cancel.clone(),
                        config.buffer_timeout,
                    )
                    .map_err(WeirError::Internal)?
            }
        };
        tasks.push((ev.id, ev.name.clone(), body));
    }
    Ok(Deployment {
        tasks,
        coordinators,
    })
}
