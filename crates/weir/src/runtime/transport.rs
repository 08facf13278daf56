//! Where a channel's ends live. Deployment asks a [`Transport`] for every channel of the
//! ExecutionGraph; whether the channel is in-process or crosses the network is the
//! transport's decision, never the operators'. The local mini-cluster uses
//! [`LocalTransport`]; a TaskManager uses the
//! [`NetworkTransport`](crate::runtime::network::transport::NetworkTransport) of its run.

use crate::graph::execution_graph::{ExecutionChannel, SubtaskRef};
use crate::runtime::network::NetworkError;
use crate::runtime::stream_type::{AnyBox, StreamType};

/// The ends of one channel that belong in this process: the sender if its producer runs
/// here, the receiver if its consumer does.
#[derive(Default)]
pub struct ChannelEnds {
    /// A `ChannelSender<T>`, boxed.
    pub sender: Option<AnyBox>,
    /// A `ChannelReceiver<T>`, boxed.
    pub receiver: Option<AnyBox>,
}

/// Creates the channels of a run, and says which subtasks run in this process.
pub trait Transport {
    /// Whether `subtask` is deployed in this process.
    fn runs_here(&self, subtask: SubtaskRef) -> bool;

    /// The local ends of channel `index` of the ExecutionGraph, for records of type `ty`,
    /// whose receiver holds at most `capacity` elements.
    fn create_channel(
        &self,
        index: u32,
        channel: &ExecutionChannel,
        ty: &dyn StreamType,
        capacity: usize,
    ) -> Result<ChannelEnds, NetworkError>;
}

/// Everything in this process: every channel is an in-process bounded queue.
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalTransport;

impl Transport for LocalTransport {
    fn runs_here(&self, _subtask: SubtaskRef) -> bool {
        true
    }

    fn create_channel(
        &self,
        _index: u32,
        _channel: &ExecutionChannel,
        ty: &dyn StreamType,
        capacity: usize,
    ) -> Result<ChannelEnds, NetworkError> {
        let (sender, receiver) = ty.channel(capacity);
        Ok(ChannelEnds {
            sender: Some(sender),
            receiver: Some(receiver),
        })
    }
}
