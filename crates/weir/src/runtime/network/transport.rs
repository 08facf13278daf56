//! The transport of one run on a TaskManager: channels between two local subtasks stay
//! in-process, channels to or from a subtask elsewhere go over the connection to its
//! TaskManager.

use std::collections::HashMap;

use super::environment::RunConnections;
use super::NetworkError;
use crate::graph::execution_graph::{ExecutionChannel, SubtaskRef};
use crate::runtime::stream_type::StreamType;
use crate::runtime::transport::{ChannelEnds, LocalTransport, Transport};

/// Which TaskManager (by id) runs each subtask of a run.
pub type Placement = HashMap<SubtaskRef, String>;

/// The [`Transport`] of TaskManager `me` in one run.
pub struct NetworkTransport<'a> {
    me: &'a str,
    placement: &'a Placement,
    connections: &'a RunConnections,
}

impl<'a> NetworkTransport<'a> {
    /// The transport of TaskManager `me`, whose peers are reached through `connections`.
    pub fn new(me: &'a str, placement: &'a Placement, connections: &'a RunConnections) -> Self {
        Self {
            me,
            placement,
            connections,
        }
    }

    fn host(&self, subtask: SubtaskRef) -> Result<&'a str, NetworkError> {
        self.placement
            .get(&subtask)
            .map(String::as_str)
            .ok_or_else(|| NetworkError::NoConnection(format!("the TaskManager of {subtask:?}")))
    }
}

impl Transport for NetworkTransport<'_> {
    fn runs_here(&self, subtask: SubtaskRef) -> bool {
        self.placement.get(&subtask).is_some_and(|tm| tm == self.me)
    }

    fn create_channel(
        &self,
        index: u32,
        channel: &ExecutionChannel,
        ty: &dyn StreamType,
        capacity: usize,
    ) -> Result<ChannelEnds, NetworkError> {
        let producer = self.host(channel.producer)?;
        let consumer = self.host(channel.consumer)?;
        let (here_producer, here_consumer) = (producer == self.me, consumer == self.me);
        Ok(match (here_producer, here_consumer) {
            (true, true) => LocalTransport.create_channel(index, channel, ty, capacity)?,
            (true, false) => {
                let remote = self
                    .connections
                    .get(consumer)?
                    .register_sender(index, capacity)?;
                ChannelEnds {
                    sender: Some(ty.remote_sender(remote)),
                    receiver: None,
                }
            }
            (false, true) => {
                let connection = self.connections.get(producer)?;
                let (receiver, inbox) =
                    ty.remote_receiver(capacity, connection.credit_return(index)?);
                connection.register_inbox(index, capacity, inbox)?;
                ChannelEnds {
                    sender: None,
                    receiver: Some(receiver),
                }
            }
            (false, false) => ChannelEnds::default(),
        })
    }
}
