//! The loop of a task whose chain head reads from channels — one input or two — records,
//! end-of-stream, checkpoint barriers (aligned per the checkpointing mode across every input
//! channel), watermarks (the minimum over the active channels of all inputs) and job manager
//! messages.

use std::time::{Duration, Instant};

use crate::checkpoint::barrier_handler::{BarrierAction, BarrierHandler};
use crate::checkpoint::metadata::ListStateEntry;
use crate::error::TaskError;
use crate::graph::ids::NodeId;
use crate::runtime::chain::OperatorChain;
use crate::runtime::input_gate::GateNext;
use crate::runtime::output::OperatorMetrics;
use crate::runtime::snapshot::{
    await_final_checkpoint, await_stop_savepoint, checkpoint_chain, fire_due_processing_timers,
    CheckpointNotification, PendingChannelState, StopOutcome,
};
use crate::runtime::stream_element::{CheckpointBarrier, StreamEvent};
use crate::runtime::task::{Invokable, TaskControl, TaskEnvironment, TaskEvent};
use crate::runtime::task_inputs::{InputEvent, TaskInputs};
use crate::runtime::watermark_valve::{StatusWatermarkValve, ValveOutput};
use crate::time::Watermark;

/// Records processed between two looks at the priority lanes (unaligned checkpoints).
const UNALIGNED_CHUNK: usize = 32;

/// How long a task in overdraft waits for room at a time while it captures in-flight
/// records, before it reads its capturing channels again.
const OVERDRAFT_WAIT_WHILE_CAPTURING: Duration = Duration::from_millis(1);

/// Reads the task's inputs and pushes records through the operator chain, driving its
/// lifecycle.
///
/// Partly filled output batches are flushed when the input runs dry (so an idle pipeline
/// has no added latency) and at the latest after the buffer timeout while busy.
pub struct StreamTask<In> {
    gate: In,
    chain: OperatorChain,
    buffer_timeout: Duration,
    /// Checkpoint whose first barrier arrived, and when.
    first_barrier: Option<(u64, Instant)>,
    /// The job's final checkpoint, once this task has taken it.
    final_checkpoint: Option<u64>,
    /// Highest checkpoint whose completion this task has been told of.
    completed_up_to: u64,
    /// The stop-with-savepoint barrier this task just took: it reads nothing more until the
    /// savepoint's fate is known.
    stop_at: Option<CheckpointBarrier>,
    /// Channels that sent their end of data.
    data_ended: Vec<bool>,
    /// Whether the chain has ended its input (every channel's data ended).
    input_ended: bool,
    /// The task's watermark: the minimum over its active channels.
    valve: StatusWatermarkValve,
    /// The chain head, whose list state carries the task's channel state.
    head: NodeId,
    /// The unaligned checkpoint whose in-flight records are being captured, and where its
    /// snapshot thread waits for them.
    capture: Option<(u64, crossbeam_channel::Sender<Vec<ListStateEntry>>)>,
}

impl<In: TaskInputs> StreamTask<In> {
    /// A task reading `gate` into `chain`, whose first operator is `head`.
    pub fn new(gate: In, chain: OperatorChain, buffer_timeout: Duration, head: NodeId) -> Self {
        let data_ended = vec![false; gate.num_channels()];
        Self {
            gate,
            chain,
            buffer_timeout,
            first_barrier: None,
            final_checkpoint: None,
            completed_up_to: 0,
            stop_at: None,
            valve: StatusWatermarkValve::new(data_ended.len()),
            data_ended,
            input_ended: false,
            head,
            capture: None,
        }
    }

    /// Gives up the capture in progress (its snapshot thread then declines).
    fn abort_capture(&mut self) {
        if self.capture.take().is_some() {
            self.gate.abort_capture();
        }
    }

    /// Reads the capturing channels ahead and, once every channel's barrier is in, hands
    /// the channel state to the snapshot thread.
    fn progress_capture(&mut self) -> Result<(), TaskError> {
        if self.capture.is_none() {
            return Ok(());
        }
        self.gate.drain_captures()?;
        if self.gate.capture_complete() {
            if let Some((id, state)) = self.capture.take() {
                let entries = self.gate.take_channel_state();
                tracing::debug!(
                    checkpoint = id,
                    entries = entries.len(),
                    "channel state captured"
                );
                // A snapshot thread that gave up (the write failed) no longer waits.
                let _ = state.send(entries);
            }
        }
        Ok(())
    }

    /// Takes the barriers that overtook the channels' queues.
    fn take_priority_barriers(
        &mut self,
        handler: &mut BarrierHandler,
        env: &TaskEnvironment,
    ) -> Result<(), TaskError> {
        while let Some((_, barrier)) = self.gate.poll_priority() {
            self.on_priority_barrier(barrier, handler, env)?;
        }
        Ok(())
    }

    fn on_priority_barrier(
        &mut self,
        barrier: CheckpointBarrier,
        handler: &mut BarrierHandler,
        env: &TaskEnvironment,
    ) -> Result<(), TaskError> {
        self.note_first_barrier(barrier);
        let actions = handler.on_priority_barrier(barrier, &self.gate.open_flags(), Instant::now());
        self.apply(actions, env)
    }

    /// An alignment that lasted the aligned-checkpoint timeout goes unaligned.
    fn check_alignment_timeout(
        &mut self,
        handler: &mut BarrierHandler,
        env: &TaskEnvironment,
    ) -> Result<(), TaskError> {
        let now = Instant::now();
        if handler.alignment_deadline().is_some_and(|d| now >= d) {
            let actions = handler.on_timer(&self.gate.open_flags(), now);
            self.apply(actions, env)?;
        }
        Ok(())
    }

    fn note_first_barrier(&mut self, barrier: CheckpointBarrier) {
        if self
            .first_barrier
            .is_none_or(|(id, _)| id < barrier.checkpoint_id)
        {
            self.first_barrier = Some((barrier.checkpoint_id, Instant::now()));
        }
    }

    fn apply(
        &mut self,
        actions: Vec<BarrierAction>,
        env: &TaskEnvironment,
    ) -> Result<(), TaskError> {
        for action in actions {
            match action {
                BarrierAction::Block(channel) => self.gate.set_blocked(channel, true),
                BarrierAction::SnapshotUnaligned { barrier, capture } => {
                    self.gate.unblock_all();
                    // A newer checkpoint overtakes an older capture still in progress.
                    self.abort_capture();
                    let alignment = match self.first_barrier.take() {
                        Some((id, at)) if id == barrier.checkpoint_id => at.elapsed(),
                        _ => Duration::ZERO,
                    };
                    let (tx, rx) = crossbeam_channel::bounded(1);
                    checkpoint_chain(
                        &mut self.chain,
                        Vec::new(),
                        barrier,
                        env,
                        alignment,
                        Some(PendingChannelState {
                            head: self.head,
                            state: rx,
                        }),
                    )?;
                    self.gate.start_capture(barrier.checkpoint_id, &capture)?;
                    self.capture = Some((barrier.checkpoint_id, tx));
                    self.progress_capture()?;
                }
                BarrierAction::Snapshot(barrier) => {
                    self.gate.unblock_all();
                    self.abort_capture();
                    let alignment = match self.first_barrier.take() {
                        Some((id, at)) if id == barrier.checkpoint_id => at.elapsed(),
                        _ => Duration::ZERO,
                    };
                    // A draining stop's barrier makes the chain end its input before the
                    // snapshot (the operators see it first); all input before it is processed,
                    // and the sources sent nothing after it.
                    checkpoint_chain(&mut self.chain, Vec::new(), barrier, env, alignment, None)?;
                    if barrier.is_final {
                        self.final_checkpoint = Some(barrier.checkpoint_id);
                    }
                    if barrier.stop.is_some() {
                        self.stop_at = Some(barrier);
                    }
                }
                BarrierAction::Abort(checkpoint_id) => {
                    self.gate.unblock_all();
                    self.first_barrier = None;
                    let _ = env.events.send(TaskEvent::Decline {
                        task: env.task,
                        checkpoint_id,
                        reason: "a newer checkpoint's barrier arrived during alignment".into(),
                        subsumed: true,
                    });
                }
            }
        }
        Ok(())
    }

    fn on_control(
        &mut self,
        control: TaskControl,
        handler: &mut BarrierHandler,
    ) -> Result<(), TaskError> {
        match control {
            TaskControl::Notify(notification) => {
                match notification {
                    CheckpointNotification::Aborted(id) => {
                        if handler.on_abort(id) {
                            self.gate.unblock_all();
                            self.first_barrier = None;
                        }
                        if self.capture.as_ref().is_some_and(|(c, _)| *c == id) {
                            self.abort_capture();
                        }
                    }
                    CheckpointNotification::Complete(id) => {
                        self.completed_up_to = self.completed_up_to.max(id);
                    }
                }
                self.chain.notify_checkpoint(notification)
            }
            TaskControl::Stop => Err(TaskError::Cancelled),
            // Only sources trace; records read before still carry their origins.
            TaskControl::StopTracingOrigins => Ok(()),
        }
    }

    /// Fires the chain's processing-time timers that are due; returns when the next one is.
    fn fire_due_timers(&mut self) -> Result<Option<Instant>, TaskError> {
        fire_due_processing_timers(&mut self.chain)
    }

    /// Passes what the watermark valve let through to the chain.
    fn apply_valve(
        &mut self,
        outputs: impl IntoIterator<Item = ValveOutput>,
    ) -> Result<(), TaskError> {
        for output in outputs {
            match output {
                ValveOutput::Watermark(watermark) => self.chain.process_watermark(watermark)?,
                ValveOutput::Status(status) => self.chain.emit_watermark_status(status)?,
            }
        }
        Ok(())
    }

    /// The chain ends its input once: when every channel's data has ended (before the final
    /// barrier, which is in those channels after their end of data), or at the latest when
    /// every channel has closed. Event time ends first (the maximum watermark), so that every
    /// window and timer fires into the final checkpoint.
    fn end_data(&mut self) -> Result<(), TaskError> {
        if !self.input_ended {
            self.input_ended = true;
            for channel in 0..self.gate.num_channels() {
                let released = self.valve.channel_finished(channel);
                self.apply_valve(released)?;
            }
            if self.gate.num_channels() == 0 {
                self.chain.process_watermark(Watermark::MAX)?;
            }
            self.chain.end_data()?;
        }
        Ok(())
    }

    /// Ends the chain's input once every channel has sent its end of data or closed.
    fn end_data_if_all_ended(&mut self) -> Result<(), TaskError> {
        let all_ended = (0..self.gate.num_channels())
            .all(|c| self.data_ended[c] || self.gate.is_channel_finished(c));
        if all_ended {
            self.end_data()?;
        }
        Ok(())
    }

    /// Every input channel has ended: the chain ends its input (if the channels' ends of
    /// data did not already), the stream ends, and the task waits for the final checkpoint's
    /// completion if it took part in one.
    fn end_input(&mut self, env: &TaskEnvironment) -> Result<(), TaskError> {
        self.end_data()?;
        self.chain.end_stream()?;
        // The completion notice may have come before the end of the input.
        if let Some(final_id) = self.final_checkpoint.filter(|f| *f > self.completed_up_to) {
            let chain = &mut self.chain;
            await_final_checkpoint(env, final_id, |n| chain.notify_checkpoint(n))?;
        }
        Ok(())
    }

    /// After a stop-with-savepoint's snapshot: waits for the savepoint's fate; returns true
    /// when the task ends (the savepoint completed and its notice reached the chain, or it
    /// failed and the input had ended meanwhile).
    fn await_stop(
        &mut self,
        barrier: CheckpointBarrier,
        handler: &mut BarrierHandler,
        env: &TaskEnvironment,
    ) -> Result<bool, TaskError> {
        let outcome =
            await_stop_savepoint(env, barrier, |control| self.on_control(control, handler))?;
        match outcome {
            // No end of input (drained chains ended theirs at the barrier): the task ends as
            // the savepoint left it, its operators closed.
            StopOutcome::Completed => {
                self.chain.close()?;
                Ok(true)
            }
            StopOutcome::Resumed if self.gate.is_finished() => {
                self.end_input(env)?;
                Ok(true)
            }
            StopOutcome::Resumed => Ok(false),
        }
    }

    /// Handles an event; returns true when the input has ended.
    fn on_event(
        &mut self,
        channel: usize,
        event: StreamEvent,
        handler: &mut BarrierHandler,
        env: &TaskEnvironment,
    ) -> Result<bool, TaskError> {
        match event {
            StreamEvent::EndOfData => {
                self.data_ended[channel] = true;
                self.end_data_if_all_ended()?;
                Ok(false)
            }
            StreamEvent::Watermark(watermark) => {
                let advanced = self.valve.input_watermark(channel, watermark);
                self.apply_valve(advanced)?;
                Ok(false)
            }
            StreamEvent::WatermarkStatus(status) => {
                let changes = self.valve.input_status(channel, status);
                self.apply_valve(changes)?;
                Ok(false)
            }
            StreamEvent::EndOfStream => {
                self.gate.mark_finished(channel);
                let released = self.valve.channel_finished(channel);
                self.apply_valve(released)?;
                // An ended channel has nothing more in flight: a capture may be complete.
                self.progress_capture()?;
                // A channel that closed without its end of data ended its data too.
                self.end_data_if_all_ended()?;
                let actions = handler.on_channel_finished(&self.gate.open_flags());
                self.apply(actions, env)?;
                // A stop-with-savepoint's snapshot just taken is settled first (see `invoke`).
                if self.gate.is_finished() && self.stop_at.is_none() {
                    self.end_input(env)?;
                    return Ok(true);
                }
                Ok(false)
            }
            StreamEvent::Barrier(barrier) => {
                // Completion notices already delivered go first: a sink's pre-commit at this
                // barrier may depend on the previous checkpoint's commit (PostgreSQL
                // upserts wait on the rows its prepared transaction holds).
                while let Ok(control) = env.control.try_recv() {
                    self.on_control(control, handler)?;
                }
                self.note_first_barrier(barrier);
                let actions =
                    handler.on_barrier(channel, barrier, &self.gate.open_flags(), Instant::now());
                self.apply(actions, env)?;
                Ok(false)
            }
        }
    }
}

impl<In: TaskInputs> Invokable for StreamTask<In> {
    fn invoke(&mut self, env: &TaskEnvironment) -> Result<(), TaskError> {
        self.chain.open()?;
        if self.gate.num_channels() == 0 {
            self.end_data()?;
            return self.chain.end_stream();
        }
        let mut handler =
            BarrierHandler::new(env.mode).with_aligned_timeout(env.aligned_checkpoint_timeout);
        let unaligned = env.unaligned;
        if unaligned {
            self.gate.watch_priority();
        }
        // With unaligned checkpoints a batch is processed in chunks, so that a barrier
        // that overtook the queues is taken within a chunk, not a whole batch.
        let chunk = unaligned.then_some(UNALIGNED_CHUNK);
        let mut flush_deadline = Instant::now() + self.buffer_timeout;
        loop {
            while let Ok(control) = env.control.try_recv() {
                self.on_control(control, &mut handler)?;
            }
            if unaligned {
                self.take_priority_barriers(&mut handler, env)?;
                self.check_alignment_timeout(&mut handler, env)?;
                self.progress_capture()?;
                // Output queued in overdraft goes first; no new input is taken meanwhile,
                // so that it stays within one input batch. While a capture is in progress,
                // the wait is short, so that the capture goes on reading its channels.
                let until = self
                    .capture
                    .is_some()
                    .then(|| Instant::now() + OVERDRAFT_WAIT_WHILE_CAPTURING);
                if self.chain.settle_overdraft(until)? {
                    continue;
                }
            }
            let timer_deadline = match (self.fire_due_timers()?, handler.alignment_deadline()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let (channel, element) = match self.gate.poll()? {
                Some(ready) => ready,
                None => {
                    self.chain.flush()?;
                    flush_deadline = Instant::now() + self.buffer_timeout;
                    match self.gate.next_blocking(&env.control, timer_deadline)? {
                        GateNext::Element(channel, element) => (channel, element),
                        GateNext::Other(control) => {
                            self.on_control(control, &mut handler)?;
                            continue;
                        }
                        GateNext::Timeout => continue,
                        GateNext::Priority(_, barrier) => {
                            self.on_priority_barrier(barrier, &mut handler, env)?;
                            continue;
                        }
                    }
                }
            };
            match element {
                InputEvent::Records => {
                    self.gate.process_pending(&mut self.chain, chunk)?;
                    let now = Instant::now();
                    if now >= flush_deadline {
                        self.chain.flush()?;
                        flush_deadline = now + self.buffer_timeout;
                    }
                }
                InputEvent::Event(event) => {
                    if self.on_event(channel, event, &mut handler, env)? {
                        return Ok(());
                    }
                    if let Some(stop) = self.stop_at.take() {
                        if self.await_stop(stop, &mut handler, env)? {
                            return Ok(());
                        }
                        flush_deadline = Instant::now() + self.buffer_timeout;
                    }
                }
            }
        }
    }

    fn report_metrics(&self, into: &mut Vec<OperatorMetrics>) {
        self.chain.report_metrics(into);
    }
}
