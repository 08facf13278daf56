//! Factories that create each node's runtime object once per subtask.

use std::marker::PhantomData;

use crossbeam_channel::{Receiver, Sender};

use crate::error::BoxError;
use crate::graph::ids::NodeId;
use crate::record::Record;
use crate::runtime::chain::{ChainedNode, OneInputNode, OperatorChain};
use crate::runtime::channel::CancelToken;
use crate::runtime::operators::OneInputStreamOperator;
use crate::runtime::source_task::CoordinatorControl;
use crate::runtime::stream_type::AnyBox;
use crate::runtime::task::{Invokable, OperatorSetup, TaskEvent};

/// Creates an operator's chain node, once per subtask.
pub trait OperatorFactory: Send {
    /// Creates the operator of one subtask.
    fn create(&self, setup: &OperatorSetup) -> Result<Box<dyn ChainedNode>, BoxError>;
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
    ) -> Result<(Box<dyn SourceCoordinatorRunner>, Vec<AnyBox>), BoxError>;
    /// Creates the source task of one subtask, emitting into `chain`.
    fn create_task(
        &self,
        setup: &OperatorSetup,
        chain: OperatorChain,
        endpoint: AnyBox,
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
