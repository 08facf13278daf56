//! Factories that create each node's runtime object once per subtask.

use std::marker::PhantomData;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use crate::error::BoxError;
use crate::graph::ids::NodeId;
use crate::record::Record;
use crate::runtime::chain::{ChainedNode, OneInputNode, OperatorChain, TwoInputNode};
use crate::runtime::channel::{CancelToken, ChannelReceiver};
use crate::runtime::channel_state::ChannelStateSetup;
use crate::runtime::input_gate::InputGate;
use crate::runtime::operators::{OneInputStreamOperator, TwoInputStreamOperator};
use crate::runtime::source_task::{CoordinatorControl, ReaderEndpoint};
use crate::runtime::stream_task::StreamTask;
use crate::runtime::stream_type::{downcast, AnyBox};
use crate::runtime::task::{Invokable, OperatorSetup, TaskEvent};
use crate::runtime::task_inputs::{OneInput, TwoInputs};

/// Creates an operator's chain node, once per subtask, and the task that reads its inputs
/// when it heads a chain.
pub trait OperatorFactory: Send {
    /// Creates the operator of one subtask.
    fn create(&self, setup: &OperatorSetup) -> Result<Box<dyn ChainedNode>, BoxError>;
    /// The task reading `receivers` (each tagged with the input it feeds, 1 or 2) into
    /// `chain`, which this operator heads.
    fn create_task(
        &self,
        receivers: Vec<(u8, AnyBox)>,
        chain: OperatorChain,
        cancel: CancelToken,
        buffer_timeout: Duration,
        channel_state: ChannelStateSetup,
    ) -> Result<Box<dyn Invokable>, String>;
}

/// Unboxes the channel receivers of one input.
fn receivers_of<T: Record>(
    receivers: &mut Vec<(u8, AnyBox)>,
    input: u8,
) -> Result<Vec<ChannelReceiver<T>>, String> {
    let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(receivers)
        .into_iter()
        .partition(|(i, _)| *i == input);
    *receivers = rest;
    mine.into_iter()
        .map(|(_, r)| downcast::<ChannelReceiver<T>>(r, "channel receiver"))
        .collect()
}

/// An [`OperatorFactory`] from a closure that creates a typed operator.
pub struct FnOperatorFactory<I, O, Op, F> {
    f: F,
    _types: PhantomData<fn(I) -> (O, Op)>,
}

impl<I, O, Op, F> FnOperatorFactory<I, O, Op, F>
where
    I: Record,
    O: Record,
    Op: OneInputStreamOperator<I, O> + 'static,
    F: Fn(&OperatorSetup) -> Result<Op, BoxError> + Send,
{
    /// Wraps `f`.
    pub fn new(f: F) -> Self {
        Self {
            f,
            _types: PhantomData,
        }
    }
}

impl<I, O, Op, F> OperatorFactory for FnOperatorFactory<I, O, Op, F>
where
    I: Record,
    O: Record,
    Op: OneInputStreamOperator<I, O> + 'static,
    F: Fn(&OperatorSetup) -> Result<Op, BoxError> + Send,
{
    fn create(&self, setup: &OperatorSetup) -> Result<Box<dyn ChainedNode>, BoxError> {
        let operator = (self.f)(setup)?;
        Ok(Box::new(OneInputNode::<I, O, Op>::new(setup, operator)))
    }

    fn create_task(
        &self,
        mut receivers: Vec<(u8, AnyBox)>,
        chain: OperatorChain,
        cancel: CancelToken,
        buffer_timeout: Duration,
        channel_state: ChannelStateSetup,
    ) -> Result<Box<dyn Invokable>, String> {
        let input = receivers_of::<I>(&mut receivers, 1)?;
        if !receivers.is_empty() {
            return Err("a one-input operator got channels of a second input".into());
        }
        let gate =
            InputGate::new(input, cancel).with_channel_state(0, channel_state.broadcast_inputs[0]);
        Ok(Box::new(StreamTask::new(
            OneInput::new(gate),
            chain,
            buffer_timeout,
            channel_state.head,
        )))
    }
}

/// An [`OperatorFactory`] of a two-input operator from a closure.
pub struct TwoInputOperatorFactory<I1, I2, O, Op, F> {
    f: F,
    _types: PhantomData<fn(I1, I2, Op) -> O>,
}

impl<I1, I2, O, Op, F> TwoInputOperatorFactory<I1, I2, O, Op, F>
where
    I1: Record,
    I2: Record,
    O: Record,
    Op: TwoInputStreamOperator<I1, I2, O> + 'static,
    F: Fn(&OperatorSetup) -> Result<Op, BoxError> + Send,
{
    /// Wraps `f`.
    pub fn new(f: F) -> Self {
        Self {
            f,
            _types: PhantomData,
        }
    }
}

impl<I1, I2, O, Op, F> OperatorFactory for TwoInputOperatorFactory<I1, I2, O, Op, F>
where
    I1: Record,
    I2: Record,
    O: Record,
    Op: TwoInputStreamOperator<I1, I2, O> + 'static,
    F: Fn(&OperatorSetup) -> Result<Op, BoxError> + Send,
{
    fn create(&self, setup: &OperatorSetup) -> Result<Box<dyn ChainedNode>, BoxError> {
        let operator = (self.f)(setup)?;
        Ok(Box::new(TwoInputNode::<I1, I2, O, Op>::new(
            setup, operator,
        )))
    }

    fn create_task(
        &self,
        mut receivers: Vec<(u8, AnyBox)>,
        chain: OperatorChain,
        cancel: CancelToken,
        buffer_timeout: Duration,
        channel_state: ChannelStateSetup,
    ) -> Result<Box<dyn Invokable>, String> {
        let first = receivers_of::<I1>(&mut receivers, 1)?;
        let second = receivers_of::<I2>(&mut receivers, 2)?;
        let [broadcast_first, broadcast_second] = channel_state.broadcast_inputs;
        Ok(Box::new(StreamTask::new(
            TwoInputs::new(
                InputGate::new(first, cancel.clone()).with_channel_state(0, broadcast_first),
                InputGate::new(second, cancel).with_channel_state(1, broadcast_second),
            ),
            chain,
            buffer_timeout,
            channel_state.head,
        )))
    }
}

/// The coordinator side of a source (its split enumerator), run on its own thread.
pub trait SourceCoordinatorRunner: Send {
    /// Serves reader requests and checkpoint triggers until every reader is gone or the job
    /// is cancelled.
    fn run(
        self: Box<Self>,
        control: Receiver<CoordinatorControl>,
        events: Sender<TaskEvent>,
    ) -> Result<(), crate::error::TaskError>;
}

/// Creates a source's coordinator and its per-subtask reader tasks.
pub trait SourceFactory: Send {
    /// Creates the coordinator (from restored enumerator state, if given) and one reader
    /// endpoint per subtask.
    fn create_coordinator(
        &self,
        node: NodeId,
        parallelism: u32,
        name: &str,
        cancel: CancelToken,
        restored: Option<&[u8]>,
    ) -> Result<(Box<dyn SourceCoordinatorRunner>, Vec<ReaderEndpoint>), BoxError>;
    /// Creates the source task of one subtask, emitting into `chain`.
    fn create_task(
        &self,
        setup: &OperatorSetup,
        chain: OperatorChain,
        endpoint: ReaderEndpoint,
    ) -> Result<Box<dyn Invokable>, BoxError>;
    /// Largest parallelism the source supports.
    fn max_parallelism(&self) -> Option<u32>;
}

/// How a node is instantiated.
pub enum NodeFactory {
    /// A source: a coordinator plus reader tasks.
    Source(Box<dyn SourceFactory>),
    /// An operator or sink inside a chain.
    Operator(Box<dyn OperatorFactory>),
}
