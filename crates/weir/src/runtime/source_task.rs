//! Source subtasks and their coordinator.
//!
//! Each source subtask runs a [`SourceReader`] in a loop; between two polls it takes
//! messages from the coordinator (split assignments, checkpoint triggers), so its position is
//! always exact between records. The coordinator runs the source's [`SplitEnumerator`] on the
//! job manager's side. A checkpoint trigger goes to the coordinator first: it snapshots the
//! enumerator, then queues the trigger to every reader behind the assignments it already
//! sent — so every split is, at the checkpoint, either in the enumerator's state or in
//! exactly one reader's.
//!
//! A stop-with-savepoint's barrier is the last thing a reader emits (Flink's synchronous
//! savepoint): it then reads nothing and waits for the savepoint's fate — on completion the
//! task ends, on failure (without drain) it reads on from where it stopped.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, Sender, TryRecvError};

use crate::checkpoint::metadata::{ListRedistribution, ListStateEntry};
use crate::connectors::malformed::MalformedRecordCounters;
use crate::connectors::source::{
    InputStatus, ReaderEvent, Source, SourceReader, SourceReaderContext, SourceSplit,
    SplitAssignment, SplitEnumerator, SplitEnumeratorContext,
};
use crate::error::{BoxError, TaskError};
use crate::graph::ids::NodeId;
use crate::runtime::batch::RecordBatch;
use crate::runtime::chain::OperatorChain;
use crate::runtime::channel::CancelToken;
use crate::runtime::operator_factory::{SourceCoordinatorRunner, SourceFactory};
use crate::runtime::output::{
    call_user, call_with_collector, user_error, Collector, OperatorMetrics,
};
use crate::runtime::snapshot::{
    await_final_checkpoint, await_stop_savepoint, checkpoint_chain, fire_due_processing_timers,
    CheckpointNotification, OperatorSnapshot, StopOutcome,
};
use crate::runtime::source_watermarks::{SourceOutput, SourceWatermarks};
use crate::runtime::stream_element::CheckpointBarrier;
use crate::runtime::task::{Invokable, OperatorSetup, TaskControl, TaskEnvironment, TaskEvent};
use crate::time::{Watermark, WatermarkStrategy};

/// Name of the operator list state holding a reader's splits (Flink's `SourceReaderState`).
pub const READER_SPLITS_STATE: &str = "source-reader-splits";

/// A message from the coordinator to one reader, in order. Plain data (Flink's operator
/// events): the coordinator runs on the JobManager, the reader may run in another process.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ReaderMessage {
    /// Splits, or the end of them: a postcard-encoded `SplitAssignment` of the source's
    /// split type.
    Assignment(Vec<u8>),
    /// Take checkpoint `barrier` now.
    Trigger(CheckpointBarrier),
}

/// A message from the job manager to a source coordinator.
#[derive(Debug, Clone, Copy)]
pub enum CoordinatorControl {
    /// Snapshot the enumerator and have the readers take the checkpoint.
    Trigger(CheckpointBarrier),
    /// A checkpoint completed or aborted.
    Notify(CheckpointNotification),
}

/// A reader's line to the coordinator: its requests go out on one queue, the coordinator's
/// messages come in on another. Across processes, the TaskManager and the JobManager forward
/// both.
pub struct ReaderEndpoint {
    to_coordinator: Sender<ReaderEvent>,
    messages: Receiver<ReaderMessage>,
}

impl ReaderEndpoint {
    /// Where the coordinator's messages (checkpoint triggers among them) arrive: watched by
    /// the source's record writers while they wait for room (unaligned checkpoints).
    pub fn messages(&self) -> crossbeam_channel::Receiver<ReaderMessage> {
        self.messages.clone()
    }

    /// An endpoint whose requests go to `to_coordinator` and whose messages come from
    /// `messages`.
    pub fn new(to_coordinator: Sender<ReaderEvent>, messages: Receiver<ReaderMessage>) -> Self {
        Self {
            to_coordinator,
            messages,
        }
    }

    /// Takes the endpoint apart: the line to the coordinator and the line from it (to
    /// forward them elsewhere).
    pub fn into_parts(self) -> (Sender<ReaderEvent>, Receiver<ReaderMessage>) {
        (self.to_coordinator, self.messages)
    }
}

/// Runs one source reader and pushes its records into the chain.
pub struct SourceTask<S: Source> {
    node: NodeId,
    name: Arc<str>,
    subtask: u32,
    reader: S::Reader,
    restored_splits: Option<Vec<S::Split>>,
    endpoint: ReaderEndpoint,
    chain: OperatorChain,
    /// The reader's records, handed to the chain in batches.
    buffer: RecordBatch<S::Output>,
    buffer_timeout: Duration,
    records_out: u64,
    /// The source's live metrics.
    live: crate::metrics::OperatorMetricGroup,
    /// What the reader counts of malformed records.
    malformed: MalformedRecordCounters,
    /// The stop-with-savepoint barrier just emitted: the reader reads nothing more until the
    /// savepoint's fate is known.
    stop_at: Option<CheckpointBarrier>,
    /// Checkpoints newer than the last one taken that the job manager already aborted: a
    /// late stop-with-savepoint trigger among them must not stop the source.
    aborted: BTreeSet<u64>,
    /// The newest checkpoint this reader took.
    last_checkpoint: u64,
    /// Event time per split, when the source has a watermark strategy.
    watermarks: Option<SourceWatermarks<S::Output>>,
    /// How often the splits' generators emit periodically (`None`: never).
    watermark_interval: Option<Duration>,
    /// When they emit next.
    next_watermark: Instant,
    /// When the chain's next processing-time timer is due.
    timer_deadline: Option<Instant>,
    /// Whether the reader says where each record was read (the attempt after a failure of
    /// user code), so that an operator failing on one names it.
    trace_origins: bool,
}

impl<S: Source> SourceTask<S> {
    /// Runs the periodic watermark emission if it is due.
    fn emit_periodic_watermarks(&mut self) -> Result<(), TaskError> {
        let (Some(watermarks), Some(interval)) = (&mut self.watermarks, self.watermark_interval)
        else {
            return Ok(());
        };
        let now = Instant::now();
        if now < self.next_watermark {
            return Ok(());
        }
        self.next_watermark = now + interval;
        watermarks.on_periodic_emit(now);
        let (status, watermark) = watermarks.combine();
        if let Some(status) = status {
            self.chain.emit_watermark_status(status)?;
        }
        if let Some(watermark) = watermark {
            self.live.set_watermark(watermark);
            self.chain.process_watermark(watermark)?;
        }
        Ok(())
    }

    /// Lets the reader emit what it has into the chain; returns its status.
    fn poll_reader(&mut self) -> Result<InputStatus, TaskError> {
        let mut status = InputStatus::NothingAvailable;
        let reader = &mut self.reader;
        let mut poll = |out: &mut Collector<'_, S::Output>| {
            status = reader.poll_next(out)?;
            Ok::<(), BoxError>(())
        };
        let chain = self
            .chain
            .entry_output(&mut self.buffer, &mut self.records_out)
            .counting(&self.live.records_out)
            .tracing_origins(self.trace_origins);
        match &mut self.watermarks {
            None => {
                let mut output = chain;
                call_with_collector(&self.name, &mut output, &mut poll)?;
                output.flush()?;
            }
            Some(watermarks) => {
                let mut output = SourceOutput::new(chain, watermarks);
                call_with_collector(&self.name, &mut output, &mut poll)?;
                output.flush()?;
            }
        }
        Ok(status)
    }

    fn on_message(
        &mut self,
        message: ReaderMessage,
        env: &TaskEnvironment,
    ) -> Result<(), TaskError> {
        let reader = &mut self.reader;
        match message {
            ReaderMessage::Assignment(bytes) => {
                let assignment: SplitAssignment<S::Split> =
                    postcard::from_bytes(&bytes).map_err(|e| {
                        TaskError::Internal(format!(
                            "`{}` cannot decode a split assignment from its coordinator: {e}",
                            self.name
                        ))
                    })?;
                match assignment {
                    SplitAssignment::AddSplits(splits) => {
                        register_splits(&mut self.watermarks, &splits);
                        call_user(&self.name, || reader.add_splits(splits))?
                            .map_err(|e| user_error(&self.name, e))
                    }
                    SplitAssignment::NoMoreSplits => {
                        call_user(&self.name, || reader.notify_no_more_splits())
                    }
                    SplitAssignment::ReadersSharing(readers) => {
                        call_user(&self.name, || reader.set_readers_sharing(readers))
                    }
                }
            }
            ReaderMessage::Trigger(barrier) => self.checkpoint(barrier, env),
        }
    }

    /// Snapshots the reader's position between two records, then the chain. At a
    /// stop-with-savepoint's barrier the source stops: it reads nothing after it, so its
    /// position in the savepoint is exactly where it stopped.
    fn checkpoint(
        &mut self,
        mut barrier: CheckpointBarrier,
        env: &TaskEnvironment,
    ) -> Result<(), TaskError> {
        let id = barrier.checkpoint_id;
        if barrier.stop.is_some() && self.aborted.contains(&id) {
            // The stop already failed; downstream ignores the barrier of an aborted
            // checkpoint, and with the flag cleared no chained operator ends its input.
            barrier.stop = None;
        }
        self.aborted.retain(|aborted| *aborted > id);
        self.last_checkpoint = self.last_checkpoint.max(id);
        // With drain, this source's input ends here: event time ends (the maximum watermark,
        // as Flink emits on drain), and the chained operators end their input when the
        // barrier passes them, before their snapshot.
        if barrier.drains() {
            self.chain.process_watermark(Watermark::MAX)?;
        }
        let reader = &mut self.reader;
        let splits = call_user(&self.name, || reader.snapshot_state(barrier.checkpoint_id))?
            .map_err(|e| user_error(&self.name, e))?;
        let items = splits
            .iter()
            .map(postcard::to_allocvec)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| user_error(&self.name, format!("cannot serialize split: {e}").into()))?;
        let position = OperatorSnapshot {
            node: self.node,
            keyed: None,
            lists: vec![ListStateEntry {
                name: READER_SPLITS_STATE.into(),
                mode: ListRedistribution::EvenSplit,
                items,
            }],
        };
        checkpoint_chain(
            &mut self.chain,
            vec![position],
            barrier,
            env,
            Duration::ZERO,
            None,
        )?;
        if barrier.stop.is_some() {
            self.stop_at = Some(barrier);
        }
        Ok(())
    }

    /// Waits at a stop-with-savepoint's barrier; returns whether the savepoint completed
    /// (the task ends) or failed (reading resumes).
    fn await_stop(
        &mut self,
        barrier: CheckpointBarrier,
        env: &TaskEnvironment,
    ) -> Result<StopOutcome, TaskError> {
        tracing::debug!(task = %env.task_name, savepoint = barrier.checkpoint_id, "source stopped at the savepoint's barrier");
        let outcome = await_stop_savepoint(env, barrier, |control| self.on_control(control))?;
        match outcome {
            StopOutcome::Resumed => {
                tracing::info!(task = %env.task_name, savepoint = barrier.checkpoint_id, "stop-with-savepoint failed; reading resumes");
            }
            // The task ends as the savepoint left it, its operators closed.
            StopOutcome::Completed => self.chain.close()?,
        }
        Ok(outcome)
    }

    fn on_control(&mut self, control: TaskControl) -> Result<(), TaskError> {
        match control {
            TaskControl::Notify(notification) => {
                match notification {
                    CheckpointNotification::Complete(id) => {
                        let reader = &mut self.reader;
                        call_user(&self.name, || reader.notify_checkpoint_complete(id))?
                            .map_err(|e| user_error(&self.name, e))?;
                    }
                    CheckpointNotification::Aborted(id) if id > self.last_checkpoint => {
                        self.aborted.insert(id);
                    }
                    CheckpointNotification::Aborted(_) => {}
                }
                self.chain.notify_checkpoint(notification)
            }
            TaskControl::Stop => Err(TaskError::Cancelled),
            TaskControl::StopTracingOrigins => {
                self.trace_origins = false;
                Ok(())
            }
        }
    }

    /// All input is read: tells the job manager, then keeps taking checkpoints until the
    /// final one, whose id it returns; `None` when the job was stopped with a savepoint
    /// meanwhile.
    fn await_final_trigger(&mut self, env: &TaskEnvironment) -> Result<Option<u64>, TaskError> {
        let _ = env.events.send(TaskEvent::EndOfInput { task: env.task });
        loop {
            select! {
                recv(self.endpoint.messages) -> message => {
                    match message.map_err(|_| coordinator_gone(env))? {
                        ReaderMessage::Trigger(barrier) => {
                            self.checkpoint(barrier, env)?;
                            if barrier.is_final {
                                return Ok(Some(barrier.checkpoint_id));
                            }
                            if let Some(stop) = self.stop_at.take() {
                                if self.await_stop(stop, env)? == StopOutcome::Completed {
                                    return Ok(None);
                                }
                            }
                        }
                        other => self.on_message(other, env)?,
                    }
                }
                recv(env.control) -> control => match control {
                    Ok(control) => self.on_control(control)?,
                    Err(_) => return Err(TaskError::Cancelled),
                },
                recv(env.cancel.receiver()) -> _ => return Err(TaskError::Cancelled),
            }
        }
    }

    /// Applies the coordinator's queued messages, stopping after a checkpoint so that the
    /// reader gets to emit records between two checkpoints however fast they are triggered.
    fn take_messages(&mut self, env: &TaskEnvironment) -> Result<(), TaskError> {
        while let Ok(control) = env.control.try_recv() {
            self.on_control(control)?;
        }
        loop {
            match self.endpoint.messages.try_recv() {
                Ok(message) => {
                    let was_trigger = matches!(message, ReaderMessage::Trigger(_));
                    self.on_message(message, env)?;
                    if was_trigger {
                        return Ok(());
                    }
                }
                Err(TryRecvError::Empty) => return Ok(()),
                Err(TryRecvError::Disconnected) => return Err(coordinator_gone(env)),
            }
        }
    }

    /// Waits until the reader may have data again, a message arrives, the next periodic
    /// watermark is due, or the job is cancelled.
    fn wait_for_data(&mut self, env: &TaskEnvironment) -> Result<(), TaskError> {
        let mut delay = self.reader.poll_delay();
        if self.watermarks.is_some() && self.watermark_interval.is_some() {
            delay = delay.min(
                self.next_watermark
                    .saturating_duration_since(Instant::now()),
            );
        }
        if let Some(deadline) = self.timer_deadline {
            delay = delay.min(deadline.saturating_duration_since(Instant::now()));
        }
        // The reader has nothing: the source is idle until something arrives.
        enum Woken {
            Message(Result<ReaderMessage, crossbeam_channel::RecvError>),
            Control(Result<TaskControl, crossbeam_channel::RecvError>),
            Cancelled,
            Timeout,
        }
        let woken = crate::metrics::CurrentTask::idle(|| {
            select! {
                recv(self.endpoint.messages) -> msg => Woken::Message(msg),
                recv(env.control) -> control => Woken::Control(control),
                recv(env.cancel.receiver()) -> _ => Woken::Cancelled,
                default(delay) => Woken::Timeout,
            }
        });
        match woken {
            Woken::Message(msg) => {
                let message = msg.map_err(|_| coordinator_gone(env))?;
                self.on_message(message, env)
            }
            Woken::Control(Ok(control)) => self.on_control(control),
            Woken::Control(Err(_)) | Woken::Cancelled => Err(TaskError::Cancelled),
            Woken::Timeout => Ok(()),
        }
    }
}

/// Every split assigned to a reader holds its watermark back from the moment it is
/// assigned, not only once it is read (as Flink's `SourceReaderBase`): a reader that reads its
/// splits one after the other must not let the first one's event time run ahead of the rest.
fn register_splits<T, S: SourceSplit>(watermarks: &mut Option<SourceWatermarks<T>>, splits: &[S]) {
    if let Some(watermarks) = watermarks {
        for split in splits {
            watermarks.add_split(&split.split_id());
        }
    }
}

fn coordinator_gone(env: &TaskEnvironment) -> TaskError {
    if env.cancel.is_cancelled() {
        TaskError::Cancelled
    } else {
        TaskError::ChannelClosed {
            peer: "source coordinator",
        }
    }
}

impl<S: Source> Invokable for SourceTask<S> {
    fn invoke(&mut self, env: &TaskEnvironment) -> Result<(), TaskError> {
        self.chain.open()?;
        let mut restored_any = false;
        if let Some(splits) = self.restored_splits.take() {
            restored_any = !splits.is_empty();
            register_splits(&mut self.watermarks, &splits);
            let reader = &mut self.reader;
            call_user(&self.name, || reader.add_splits(splits))?
                .map_err(|e| user_error(&self.name, e))?;
        }
        // If the coordinator is gone the next look at its messages reports it.
        let _ = self
            .endpoint
            .to_coordinator
            .send(ReaderEvent::Registered(self.subtask));
        if restored_any {
            let _ = self
                .endpoint
                .to_coordinator
                .send(ReaderEvent::Reading(self.subtask));
        }
        let reader = &mut self.reader;
        call_user(&self.name, || reader.start())?.map_err(|e| user_error(&self.name, e))?;
        let mut flush_deadline = Instant::now() + self.buffer_timeout;
        loop {
            if env.cancel.is_cancelled() {
                return Err(TaskError::Cancelled);
            }
            if let Some(stop) = self.stop_at.take() {
                match self.await_stop(stop, env)? {
                    StopOutcome::Completed => return Ok(()),
                    StopOutcome::Resumed => flush_deadline = Instant::now() + self.buffer_timeout,
                }
            }
            self.take_messages(env)?;
            // A stop-with-savepoint's barrier was just emitted: not one more record.
            if self.stop_at.is_some() {
                continue;
            }
            // Output queued in overdraft (a trigger came while the writers waited for room)
            // goes before the reader is polled again.
            if env.unaligned && self.chain.settle_overdraft(None)? {
                continue;
            }
            let status = self.poll_reader()?;
            self.emit_periodic_watermarks()?;
            self.timer_deadline = fire_due_processing_timers(&mut self.chain)?;
            match status {
                InputStatus::MoreAvailable => {
                    let now = Instant::now();
                    if now >= flush_deadline {
                        self.chain.flush()?;
                        flush_deadline = now + self.buffer_timeout;
                    }
                }
                InputStatus::NothingAvailable => {
                    self.chain.flush()?;
                    flush_deadline = Instant::now() + self.buffer_timeout;
                    self.wait_for_data(env)?;
                }
                InputStatus::EndOfInput => break,
            }
        }
        // The data ends before the final barrier, so that what operators emit when their
        // input ends is in the final checkpoint and committed with it (FLIP-147).
        // Event time ends with the input: every window and timer downstream fires.
        self.chain.process_watermark(Watermark::MAX)?;
        self.chain.end_data()?;
        if !env.checkpointing() {
            return self.chain.end_stream();
        }
        // Flink's FLIP-147: the task ends only after a final checkpoint covering all its
        // output has completed, so its last transactions are committed exactly once.
        let Some(final_id) = self.await_final_trigger(env)? else {
            return Ok(());
        };
        self.chain.end_stream()?;
        let (reader, chain, name) = (&mut self.reader, &mut self.chain, &self.name);
        await_final_checkpoint(env, final_id, |n| {
            if let CheckpointNotification::Complete(id) = n {
                call_user(name, || reader.notify_checkpoint_complete(id))?
                    .map_err(|e| user_error(name, e))?;
            }
            chain.notify_checkpoint(n)
        })
    }

    fn report_metrics(&self, into: &mut Vec<OperatorMetrics>) {
        into.push(OperatorMetrics {
            node: self.node,
            subtask: self.subtask,
            records_in: 0,
            records_out: self.records_out,
            records_skipped: self.malformed.skipped(),
            records_dead_lettered: self.malformed.dead_lettered(),
            watermark: self
                .chain
                .entry_watermark()
                .max(self.watermarks.as_ref().and_then(|w| w.current())),
            backward_watermarks: self
                .watermarks
                .as_ref()
                .map_or(0, |w| w.backward_watermarks()),
            late_records_dropped: 0,
        });
        self.chain.report_metrics(into);
    }
}

/// Runs a source's enumerator and forwards its assignments and checkpoint triggers to the
/// readers.
struct SourceCoordinator<E: SplitEnumerator> {
    node: NodeId,
    name: Arc<str>,
    enumerator: E,
    context: SplitEnumeratorContext<E::Split>,
    inbox: Receiver<ReaderEvent>,
    readers: Vec<Sender<ReaderMessage>>,
    cancel: CancelToken,
    /// Readers that hold splits (assigned or restored).
    reading: std::collections::BTreeSet<u32>,
    /// How many of them the readers were last told of.
    announced: usize,
}

impl<E: SplitEnumerator> SourceCoordinator<E> {
    fn send(&self, subtask: u32, assignment: &SplitAssignment<E::Split>) -> Result<(), TaskError> {
        let reader = self.readers.get(subtask as usize).ok_or_else(|| {
            user_error(
                &self.name,
                format!("enumerator assigned to reader {subtask}, which does not exist").into(),
            )
        })?;
        let bytes = postcard::to_allocvec(assignment).map_err(|e| {
            user_error(
                &self.name,
                format!("cannot serialize a split assignment: {e}").into(),
            )
        })?;
        // A reader that has already ended no longer needs its assignments.
        let _ = reader.send(ReaderMessage::Assignment(bytes));
        Ok(())
    }

    /// Tells every reader how many readers hold splits, when that changed.
    fn announce_readers_sharing(&mut self) -> Result<(), TaskError> {
        if self.reading.len() == self.announced {
            return Ok(());
        }
        self.announced = self.reading.len();
        let sharing = SplitAssignment::ReadersSharing(self.announced as u32);
        for subtask in 0..self.readers.len() as u32 {
            self.send(subtask, &sharing)?;
        }
        Ok(())
    }

    fn call(
        &mut self,
        f: impl FnOnce(&mut E, &mut SplitEnumeratorContext<E::Split>) -> Result<(), BoxError>,
    ) -> Result<(), TaskError> {
        let (enumerator, context) = (&mut self.enumerator, &mut self.context);
        call_user(&self.name, || f(enumerator, context))?.map_err(|e| user_error(&self.name, e))?;
        for (subtask, assignment) in self.context.take_outbox() {
            if matches!(&assignment, SplitAssignment::AddSplits(splits) if !splits.is_empty()) {
                self.reading.insert(subtask);
            }
            self.send(subtask, &assignment)?;
        }
        self.announce_readers_sharing()
    }

    fn trigger(
        &mut self,
        barrier: CheckpointBarrier,
        events: &Sender<TaskEvent>,
    ) -> Result<(), TaskError> {
        let enumerator = &mut self.enumerator;
        let state = call_user(&self.name, || {
            enumerator.snapshot_state(barrier.checkpoint_id)
        })?
        .map_err(|e| user_error(&self.name, e))?;
        let state = postcard::to_allocvec(&state).map_err(|e| {
            user_error(
                &self.name,
                format!("cannot serialize enumerator state: {e}").into(),
            )
        })?;
        let _ = events.send(TaskEvent::CoordinatorAcknowledge {
            node: self.node,
            checkpoint_id: barrier.checkpoint_id,
            state,
        });
        for reader in &self.readers {
            let _ = reader.send(ReaderMessage::Trigger(barrier));
        }
        Ok(())
    }
}

impl<E: SplitEnumerator> SourceCoordinatorRunner for SourceCoordinator<E> {
    fn run(
        mut self: Box<Self>,
        control: Receiver<CoordinatorControl>,
        events: Sender<TaskEvent>,
    ) -> Result<(), TaskError> {
        self.call(|e, ctx| e.start(ctx))?;
        let tick = self.enumerator.tick_interval();
        let mut inbox = self.inbox.clone();
        let mut next_tick = tick.map(|t| Instant::now() + t);
        loop {
            let wait = next_tick.map_or(Duration::from_secs(3600), |t| {
                t.saturating_duration_since(Instant::now())
            });
            select! {
                recv(inbox) -> event => match event {
                    Ok(ReaderEvent::Registered(subtask)) => self.call(|e, ctx| {
                        ctx.register(subtask);
                        e.add_reader(subtask, ctx)
                    })?,
                    Ok(ReaderEvent::SplitRequest(subtask)) => {
                        self.call(|e, ctx| e.handle_split_request(subtask, ctx))?
                    }
                    Ok(ReaderEvent::Reading(subtask)) => {
                        self.reading.insert(subtask);
                        self.announce_readers_sharing()?
                    }
                    // Every reader has ended; keep serving checkpoints until the attempt ends.
                    Err(_) => inbox = crossbeam_channel::never(),
                },
                recv(control) -> message => match message {
                    Ok(CoordinatorControl::Trigger(barrier)) => self.trigger(barrier, &events)?,
                    Ok(CoordinatorControl::Notify(CheckpointNotification::Complete(id))) => {
                        self.call(|e, _| e.notify_checkpoint_complete(id))?
                    }
                    Ok(CoordinatorControl::Notify(CheckpointNotification::Aborted(_))) => {}
                    Err(_) => return Ok(()),
                },
                recv(self.cancel.receiver()) -> _ => return Err(TaskError::Cancelled),
                default(wait) => {
                    if let Some(interval) = tick {
                        self.call(|e, ctx| e.on_tick(ctx))?;
                        next_tick = Some(Instant::now() + interval);
                    }
                }
            }
        }
    }
}

/// The [`SourceFactory`] of a [`Source`] with its watermark strategy.
pub struct SourceOperatorFactory<S: Source> {
    source: S,
    strategy: WatermarkStrategy<S::Output>,
}

impl<S: Source> SourceOperatorFactory<S> {
    /// Wraps `source`, whose event time follows `strategy`.
    pub fn new(source: S, strategy: WatermarkStrategy<S::Output>) -> Self {
        Self { source, strategy }
    }
}

impl<S: Source> SourceFactory for SourceOperatorFactory<S> {
    fn create_coordinator(
        &self,
        node: NodeId,
        parallelism: u32,
        name: &str,
        cancel: CancelToken,
        restored: Option<&[u8]>,
    ) -> Result<(Box<dyn SourceCoordinatorRunner>, Vec<ReaderEndpoint>), BoxError> {
        let enumerator = match restored {
            Some(bytes) => {
                let state = postcard::from_bytes(bytes)
                    .map_err(|e| format!("cannot decode the restored enumerator state: {e}"))?;
                self.source.restore_enumerator(parallelism, state)?
            }
            None => self.source.create_enumerator(parallelism)?,
        };
        let (to_coordinator, inbox) = crossbeam_channel::unbounded();
        let mut readers = Vec::new();
        let mut endpoints = Vec::new();
        for _ in 0..parallelism {
            let (tx, rx) = crossbeam_channel::unbounded();
            readers.push(tx);
            endpoints.push(ReaderEndpoint::new(to_coordinator.clone(), rx));
        }
        let coordinator = SourceCoordinator {
            node,
            name: Arc::from(format!("{name} (coordinator)")),
            enumerator,
            context: SplitEnumeratorContext::new(parallelism),
            inbox,
            readers,
            cancel,
            reading: std::collections::BTreeSet::new(),
            announced: 0,
        };
        Ok((Box::new(coordinator), endpoints))
    }

    fn create_task(
        &self,
        setup: &OperatorSetup,
        chain: OperatorChain,
        endpoint: ReaderEndpoint,
    ) -> Result<Box<dyn Invokable>, BoxError> {
        let restored_splits = match &setup.restored {
            Some(restored) => {
                let mut splits = Vec::new();
                for entry in restored
                    .lists
                    .iter()
                    .filter(|l| l.name == READER_SPLITS_STATE)
                {
                    for item in &entry.items {
                        splits.push(
                            postcard::from_bytes(item)
                                .map_err(|e| format!("cannot decode a restored split: {e}"))?,
                        );
                    }
                }
                Some(splits)
            }
            None => None,
        };
        let context = SourceReaderContext::new(
            setup.subtask,
            setup.parallelism,
            endpoint.to_coordinator.clone(),
        )
        .with_metric_group(setup.metrics.group().clone());
        let malformed = context.malformed_record_counters();
        let reader = self.source.create_reader(context)?;
        Ok(Box::new(SourceTask::<S> {
            node: setup.node,
            name: setup.name.clone(),
            subtask: setup.subtask,
            reader,
            restored_splits,
            endpoint,
            chain,
            buffer: RecordBatch::default(),
            buffer_timeout: setup.config.buffer_timeout,
            records_out: 0,
            live: setup.metrics.clone(),
            malformed,
            stop_at: None,
            aborted: BTreeSet::new(),
            last_checkpoint: 0,
            watermarks: (self.strategy.has_watermarks() || self.strategy.has_timestamp_assigner())
                .then(|| SourceWatermarks::new(self.strategy.clone())),
            watermark_interval: Some(setup.config.auto_watermark_interval).filter(|i| !i.is_zero()),
            next_watermark: Instant::now(),
            timer_deadline: None,
            trace_origins: setup.trace_record_origins,
        }))
    }

    fn max_parallelism(&self) -> Option<u32> {
        self.source.max_parallelism()
    }
}
