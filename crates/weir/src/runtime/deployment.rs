//! Deployment: creates every channel, source coordinator and task of a job — wired, with
//! restored state loaded, but not started.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::checkpoint::fencing::FencingToken;
use crate::checkpoint::metadata::{
    IncrementalKeyedStateHandle, ListItem, ListStateEntry, ListStateHandle, StoredItem,
};
use crate::checkpoint::restore::RestoreAssignment;
use crate::checkpoint::storage::{CheckpointStorage, StorageError};
use crate::error::{SubtaskDisplay, WeirError};
use crate::graph::execution_graph::SubtaskRef;
use crate::graph::ids::NodeId;
use crate::graph::partitioner::PartitionerKind;
use crate::metrics::{MetricRegistry, TaskMetrics};
use crate::runtime::chain::{ChainedNode, OperatorChain, SideOutputs};
use crate::runtime::channel::CancelToken;
use crate::runtime::channel_state::{is_channel_state, ChannelStateSetup};
use crate::runtime::job_definition::JobDefinition;
use crate::runtime::operator_factory::{NodeFactory, SourceCoordinatorRunner};
use crate::runtime::snapshot::RestoredOperatorState;
use crate::runtime::source_task::ReaderEndpoint;
use crate::runtime::stream_element::SnapshotType;
use crate::runtime::stream_type::{AnyBox, StreamType, WriterSpec};
use crate::runtime::task::{Invokable, OperatorSetup};
use crate::runtime::transport::Transport;
use crate::state::backend_factory::RestoredStateFiles;
use crate::state::key_group::key_group_range_for_operator;
use crate::state::keyed_state_snapshot::decode_key_group_block;

/// A job's state to start from: the checkpoint's location and the per-subtask plan.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RestorePoint {
    /// The checkpoint or savepoint id.
    pub checkpoint_id: u64,
    /// Its location in storage.
    pub location: String,
    /// Who restores what.
    pub assignment: RestoreAssignment,
}

/// A task created but not started.
pub struct DeployedTask {
    /// Its subtask.
    pub task: SubtaskRef,
    /// Its name, `chain (i/p)`.
    pub name: String,
    /// What it runs.
    pub body: Box<dyn Invokable>,
    /// Its live metrics, registered in the process's registry.
    pub metrics: Arc<TaskMetrics>,
}

/// Where a run's tasks are created and what they share.
pub struct TaskDeployment<'a> {
    /// The job.
    pub job: &'a JobDefinition,
    /// Which channels are in this process, and how the others are reached.
    pub transport: &'a dyn Transport,
    /// The run's cancellation signal.
    pub cancel: &'a CancelToken,
    /// Where snapshots go.
    pub storage: Option<&'a Arc<dyn CheckpointStorage>>,
    /// The state to start from.
    pub restore: Option<&'a RestorePoint>,
    /// The JobManager's fencing token.
    pub fencing: &'a FencingToken,
    /// Where the tasks' metrics are registered.
    pub metrics: &'a MetricRegistry,
    /// The run's attempt number.
    pub attempt: u64,
    /// Whether sources say where each record was read (the attempt after a failure of user
    /// code), so that an operator failing on a record names it.
    pub trace_record_origins: bool,
}

/// A source's coordinator (split enumerator), created but not started, and the endpoints of
/// its readers, by subtask.
pub struct DeployedCoordinator {
    /// The source.
    pub node: NodeId,
    /// Its name.
    pub name: String,
    /// The enumerator's runner.
    pub runner: Box<dyn SourceCoordinatorRunner>,
    /// Reader `i`'s line to the coordinator, at index `i`.
    pub readers: Vec<ReaderEndpoint>,
}

/// A deployed but not yet started job.
pub struct Deployment {
    /// Tasks: subtask, task name, body.
    pub tasks: Vec<DeployedTask>,
    /// Source coordinators: source node, name, runner.
    pub coordinators: Vec<(NodeId, String, Box<dyn SourceCoordinatorRunner>)>,
}

/// Why deployment failed: a corrupt checkpoint (recovery decides whether an older one may
/// be used) or anything else.
#[derive(Debug)]
pub enum DeployError {
    /// A state file of the restore point is damaged or missing (in every copy): what is
    /// wrong, naming the file.
    CorruptState(String),
    /// The executors could not take the run now (a TaskManager went away during the
    /// deployment): a failure of the run, for the restart strategy.
    Unavailable(WeirError),
    /// Anything else: the job cannot run (a user operator cannot be created, …).
    Other(WeirError),
}

/// A state file of the restore point could not be read: damaged or missing, it is corrupt
/// state (recovery may fall back to an older restore point); an I/O error is a failure of
/// this run only — the storage may answer next time, and the checkpoint is not to be given
/// up for it.
fn unreadable_state(error: StorageError) -> DeployError {
    match error {
        StorageError::Io { .. } => DeployError::Unavailable(error.into()),
        other => DeployError::CorruptState(other.to_string()),
    }
}

impl From<WeirError> for DeployError {
    fn from(e: WeirError) -> Self {
        DeployError::Other(e)
    }
}

/// An operator of a subtask (or, for `None`, a source's split enumerator) could not be
/// created.
fn setup_error(
    operator: &str,
    subtask: Option<SubtaskDisplay>,
    cause: impl Into<crate::error::BoxError>,
) -> WeirError {
    WeirError::Setup {
        operator: operator.to_string(),
        subtask,
        cause: cause.into(),
    }
}

/// Numbers the directories restores download state files into, within this process.
static NEXT_RESTORE_DIR: AtomicU64 = AtomicU64::new(0);

/// Downloads the files of `handle` (of the checkpoint at `location`) into a new directory
/// under `root`, each checked against its length and checksum.
fn download_state_files(
    storage: &dyn CheckpointStorage,
    location: &str,
    handle: &IncrementalKeyedStateHandle,
    root: &Path,
    stem: &str,
) -> Result<RestoredStateFiles, DeployError> {
    let dir = root.join(format!(
        "restore-{stem}-{}-{}",
        std::process::id(),
        NEXT_RESTORE_DIR.fetch_add(1, Ordering::Relaxed)
    ));
    let local_error = |action: &str, path: &Path, e: std::io::Error| {
        DeployError::Other(WeirError::Internal(format!(
            "cannot {action} `{}` to restore keyed state: {e}",
            path.display()
        )))
    };
    std::fs::create_dir_all(&dir).map_err(|e| local_error("create", &dir, e))?;
    let shared_location = storage.shared_location_of(location);
    let own_shared = storage.shared_location_of(&storage.location(0, SnapshotType::Checkpoint));
    // From here on the directory is removed again if anything fails.
    let files = RestoredStateFiles::new(handle.clone(), shared_location == own_shared, dir);
    let all = handle
        .shared
        .iter()
        .map(|f| (shared_location.as_str(), f))
        .chain(handle.private.iter().map(|f| (location, f)));
    for (from, file) in all {
        let verify = |bytes: &[u8]| {
            if crc32fast::hash(bytes) == file.crc32 {
                Ok(())
            } else {
                Err(format!("checksum mismatch ({} bytes)", bytes.len()))
            }
        };
        let bytes = storage
            .read_range(from, &file.stored_name, 0, file.size, &verify)
            .map_err(unreadable_state)?;
        let dest = files.dir().join(&file.local_name);
        std::fs::write(&dest, &bytes).map_err(|e| local_error("write", &dest, e))?;
    }
    Ok(files)
}

/// The operator list states of `handles` with their items' bytes: items stored in state
/// files are read — each file's span of them at once — and checked against their checksums.
fn resolve_lists(
    storage: Option<&Arc<dyn CheckpointStorage>>,
    location: &str,
    handles: &[ListStateHandle],
) -> Result<Vec<ListStateEntry>, DeployError> {
    let mut by_file: BTreeMap<&str, Vec<&StoredItem>> = BTreeMap::new();
    for item in handles.iter().flat_map(|h| &h.items) {
        if let ListItem::Stored(stored) = item {
            by_file
                .entry(stored.file.as_str())
                .or_default()
                .push(stored);
        }
    }
    let mut read: HashMap<&str, (u64, Vec<u8>)> = HashMap::new();
    for (file, items) in &by_file {
        let storage = storage.ok_or_else(|| {
            WeirError::Internal("restoring operator state without checkpoint storage".into())
        })?;
        let start = items.iter().map(|i| i.offset).min().unwrap_or(0);
        let end = items
            .iter()
            .map(|i| i.offset.saturating_add(i.length))
            .max()
            .unwrap_or(0);
        // Checked per copy, so that a damaged primary is read from its local copy.
        let verify = |bytes: &[u8]| {
            for item in items {
                let at = (item.offset - start) as usize;
                let slice = bytes.get(at..at + item.length as usize);
                if slice.map(crc32fast::hash) != Some(item.crc32) {
                    return Err(format!(
                        "operator state item at offset {}: checksum mismatch",
                        item.offset
                    ));
                }
            }
            Ok(())
        };
        let bytes = storage
            .read_range(location, file, start, end - start, &verify)
            .map_err(unreadable_state)?;
        read.insert(file, (start, bytes));
    }
    handles
        .iter()
        .map(|handle| {
            let items = handle
                .items
                .iter()
                .map(|item| match item {
                    ListItem::Inline(bytes) => Ok(bytes.clone()),
                    ListItem::Stored(stored) => {
                        let (start, bytes) = &read[stored.file.as_str()];
                        let at = (stored.offset - start) as usize;
                        Ok(bytes[at..at + stored.length as usize].to_vec())
                    }
                })
                .collect::<Result<Vec<_>, DeployError>>()?;
            Ok(ListStateEntry {
                name: handle.name.clone(),
                mode: handle.mode,
                items,
            })
        })
        .collect()
}

/// Reads and verifies the state a subtask of `node` restores.
fn load_state(
    restore: &RestorePoint,
    storage: Option<&Arc<dyn CheckpointStorage>>,
    job: &JobDefinition,
    node: NodeId,
    subtask: u32,
) -> Result<Option<Arc<RestoredOperatorState>>, DeployError> {
    let Some(plan) = restore
        .assignment
        .subtasks
        .get(&node)
        .and_then(|p| p.get(subtask as usize))
    else {
        return Ok(None);
    };
    let mut keyed = Vec::with_capacity(plan.keyed.len());
    if !plan.keyed.is_empty() {
        let storage = storage.ok_or_else(|| {
            WeirError::Internal("restoring keyed state without checkpoint storage".into())
        })?;
        for (file, entry) in &plan.keyed {
            let corrupt = DeployError::CorruptState;
            // Checked per copy, so that a damaged primary is read from its local copy.
            let verify = |bytes: &[u8]| {
                if crc32fast::hash(bytes) == entry.crc32 {
                    Ok(())
                } else {
                    Err(format!("key group {}: checksum mismatch", entry.key_group))
                }
            };
            let bytes = storage
                .read_range(&restore.location, file, entry.offset, entry.length, &verify)
                .map_err(unreadable_state)?;
            let path = format!("{}/{file}", restore.location);
            keyed.push(
                decode_key_group_block(entry, &bytes, &path).map_err(|e| corrupt(e.to_string()))?,
            );
        }
    }
    let mut keyed_files = Vec::with_capacity(plan.incremental.len());
    if !plan.incremental.is_empty() {
        let storage = storage.ok_or_else(|| {
            WeirError::Internal("restoring keyed state without checkpoint storage".into())
        })?;
        let root = job.config.state_backend.working_root();
        let stem = format!(
            "{}-{subtask}",
            crate::state::backend_factory::file_name_of(
                &job.plan.stream_graph.node(node).effective_uid()
            )
        );
        for handle in &plan.incremental {
            keyed_files.push(download_state_files(
                storage.as_ref(),
                &restore.location,
                handle,
                &root,
                &stem,
            )?);
        }
    }
    Ok(Some(Arc::new(RestoredOperatorState {
        keyed,
        keyed_files,
        lists: resolve_lists(storage, &restore.location, &plan.lists)?,
    })))
}

/// The positions of `successors` as offsets after `at`, each checked to take `output`.
fn relative_successors(
    nodes: &[Box<dyn ChainedNode>],
    name: &str,
    at: usize,
    output: Option<std::any::TypeId>,
    successors: &[usize],
) -> Result<Vec<usize>, WeirError> {
    successors
        .iter()
        .map(|&s| {
            OperatorChain::check_link(nodes, name, output, s)
                .map_err(|e| WeirError::Internal(e.to_string()))?;
            s.checked_sub(at + 1).ok_or_else(|| {
                WeirError::Internal(format!("`{name}` feeds an operator before it in its chain"))
            })
        })
        .collect()
}

/// Creates every channel, coordinator and task of `job` in this process, restoring from
/// `restore` if given (the local mini-cluster).
pub fn deploy(
    job: &JobDefinition,
    cancel: &CancelToken,
    storage: Option<&Arc<dyn CheckpointStorage>>,
    restore: Option<&RestorePoint>,
    fencing: &FencingToken,
) -> Result<Deployment, DeployError> {
    let mut coordinators = Vec::new();
    let mut endpoints = HashMap::new();
    for c in create_coordinators(job, cancel, restore)? {
        endpoints.insert(c.node, c.readers.into_iter().map(Some).collect());
        coordinators.push((c.node, c.name, c.runner));
    }
    let tasks = deploy_tasks(
        TaskDeployment {
            job,
            transport: &crate::runtime::transport::LocalTransport,
            cancel,
            storage,
            restore,
            fencing,
            metrics: &MetricRegistry::new(),
            attempt: 0,
            trace_record_origins: false,
        },
        &mut endpoints,
    )?;
    Ok(Deployment {
        tasks,
        coordinators,
    })
}

/// Creates the coordinator of every source of `job` (they run where the JobManager runs),
/// from the enumerator states of `restore` if given.
pub fn create_coordinators(
    job: &JobDefinition,
    cancel: &CancelToken,
    restore: Option<&RestorePoint>,
) -> Result<Vec<DeployedCoordinator>, DeployError> {
    let (sg, jg) = (&job.plan.stream_graph, &job.plan.job_graph);
    let mut coordinators = Vec::new();
    for vertex in jg.vertices.iter().filter(|v| v.is_source) {
        let head = sg.node(vertex.head());
        let NodeFactory::Source(factory) = &job.factories[head.id.index()] else {
            return Err(WeirError::Internal(format!(
                "source `{}` has no source factory",
                head.name
            ))
            .into());
        };
        let restored = restore.and_then(|r| r.assignment.coordinators.get(&head.id));
        let (runner, readers) = factory
            .create_coordinator(
                head.id,
                vertex.parallelism,
                &head.name,
                cancel.clone(),
                restored.map(Vec::as_slice),
            )
            .map_err(|e| setup_error(&head.name, None, e))?;
        coordinators.push(DeployedCoordinator {
            node: head.id,
            name: head.name.clone(),
            runner,
            readers,
        });
    }
    Ok(coordinators)
}

/// Creates the channels and tasks of `job` that `transport` places in this process,
/// restoring from `restore` if given. A source task takes its reader's endpoint out of
/// `endpoints` (by source node, then subtask).
pub fn deploy_tasks(
    deployment: TaskDeployment<'_>,
    endpoints: &mut HashMap<NodeId, Vec<Option<ReaderEndpoint>>>,
) -> Result<Vec<DeployedTask>, DeployError> {
    let TaskDeployment {
        job,
        transport,
        cancel,
        storage,
        restore,
        fencing,
        metrics,
        attempt,
        trace_record_origins,
    } = deployment;
    let plan = &job.plan;
    let (sg, jg, eg) = (&plan.stream_graph, &plan.job_graph, &plan.execution_graph);
    let config = &job.config;

    // Channels were listed grouped by job edge and producer in output order, and numbered
    // per consumer in the same order, so pushing in list order keeps both orders.
    let mut senders: HashMap<(usize, SubtaskRef), Vec<AnyBox>> = HashMap::new();
    let mut receivers: HashMap<SubtaskRef, Vec<(u8, AnyBox)>> = HashMap::new();
    for (index, ch) in eg.channels.iter().enumerate() {
        let stream_edge = jg.edges[ch.job_edge].stream_edge;
        let ends = transport
            .create_channel(
                index as u32,
                ch,
                job.edge_type(stream_edge).as_ref(),
                config.channel_capacity,
            )
            .map_err(|e| WeirError::Internal(format!("cannot create channel {index}: {e}")))?;
        if let Some(tx) = ends.sender {
            senders
                .entry((ch.job_edge, ch.producer))
                .or_default()
                .push(tx);
        }
        if let Some(rx) = ends.receiver {
            let input = sg.edges[stream_edge.index()].input;
            receivers.entry(ch.consumer).or_default().push((input, rx));
        }
    }

    let mut tasks = Vec::new();
    for ev in eg.vertices.iter().filter(|v| transport.runs_here(v.id)) {
        let vertex = &jg.vertices[ev.id.vertex.index()];
        let task_metrics = metrics.register_task(ev.id, ev.name.clone(), attempt, vertex.is_source);
        // The chain's operators in the vertex's (topological) order, then its record
        // writers: every node's successors come after it.
        let mut nodes: Vec<Box<dyn ChainedNode>> = Vec::new();
        let mut position: HashMap<NodeId, usize> = HashMap::new();
        // With unaligned checkpoints, a record writer waiting for room stops waiting for a
        // barrier: at a task with inputs, one that overtook an input queue (the inputs ring
        // the task's doorbell); at a source, its coordinator's trigger.
        let unaligned = config.checkpoint.unaligned && config.checkpoint.interval.is_some();
        let doorbell =
            (unaligned && !vertex.is_source).then(|| crossbeam_channel::bounded::<()>(1));
        let wakeup: Option<Arc<dyn crate::runtime::channel::Wakeup>> = if !unaligned {
            None
        } else if vertex.is_source {
            endpoints
                .get(&vertex.head())
                .and_then(|eps| eps.get(ev.id.subtask as usize))
                .and_then(Option::as_ref)
                .map(|ep| Arc::new(ep.messages()) as Arc<dyn crate::runtime::channel::Wakeup>)
        } else {
            doorbell
                .as_ref()
                .map(|(_, rx)| Arc::new(rx.clone()) as Arc<dyn crate::runtime::channel::Wakeup>)
        };
        let mut source = None;
        // Per node: restored in-flight records (its channel state, if it headed a task).
        let mut in_flight: Vec<(NodeId, Vec<ListStateEntry>)> = Vec::new();
        for &node_id in &vertex.operators {
            let node = sg.node(node_id);
            let mut restored = match restore {
                Some(r) => load_state(r, storage, job, node_id, ev.id.subtask)?,
                None => None,
            };
            // A task head's list state carries the task's in-flight records (unaligned
            // checkpoints): the chain replays them into the node; the operator never sees
            // them.
            if let Some(state) = restored.take() {
                let mut state = Arc::try_unwrap(state).map_err(|_| {
                    WeirError::Internal("restored state shared before deployment".into())
                })?;
                let (channel, own): (Vec<_>, Vec<_>) = std::mem::take(&mut state.lists)
                    .into_iter()
                    .partition(|l| is_channel_state(&l.name));
                state.lists = own;
                if channel.iter().any(|l| !l.items.is_empty()) {
                    in_flight.push((node_id, channel));
                }
                restored = Some(Arc::new(state));
            }
            let setup = OperatorSetup {
                node: node_id,
                name: node.name.as_str().into(),
                uid: node.effective_uid().into(),
                subtask: ev.id.subtask,
                parallelism: ev.parallelism,
                max_parallelism: node.max_parallelism,
                key_groups: key_group_range_for_operator(
                    node.max_parallelism,
                    ev.parallelism,
                    ev.id.subtask,
                ),
                config: config.clone(),
                cancel: cancel.clone(),
                restored,
                fencing: fencing.clone(),
                restored_from: restore.map(|r| r.checkpoint_id),
                // Runs are counted from 1; attempts, as Flink's, from 0.
                attempt: attempt.saturating_sub(1),
                metrics: task_metrics.operator(node_id, &node.name),
                trace_record_origins,
            };
            let subtask_display = SubtaskDisplay {
                index: ev.id.subtask,
                parallelism: setup.parallelism,
            };
            match &job.factories[node_id.index()] {
                NodeFactory::Source(factory) => source = Some((factory, setup, subtask_display)),
                NodeFactory::Operator(factory) => {
                    let created = factory
                        .create(&setup)
                        .map_err(|e| setup_error(&node.name, Some(subtask_display), e))?;
                    position.insert(node_id, nodes.len());
                    nodes.push(created);
                }
            }
        }
        let mut source_successors = Vec::new();
        for &node_id in &vertex.operators {
            let node = sg.node(node_id);
            let mut successors = Vec::new();
            // Per side-output tag: its record type and its consumers.
            let mut side: Vec<(String, Arc<dyn StreamType>, Vec<usize>)> = Vec::new();
            for edge in sg.out_edges(node_id) {
                let ty = job.edge_type(edge.id);
                let group = match &edge.side_output {
                    None => &mut successors,
                    Some(tag) => {
                        let at = match side.iter().position(|(t, _, _)| t == tag) {
                            Some(at) => at,
                            None => {
                                side.push((tag.clone(), ty.clone(), Vec::new()));
                                side.len() - 1
                            }
                        };
                        &mut side[at].2
                    }
                };
                if jg.is_chained(edge.id) {
                    let target = position.get(&edge.target).ok_or_else(|| {
                        WeirError::Internal(format!("chained successor of `{}` missing", node.name))
                    })?;
                    group.push(*target);
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
                                consumer: &sg.node(edge.target).name,
                                producer_subtask: ev.id.subtask,
                                batch_size: config.buffer_size,
                                cancel: cancel.clone(),
                                metrics: Some(task_metrics.clone()),
                                wakeup: wakeup.clone(),
                            },
                        )
                        .map_err(WeirError::Internal)?;
                    group.push(nodes.len());
                    nodes.push(writer);
                }
            }
            match position.get(&node_id) {
                Some(&at) => {
                    let output = nodes[at].output_type();
                    let relative =
                        relative_successors(&nodes, &node.name, at, output, &successors)?;
                    nodes[at].set_successors(relative);
                    if !side.is_empty() {
                        let mut slots = Vec::with_capacity(side.len());
                        for (tag, ty, consumers) in side {
                            let output = Some(ty.record_type_id());
                            let relative =
                                relative_successors(&nodes, &node.name, at, output, &consumers)?;
                            slots.push(ty.side_output_slot(tag.as_str().into(), relative));
                        }
                        nodes[at]
                            .set_side_outputs(SideOutputs::new(slots))
                            .map_err(|e| WeirError::Internal(e.to_string()))?;
                    }
                }
                None if side.is_empty() => source_successors = successors,
                None => {
                    return Err(WeirError::Internal(format!(
                        "source `{}` has side outputs",
                        node.name
                    ))
                    .into())
                }
            }
        }
        let replay = |chain: &mut OperatorChain| -> Result<(), DeployError> {
            for (node_id, entries) in &in_flight {
                let at = *position
                    .get(node_id)
                    .ok_or_else(|| WeirError::Internal("in-flight records of a source".into()))?;
                // One edge per input: a union's edges into one input share its type.
                let mut inputs: Vec<&crate::graph::stream_graph::StreamEdge> = Vec::new();
                for edge in sg.in_edges(*node_id) {
                    if !inputs.iter().any(|e| e.input == edge.input) {
                        inputs.push(edge);
                    }
                }
                for edge in inputs {
                    let batches = job
                        .edge_type(edge.id)
                        .in_flight_batches(entries, edge.input.saturating_sub(1))
                        .map_err(|e| DeployError::CorruptState(e.to_string()))?;
                    chain.replay_on_open(at, edge.input, batches);
                }
            }
            Ok(())
        };
        let body = match source {
            Some((factory, setup, subtask_display)) => {
                let endpoint = endpoints
                    .get_mut(&setup.node)
                    .and_then(|eps| eps.get_mut(ev.id.subtask as usize))
                    .and_then(Option::take)
                    .ok_or_else(|| WeirError::Internal("missing reader endpoint".into()))?;
                let mut chain = OperatorChain::new(nodes, source_successors, config.buffer_size)
                    .map_err(|e| WeirError::Internal(e.to_string()))?;
                replay(&mut chain)?;
                factory
                    .create_task(&setup, chain, endpoint)
                    .map_err(|e| setup_error(&setup.name, Some(subtask_display), e))?
            }
            None => {
                let head = vertex.head();
                let NodeFactory::Operator(factory) = &job.factories[head.index()] else {
                    return Err(WeirError::Internal(format!(
                        "chain head `{}` is a source without a source task",
                        sg.node(head).name
                    ))
                    .into());
                };
                let at = *position
                    .get(&head)
                    .ok_or_else(|| WeirError::Internal("chain head missing".into()))?;
                let mut chain = OperatorChain::new(nodes, vec![at], config.buffer_size)
                    .map_err(|e| WeirError::Internal(e.to_string()))?;
                replay(&mut chain)?;
                let broadcast_input = |input: u8| {
                    sg.edges.iter().any(|e| {
                        e.target == head
                            && e.input == input
                            && e.partitioner == PartitionerKind::Broadcast
                    })
                };
                let channel_state = ChannelStateSetup {
                    head,
                    broadcast_inputs: [broadcast_input(1), broadcast_input(2)],
                    doorbell: doorbell.clone(),
                };
                factory
                    .create_task(
                        receivers.remove(&ev.id).unwrap_or_default(),
                        chain,
                        cancel.clone(),
                        config.buffer_timeout,
                        channel_state,
                    )
                    .map_err(WeirError::Internal)?
            }
        };
        tasks.push(DeployedTask {
            task: ev.id,
            name: ev.name.clone(),
            body,
            metrics: task_metrics,
        });
    }
    Ok(tasks)
}
