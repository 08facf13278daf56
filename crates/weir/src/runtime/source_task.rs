//! Source subtasks and their coordinator.
//!
//! Each source subtask runs a [`SourceReader`] in a loop; between two polls it takes split
//! assignments from the coordinator, so its position is always exact between records. The
//! coordinator runs the source's [`SplitEnumerator`] on the job manager's side. The two talk
//! only through channels of [`ReaderEvent`]s and [`SplitAssignment`]s.

use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{select, Receiver, Sender, TryRecvError};

use crate::connectors::source::{
    InputStatus, ReaderEvent, Source, SourceReader, SourceReaderContext, SplitAssignment,
    SplitEnumerator, SplitEnumeratorContext,
};
use crate::error::{BoxError, TaskError};
use crate::graph::ids::NodeId;
use crate::runtime::channel::CancelToken;
use crate::runtime::operator_factory::{SourceCoordinatorRunner, SourceFactory};
use crate::runtime::output::{call_user, call_with_collector, user_error, OperatorMetrics, Output};
use crate::runtime::stream_element::StreamEvent;
use crate::runtime::stream_type::{downcast, AnyBox};
use crate::runtime::task::{Invokable, OperatorSetup};

/// A reader's line to the coordinator.
pub struct ReaderEndpoint<S> {
    to_coordinator: Sender<ReaderEvent>,
    assignments: Receiver<SplitAssignment<S>>,
}

/// Runs one source reader and pushes its records into the chain.
pub struct SourceTask<S: Source> {
    node: NodeId,
    name: Arc<str>,
    subtask: u32,
    reader: S::Reader,
    endpoint: ReaderEndpoint<S::Split>,
    output: Box<dyn Output<S::Output>>,
    cancel: CancelToken,
    buffer_timeout: std::time::Duration,
    records_out: u64,
}

impl<S: Source> SourceTask<S> {
    fn apply(&mut self, assignment: SplitAssignment<S::Split>) -> Result<(), TaskError> {
        let reader = &mut self.reader;
        match assignment {
            SplitAssignment::AddSplits(splits) => {
                call_user(&self.name, || reader.add_splits(splits))?
                    .map_err(|e| user_error(&self.name, e))
            }
            SplitAssignment::NoMoreSplits => {
                call_user(&self.name, || reader.notify_no_more_splits())
            }
        }
    }

    fn take_assignments(&mut self) -> Result<(), TaskError> {
        loop {
            match self.endpoint.assignments.try_recv() {
                Ok(assignment) => self.apply(assignment)?,
                Err(TryRecvError::Empty) => return Ok(()),
                Err(TryRecvError::Disconnected) => return Err(self.coordinator_gone()),
            }
        }
    }

    fn coordinator_gone(&self) -> TaskError {
        if self.cancel.is_cancelled() {
            TaskError::Cancelled
        } else {
            TaskError::ChannelClosed {
                peer: "source coordinator",
            }
        }
    }

    /// Waits until the reader may have data again, a split arrives, or the job is cancelled.
    fn wait_for_data(&mut self) -> Result<(), TaskError> {
        let delay = self.reader.poll_delay();
        let assignment = select! {
            recv(self.endpoint.assignments) -> msg => msg.map_err(|_| self.coordinator_gone())?,
            recv(self.cancel.receiver()) -> _ => return Err(TaskError::Cancelled),
            default(delay) => return Ok(()),
        };
        self.apply(assignment)
    }
}

impl<S: Source> Invokable for SourceTask<S> {
    fn invoke(&mut self) -> Result<(), TaskError> {
        // If the coordinator is gone the next poll of assignments reports it.
        let _ = self
            .endpoint
            .to_coordinator
            .send(ReaderEvent::Registered(self.subtask));
        let reader = &mut self.reader;
        call_user(&self.name, || reader.start())?.map_err(|e| user_error(&self.name, e))?;
        let mut flush_deadline = Instant::now() + self.buffer_timeout;
        loop {
            if self.cancel.is_cancelled() {
                return Err(TaskError::Cancelled);
            }
            self.take_assignments()?;
            let mut status = InputStatus::NothingAvailable;
            let reader = &mut self.reader;
            call_with_collector(
                &self.name,
                &mut *self.output,
                &mut self.records_out,
                |out| {
                    status = reader.poll_next(out)?;
                    Ok::<(), BoxError>(())
                },
            )?;
            match status {
                InputStatus::MoreAvailable => {
                    let now = Instant::now();
                    if now >= flush_deadline {
                        self.output.flush()?;
                        flush_deadline = now + self.buffer_timeout;
                    }
                }
                InputStatus::NothingAvailable => {
                    self.output.flush()?;
                    flush_deadline = Instant::now() + self.buffer_timeout;
                    self.wait_for_data()?;
                }
                InputStatus::EndOfInput => break,
            }
        }
        self.output.emit_event(&StreamEvent::EndOfStream)
    }

    fn report_metrics(&self, into: &mut Vec<OperatorMetrics>) {
        into.push(OperatorMetrics {
            node: self.node,
            subtask: self.subtask,
            records_in: 0,
            records_out: self.records_out,
        });
        self.output.report_metrics(into);
    }
}

/// Runs a source's enumerator and forwards its assignments to the readers.
struct SourceCoordinator<E: SplitEnumerator> {
    name: Arc<str>,
    enumerator: E,
    context: SplitEnumeratorContext<E::Split>,
    inbox: Receiver<ReaderEvent>,
    readers: Vec<Sender<SplitAssignment<E::Split>>>,
    cancel: CancelToken,
}

impl<E: SplitEnumerator> SourceCoordinator<E> {
    fn call(
        &mut self,
        f: impl FnOnce(&mut E, &mut SplitEnumeratorContext<E::Split>) -> Result<(), BoxError>,
    ) -> Result<(), TaskError> {
        let (enumerator, context) = (&mut self.enumerator, &mut self.context);
        call_user(&self.name, || f(enumerator, context))?.map_err(|e| user_error(&self.name, e))?;
        for (subtask, assignment) in self.context.take_outbox() {
            let reader = self.readers.get(subtask as usize).ok_or_else(|| {
                user_error(
                    &self.name,
                    format!("enumerator assigned to reader {subtask}, which does not exist").into(),
                )
            })?;
            // A reader that has already ended no longer needs its assignments.
            let _ = reader.send(assignment);
        }
        Ok(())
    }
}

impl<E: SplitEnumerator> SourceCoordinatorRunner for SourceCoordinator<E> {
    fn run(mut self: Box<Self>) -> Result<(), TaskError> {
        self.call(|e, ctx| e.start(ctx))?;
        loop {
            let event = select! {
                recv(self.inbox) -> event => match event {
                    Ok(event) => event,
                    Err(_) => return Ok(()),
                },
                recv(self.cancel.receiver()) -> _ => return Err(TaskError::Cancelled),
            };
            match event {
                ReaderEvent::Registered(subtask) => self.call(|e, ctx| {
                    ctx.register(subtask);
                    e.add_reader(subtask, ctx)
                })?,
                ReaderEvent::SplitRequest(subtask) => {
                    self.call(|e, ctx| e.handle_split_request(subtask, ctx))?
                }
            }
        }
    }
}

/// The [`SourceFactory`] of a [`Source`].
pub struct SourceOperatorFactory<S> {
    source: S,
}

impl<S: Source> SourceOperatorFactory<S> {
    /// Wraps `source`.
    pub fn new(source: S) -> Self {
        Self { source }
    }
}

impl<S: Source> SourceFactory for SourceOperatorFactory<S> {
    fn create_coordinator(
        &self,
        parallelism: u32,
        name: &str,
        cancel: CancelToken,
    ) -> Result<(Box<dyn SourceCoordinatorRunner>, Vec<AnyBox>), BoxError> {
        let enumerator = self.source.create_enumerator(parallelism)?;
        let (to_coordinator, inbox) = crossbeam_channel::unbounded();
        let mut readers = Vec::new();
        let mut endpoints: Vec<AnyBox> = Vec::new();
        for _ in 0..parallelism {
            let (tx, rx) = crossbeam_channel::unbounded();
            readers.push(tx);
            endpoints.push(Box::new(ReaderEndpoint::<S::Split> {
                to_coordinator: to_coordinator.clone(),
                assignments: rx,
            }));
        }
        let coordinator = SourceCoordinator {
            name: Arc::from(format!("{name} (coordinator)")),
            enumerator,
            context: SplitEnumeratorContext::new(parallelism),
            inbox,
            readers,
            cancel,
        };
        Ok((Box::new(coordinator), endpoints))
    }

    fn create_task(
        &self,
        setup: &OperatorSetup,
        output: AnyBox,
        endpoint: AnyBox,
    ) -> Result<Box<dyn Invokable>, BoxError> {
        let output = downcast::<Box<dyn Output<S::Output>>>(output, "source output")?;
        let endpoint = downcast::<ReaderEndpoint<S::Split>>(endpoint, "reader endpoint")?;
        let context = SourceReaderContext::new(
            setup.subtask,
            setup.parallelism,
            endpoint.to_coordinator.clone(),
        );
        let reader = self.source.create_reader(context)?;
        Ok(Box::new(SourceTask::<S> {
            node: setup.node,
            name: setup.name.clone(),
            subtask: setup.subtask,
            reader,
            endpoint,
            output,
            cancel: setup.cancel.clone(),
            buffer_timeout: setup.config.buffer_timeout,
            records_out: 0,
        }))
    }

    fn max_parallelism(&self) -> Option<u32> {
        self.source.max_parallelism()
    }
}
