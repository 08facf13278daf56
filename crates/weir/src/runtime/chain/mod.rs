//! The operator chain of a task (Flink's `OperatorChain`): its operators and record writers
//! as an addressable list, in topological order, each knowing the positions of its
//! successors. Records and watermarks flow from a node to its successors through a
//! [`ChainOutput`], in batches handed over by direct calls; the lifecycle (open, end of input,
//! checkpoints, completion notices, close) is driven by the task over the list, node by node.
//!
//! A node's successors always come after it in the list, so a node is called with the part
//! of the list after it (`rest`) and reaches its successors there by offset, without shared
//! ownership.

mod chain_output;
mod operator_node;
mod side_output;

use std::any::{Any, TypeId};

pub(crate) use chain_output::forward_batch;
pub use chain_output::ChainOutput;
pub use operator_node::{OneInputNode, TwoInputNode};
pub use side_output::{SideOutputSlot, SideOutputs};

use crate::error::TaskError;
use crate::runtime::batch::RecordBatch;
use crate::runtime::output::OperatorMetrics;
use crate::runtime::snapshot::{CheckpointNotification, OperatorSnapshot};
use crate::runtime::stream_element::{CheckpointBarrier, InputEnd, StreamEvent};
use crate::time::{Watermark, WatermarkStatus};

/// Nodes of a chain, in order: what a node is called with is the part of the list after
/// it, where its successors are.
pub type ChainTail = [Box<dyn ChainedNode>];

/// One entry of an [`OperatorChain`]: an operator, or a record writer to other tasks. Type
/// erased, so that a chain of differently typed operators is one list; batches are checked
/// against the node's input type once per batch.
pub trait ChainedNode: Send {
    /// The operator's name, for errors.
    fn name(&self) -> &str;
    /// The type of the records this node takes.
    fn input_type(&self) -> TypeId;
    /// The type of the records it emits (`None` for a record writer, which ends the chain).
    fn output_type(&self) -> Option<TypeId>;
    /// Sets the positions of the nodes it emits to, as offsets into the list after it.
    fn set_successors(&mut self, successors: Vec<usize>);
    /// Sets its side outputs (operators only).
    fn set_side_outputs(&mut self, _side_outputs: SideOutputs) -> Result<(), TaskError> {
        Err(TaskError::Internal(format!(
            "`{}` has no side outputs",
            self.name()
        )))
    }
    /// Opens the node before the first record (the task opens the tail first).
    fn open(&mut self) -> Result<(), TaskError>;
    /// Processes a batch (a `Vec` of the input type, drained), emitting into `rest`.
    fn process_records(
        &mut self,
        batch: &mut dyn Any,
        rest: &mut ChainTail,
    ) -> Result<(), TaskError>;
    /// Processes a batch of the second input (two-input operators, which head their chain).
    fn process_records_second(
        &mut self,
        _batch: &mut dyn Any,
        _rest: &mut ChainTail,
    ) -> Result<(), TaskError> {
        Err(TaskError::Internal(format!(
            "`{}` has one input, but records of a second arrived",
            self.name()
        )))
    }
    /// Processes a watermark (after every record before it), emitting into `rest`.
    fn process_watermark(
        &mut self,
        watermark: Watermark,
        rest: &mut ChainTail,
    ) -> Result<(), TaskError>;
    /// Passes a change of watermark status on (operators forward it; record writers send it).
    fn process_watermark_status(
        &mut self,
        status: WatermarkStatus,
        rest: &mut ChainTail,
    ) -> Result<(), TaskError>;
    /// The earliest processing time at which the node has a timer to fire.
    fn next_processing_time(&self) -> Option<i64>;
    /// The wall clock reached `time`: the node fires its processing-time timers due.
    fn on_processing_time(&mut self, time: i64, rest: &mut ChainTail) -> Result<(), TaskError>;
    /// The node's input has ended (its predecessor ended before it).
    fn end_input(&mut self, cause: InputEnd, rest: &mut ChainTail) -> Result<(), TaskError>;
    /// Work before checkpoint `checkpoint_id`'s barrier leaves the task: what the node emits
    /// here belongs to the checkpoint.
    fn prepare_snapshot_pre_barrier(
        &mut self,
        checkpoint_id: u64,
        rest: &mut ChainTail,
    ) -> Result<(), TaskError>;
    /// The synchronous part of checkpoint `checkpoint_id`: appends the node's frozen state.
    fn snapshot_state(
        &mut self,
        barrier: CheckpointBarrier,
        into: &mut Vec<OperatorSnapshot>,
    ) -> Result<(), TaskError>;
    /// A checkpoint completed or was aborted.
    fn notify_checkpoint(&mut self, notification: CheckpointNotification) -> Result<(), TaskError>;
    /// Sends an event to other tasks (record writers only; operators ignore it).
    fn broadcast_event(&mut self, event: &StreamEvent) -> Result<(), TaskError>;
    /// Sends partly filled batches to other tasks (record writers only).
    fn flush(&mut self) -> Result<(), TaskError>;
    /// Sends what a record writer queued in overdraft (see `RecordWriter`), unless its
    /// wakeup rings again or `until` passes; returns whether it is still in overdraft.
    /// Other nodes have nothing to do.
    fn settle_overdraft(&mut self, _until: Option<std::time::Instant>) -> Result<bool, TaskError> {
        Ok(false)
    }
    /// The stream has ended: releases resources.
    fn close(&mut self) -> Result<(), TaskError>;
    /// Appends the node's record counts (record writers have none).
    fn report_metrics(&self, into: &mut Vec<OperatorMetrics>);
}

/// Calls `f` with each node and the part of the list after it, in list order.
fn for_each_in_order(
    nodes: &mut ChainTail,
    mut f: impl FnMut(&mut Box<dyn ChainedNode>, &mut ChainTail) -> Result<(), TaskError>,
) -> Result<(), TaskError> {
    for i in 0..nodes.len() {
        let (node, rest) = nodes[i..]
            .split_first_mut()
            .ok_or_else(|| TaskError::Internal("operator chain position out of range".into()))?;
        f(node, rest)?;
    }
    Ok(())
}

/// A task's operators and record writers, and where its input enters.
pub struct OperatorChain {
    nodes: Vec<Box<dyn ChainedNode>>,
    /// Positions of the nodes the task's input (its source, or its input gate) feeds.
    entry: Vec<usize>,
    /// Records handed over at once between nodes (the job's network batch size).
    batch_size: usize,
    /// The last watermark passed to the entry nodes.
    entry_watermark: Option<Watermark>,
    /// Restored in-flight records (an unaligned checkpoint's channel state): per node
    /// position and input (1 or 2), boxed `RecordBatch`es pushed into it when the chain
    /// opens, before the task reads anything.
    in_flight: Vec<(usize, u8, Box<dyn Any + Send>)>,
}

impl OperatorChain {
    /// A chain of `nodes` (topological order, successors set) fed at `entry`, handing over
    /// up to `batch_size` records at once.
    pub fn new(
        nodes: Vec<Box<dyn ChainedNode>>,
        entry: Vec<usize>,
        batch_size: usize,
    ) -> Result<Self, TaskError> {
        if let Some(bad) = entry.iter().find(|&&e| e >= nodes.len()) {
            return Err(TaskError::Internal(format!(
                "chain entry {bad} out of {} nodes",
                nodes.len()
            )));
        }
        Ok(Self {
            nodes,
            entry,
            batch_size: batch_size.max(1),
            entry_watermark: None,
            in_flight: Vec::new(),
        })
    }

    /// Replays `batches` (boxed `RecordBatch`es of its input type) into the node at
    /// `position`, as its input `input` (1 or 2), when the chain opens. Whichever task the
    /// node's old chain was, its in-flight records go to it, also when it is chained
    /// differently now (a single-subtask exchange chains at parallelism 1).
    pub fn replay_on_open(
        &mut self,
        position: usize,
        input: u8,
        batches: Vec<Box<dyn Any + Send>>,
    ) {
        self.in_flight
            .extend(batches.into_iter().map(|b| (position, input, b)));
    }

    /// Checks that a node emitting `output` may feed the node at `successor`.
    pub fn check_link(
        nodes: &[Box<dyn ChainedNode>],
        from: &str,
        output: Option<TypeId>,
        successor: usize,
    ) -> Result<(), TaskError> {
        let target = nodes.get(successor).ok_or_else(|| {
            TaskError::Internal(format!("successor {successor} of `{from}` missing"))
        })?;
        if output != Some(target.input_type()) {
            return Err(TaskError::Internal(format!(
                "`{from}` emits records of another type than `{}` takes",
                target.name()
            )));
        }
        Ok(())
    }

    /// Number of nodes (operators and record writers).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the chain has no nodes (a source nobody reads).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node at `index`.
    pub fn node(&self, index: usize) -> Option<&dyn ChainedNode> {
        self.nodes.get(index).map(|n| &**n)
    }

    /// Opens every node, the tail first, so that no operator emits into one not yet open.
    pub fn open(&mut self) -> Result<(), TaskError> {
        self.nodes.iter_mut().rev().try_for_each(|n| n.open())?;
        for (position, input, mut batch) in std::mem::take(&mut self.in_flight) {
            let (node, rest) = self.nodes[position..]
                .split_first_mut()
                .ok_or_else(|| TaskError::Internal("in-flight records for no node".into()))?;
            let batch = &mut *batch as &mut dyn Any;
            if input == 2 {
                node.process_records_second(batch, rest)?;
            } else {
                node.process_records(batch, rest)?;
            }
        }
        Ok(())
    }

    /// The output the task's input writes into (a source reader's, or the input gate's).
    pub fn entry_output<'a, T: crate::record::Record>(
        &'a mut self,
        buffer: &'a mut RecordBatch<T>,
        records_out: &'a mut u64,
    ) -> ChainOutput<'a, T> {
        ChainOutput::new(
            buffer,
            &self.entry,
            &mut self.nodes,
            records_out,
            self.batch_size,
        )
    }

    /// Pushes a batch the task read into the entry nodes (drains it).
    pub fn process_records<T: crate::record::Record>(
        &mut self,
        batch: &mut RecordBatch<T>,
    ) -> Result<(), TaskError> {
        forward_batch(&self.entry, &mut self.nodes, batch)
    }

    /// The last watermark passed to the entry nodes, if any.
    pub fn entry_watermark(&self) -> Option<Watermark> {
        self.entry_watermark
    }

    /// Pushes a batch of the task's second input into the chain's head (drains it).
    pub fn process_records_second<T: crate::record::Record>(
        &mut self,
        batch: &mut RecordBatch<T>,
    ) -> Result<(), TaskError> {
        let head = *self
            .entry
            .first()
            .ok_or_else(|| TaskError::Internal("a two-input chain without a head".into()))?;
        let (node, rest) = self.nodes[head..]
            .split_first_mut()
            .ok_or_else(|| TaskError::Internal("operator chain entry out of range".into()))?;
        node.process_records_second(batch as &mut dyn Any, rest)
    }

    /// Passes a watermark to the entry nodes.
    pub fn process_watermark(&mut self, watermark: Watermark) -> Result<(), TaskError> {
        self.entry_watermark = Some(watermark);
        for &e in &self.entry {
            let (node, rest) = self.nodes[e..]
                .split_first_mut()
                .ok_or_else(|| TaskError::Internal("operator chain entry out of range".into()))?;
            node.process_watermark(watermark, rest)?;
        }
        Ok(())
    }

    /// Passes a change of the task's watermark status down the chain to the tasks
    /// downstream.
    pub fn emit_watermark_status(&mut self, status: WatermarkStatus) -> Result<(), TaskError> {
        for &e in &self.entry {
            let (node, rest) = self.nodes[e..]
                .split_first_mut()
                .ok_or_else(|| TaskError::Internal("operator chain entry out of range".into()))?;
            node.process_watermark_status(status, rest)?;
        }
        Ok(())
    }

    /// The earliest processing time at which an operator of the chain has a timer to fire.
    pub fn next_processing_time(&self) -> Option<i64> {
        self.nodes
            .iter()
            .filter_map(|n| n.next_processing_time())
            .min()
    }

    /// Fires the processing-time timers due at `time` (milliseconds since the Unix epoch),
    /// operator by operator in list order.
    pub fn fire_processing_timers(&mut self, time: i64) -> Result<(), TaskError> {
        for_each_in_order(&mut self.nodes, |node, rest| {
            node.on_processing_time(time, rest)
        })
    }

    /// Ends the input of every operator, in list order: each has received everything its
    /// predecessor emits, also at its own end of input, before its turn.
    fn end_operators_input(&mut self, cause: InputEnd) -> Result<(), TaskError> {
        for_each_in_order(&mut self.nodes, |node, rest| node.end_input(cause, rest))
    }

    /// The task's input has no more data: the operators end their input, then every record
    /// writer sends `EndOfData` (barriers, the final one among them, may still follow).
    pub fn end_data(&mut self) -> Result<(), TaskError> {
        self.end_operators_input(InputEnd::EndOfData)?;
        self.broadcast_event(&StreamEvent::EndOfData)
    }

    /// The synchronous part of checkpoint `barrier` at this task, after the task's own
    /// state (in `snapshots`): a draining stop ends the operators' input first; each
    /// operator then does its pre-barrier work, the barrier leaves on every writer, and
    /// every operator's state is frozen into `snapshots`.
    pub fn checkpoint(
        &mut self,
        barrier: CheckpointBarrier,
        snapshots: &mut Vec<OperatorSnapshot>,
    ) -> Result<(), TaskError> {
        if barrier.drains() {
            self.end_operators_input(InputEnd::Drain)?;
        }
        let id = barrier.checkpoint_id;
        for_each_in_order(&mut self.nodes, |node, rest| {
            node.prepare_snapshot_pre_barrier(id, rest)
        })?;
        self.broadcast_event(&StreamEvent::Barrier(barrier))?;
        self.nodes
            .iter_mut()
            .try_for_each(|n| n.snapshot_state(barrier, snapshots))
    }

    /// Tells every node that a checkpoint completed or was aborted.
    pub fn notify_checkpoint(
        &mut self,
        notification: CheckpointNotification,
    ) -> Result<(), TaskError> {
        self.nodes
            .iter_mut()
            .try_for_each(|n| n.notify_checkpoint(notification))
    }

    /// Sends partly filled batches to other tasks.
    pub fn flush(&mut self) -> Result<(), TaskError> {
        self.nodes.iter_mut().try_for_each(|n| n.flush())
    }

    /// Ends the record writers' overdraft (unaligned checkpoints), unless what woke them
    /// rings again or `until` passes; returns whether some writer is still in overdraft.
    pub fn settle_overdraft(
        &mut self,
        until: Option<std::time::Instant>,
    ) -> Result<bool, TaskError> {
        let mut still = false;
        for node in &mut self.nodes {
            still |= node.settle_overdraft(until)?;
        }
        Ok(still)
    }

    /// Sends `event` on every record writer.
    fn broadcast_event(&mut self, event: &StreamEvent) -> Result<(), TaskError> {
        self.nodes
            .iter_mut()
            .try_for_each(|n| n.broadcast_event(event))
    }

    /// The task ends where a stop-with-savepoint left it (its input did not end): every
    /// operator closes, releasing what it holds, and no `EndOfStream` is sent.
    pub fn close(&mut self) -> Result<(), TaskError> {
        self.nodes.iter_mut().try_for_each(|n| n.close())
    }

    /// The task's stream has ended: every operator closes, then every writer sends
    /// `EndOfStream`.
    pub fn end_stream(&mut self) -> Result<(), TaskError> {
        self.nodes.iter_mut().try_for_each(|n| n.close())?;
        self.broadcast_event(&StreamEvent::EndOfStream)
    }

    /// Appends the record counts of every operator, in list order.
    pub fn report_metrics(&self, into: &mut Vec<OperatorMetrics>) {
        self.nodes.iter().for_each(|n| n.report_metrics(into));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::runtime::operators::{OneInputStreamOperator, StreamOperator};
    use crate::runtime::task::OperatorSetup;

    type Log = Arc<Mutex<Vec<String>>>;

    /// Logs every hook; emits `record * factor`, and `-1` when its input ends.
    struct Logged {
        name: &'static str,
        factor: i64,
        log: Log,
    }

    impl Logged {
        fn note(&self, what: String) {
            self.log
                .lock()
                .unwrap()
                .push(format!("{} {what}", self.name));
        }
    }

    impl StreamOperator for Logged {
        fn open(&mut self) -> Result<(), TaskError> {
            self.note("open".into());
            Ok(())
        }
        fn snapshot_state(
            &mut self,
            barrier: CheckpointBarrier,
            _into: &mut Vec<OperatorSnapshot>,
        ) -> Result<(), TaskError> {
            self.note(format!("snapshot {}", barrier.checkpoint_id));
            Ok(())
        }
    }

    impl OneInputStreamOperator<i64, i64> for Logged {
        fn process_element(
            &mut self,
            record: i64,
            out: &mut ChainOutput<'_, i64>,
        ) -> Result<(), TaskError> {
            self.note(format!("got {record}"));
            out.collect(record * self.factor)
        }
        fn process_watermark(
            &mut self,
            watermark: Watermark,
            out: &mut ChainOutput<'_, i64>,
        ) -> Result<(), TaskError> {
            self.note(format!("watermark {watermark}"));
            out.emit_watermark(watermark)
        }
        fn end_input(
            &mut self,
            cause: InputEnd,
            out: &mut ChainOutput<'_, i64>,
        ) -> Result<(), TaskError> {
            self.note(format!("end {cause:?}"));
            out.collect(-1)
        }
        fn prepare_snapshot_pre_barrier(
            &mut self,
            id: u64,
            _out: &mut ChainOutput<'_, i64>,
        ) -> Result<(), TaskError> {
            self.note(format!("pre-barrier {id}"));
            Ok(())
        }
    }

    fn node(
        index: u32,
        name: &'static str,
        factor: i64,
        log: &Log,
        successors: Vec<usize>,
    ) -> Box<dyn ChainedNode> {
        let mut setup = OperatorSetup::for_test(index, name);
        setup.config = setup.config.with_buffer_size(2);
        let mut node = OneInputNode::new(
            &setup,
            Logged {
                name,
                factor,
                log: log.clone(),
            },
        );
        ChainedNode::set_successors(&mut node, successors);
        Box::new(node)
    }

    /// a → (b, c), b → d: a tree of four operators.
    fn tree(log: &Log) -> OperatorChain {
        let nodes = vec![
            node(0, "a", 10, log, vec![0, 1]), // b at 1, c at 2
            node(1, "b", 2, log, vec![1]),     // d at 3
            node(2, "c", 3, log, vec![]),
            node(3, "d", 1, log, vec![]),
        ];
        OperatorChain::new(nodes, vec![0], 2).unwrap()
    }

    fn take(log: &Log) -> Vec<String> {
        std::mem::take(&mut *log.lock().unwrap())
    }

    #[test]
    fn records_reach_every_successor_in_order_and_fan_out_copies() {
        let log = Log::default();
        let mut chain = tree(&log);
        chain.open().unwrap();
        assert_eq!(take(&log), ["d open", "c open", "b open", "a open"]);
        chain.process_records(&mut vec![1i64, 2, 3].into()).unwrap();
        // Batches of two: a's first two records reach b (then d) and c before its third.
        assert_eq!(
            take(&log),
            [
                "a got 1", "a got 2", "b got 10", "b got 20", "d got 20", "d got 40", "c got 10",
                "c got 20", "a got 3", "b got 30", "d got 60", "c got 30"
            ]
        );
        let mut metrics = Vec::new();
        chain.report_metrics(&mut metrics);
        let counts: Vec<(u64, u64)> = metrics
            .iter()
            .map(|m| (m.records_in, m.records_out))
            .collect();
        assert_eq!(counts, [(3, 3), (3, 3), (3, 3), (3, 3)]);
    }

    #[test]
    fn watermarks_follow_records_and_end_of_input_goes_down_the_list() {
        let log = Log::default();
        let mut chain = tree(&log);
        chain.process_records(&mut vec![1i64].into()).unwrap();
        chain.process_watermark(Watermark::new(5)).unwrap();
        take(&log);
        chain.end_data().unwrap();
        // Each operator's end-of-input output reaches its successors before they end theirs.
        assert_eq!(
            take(&log),
            [
                "a end EndOfData",
                "b got -1",
                "d got -2",
                "c got -1",
                "b end EndOfData",
                "d got -1",
                "c end EndOfData",
                "d end EndOfData"
            ]
        );
    }

    #[test]
    fn a_checkpoint_runs_the_pre_barrier_hooks_in_order_then_snapshots() {
        let log = Log::default();
        let mut chain = tree(&log);
        let barrier = CheckpointBarrier {
            checkpoint_id: 7,
            timestamp_millis: 0,
            snapshot_type: crate::runtime::stream_element::SnapshotType::Checkpoint,
            is_final: false,
            unaligned: false,
            stop: None,
        };
        chain.checkpoint(barrier, &mut Vec::new()).unwrap();
        assert_eq!(
            take(&log),
            [
                "a pre-barrier 7",
                "b pre-barrier 7",
                "c pre-barrier 7",
                "d pre-barrier 7",
                "a snapshot 7",
                "b snapshot 7",
                "c snapshot 7",
                "d snapshot 7"
            ]
        );
    }

    #[test]
    fn a_batch_of_the_wrong_type_is_an_error_not_a_panic() {
        let log = Log::default();
        let mut chain = tree(&log);
        let error = chain
            .process_records(&mut vec!["x".to_string()].into())
            .unwrap_err();
        assert!(error.to_string().contains("another type"), "{error}");
        let nodes = &chain.nodes;
        assert!(OperatorChain::check_link(nodes, "a", Some(TypeId::of::<String>()), 1).is_err());
        assert!(OperatorChain::check_link(nodes, "a", Some(TypeId::of::<i64>()), 1).is_ok());
    }
}
