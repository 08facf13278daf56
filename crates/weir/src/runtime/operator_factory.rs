//! Factories that create each node's runtime object once per subtask.

use std::marker::PhantomData;

use crossbeam_channel::{Receiver, Sender};

use crate::error::BoxError;
use crate::graph::ids::NodeId;
use crate::record::Record;
use crate::runtime::channel::CancelToken;
use crate::runtime::output::Output;
use crate::runtime::source_task::CoordinatorControl;
use crate::runtime::stream_type::{downcast, AnyBox};
use crate::runtime::task::{Invokable, OperatorSetup, TaskEvent};

/// Creates an operator: given its output (`Box<dyn Output<O>>`), returns its input side
/// (`Box<dyn Output<I>>`), through which its predecessor pushes records.
pub trait OperatorFactory: Send {
    /// Creates the operator of one subtask.
    fn create(&self, setup: &OperatorSetup, output: AnyBox) -> Result<AnyBox, BoxError>;
}

/// An [`OperatorFactory`] from a typed closure.
pub struct FnOperatorFactory<I, O, F> {
    f: F,
    _types: PhantomData<fn(I) -> O>,
}

impl<I, O, F> FnOperatorFactory<I, O, F>
where
    I: Record,
    O: Record,
    F: Fn(&OperatorSetup, Box<dyn Output<O>>) -> Result<Box<dyn Output<I>>, BoxError> + Send,
{
    /// Wraps `f`.
    pub fn new(f: F) -> Self {
        Self {
            f,
            _types: PhantomData,
        }
    }
}

impl<I, O, F> OperatorFactory for FnOperatorFactory<I, O, F>
where
    I: Record,
    O: Record,
    F: Fn(&OperatorSetup, Box<dyn Output<O>>) -> Result<Box<dyn Output<I>>, BoxError> + Send,
{
    fn create(&self, setup: &OperatorSetup, output: AnyBox) -> Result<AnyBox, BoxError> {
        let output = downcast::<Box<dyn Output<O>>>(output, "operator output")?;
        let input = (self.f)(setup, output)?;
        Ok(Box::new(input))
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
    /// Creates the source task of one subtask.
    fn create_task(
        &self,
        setup: &OperatorSetup,
        output: AnyBox,
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
