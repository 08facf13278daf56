//! Type erasure at the graph boundary. The graph layers are untyped data; each node keeps a
//! [`StreamType`] of its output records, which can create the typed channels, record writers
//! and side outputs that the runtime wires between nodes. Everything typed is built
//! once at deployment, never per record.

use std::any::Any;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::checkpoint::metadata::ListStateEntry;
use crate::error::TaskError;
use crate::graph::partitioner::PartitionerKind;
use crate::record::Record;
use crate::runtime::chain::{ChainedNode, SideOutputSlot};
use crate::runtime::channel::{channel, CancelToken, ChannelSender};
use crate::runtime::channel_state::restore_batches;
use crate::runtime::key_selector::KeyGroupOf;
use crate::runtime::network::connection::{remote_receiver, ChannelInbox};
use crate::runtime::network::credit::{CreditReturn, RemoteSender};
use crate::runtime::record_writer::{ChannelSelector, RecordWriter};
use crate::state::key_group::KeyGroupAssigner;

/// A typed runtime object behind `dyn Any`.
pub type AnyBox = Box<dyn Any + Send>;
/// A typed, shared, immutable graph attachment (a hash edge's key selector).
pub type SharedAny = Arc<dyn Any + Send + Sync>;

/// How a record writer should partition.
pub struct WriterSpec<'a> {
    /// The edge's partitioner.
    pub partitioner: PartitionerKind,
    /// For hash edges: `Arc<dyn KeyGroupOf<T>>` behind `Any`.
    pub key_selector: Option<&'a SharedAny>,
    /// Key groups of the consumer.
    pub max_parallelism: u32,
    /// The consumer's name (what a failing key selector is named after).
    pub consumer: &'a str,
    /// Index of the producing subtask (where round-robin starts).
    pub producer_subtask: u32,
    /// Records per batch.
    pub batch_size: usize,
    /// The job's cancellation signal.
    pub cancel: CancelToken,
    /// The producing task's metrics.
    pub metrics: Option<Arc<crate::metrics::TaskMetrics>>,
    /// What ends the writer's waits for room (unaligned checkpoints).
    pub wakeup: Option<Arc<dyn crate::runtime::channel::Wakeup>>,
}

/// Typed factory methods for the records a node emits.
pub trait StreamType: Send + Sync {
    /// The Rust type name, for plans and errors.
    fn type_name(&self) -> &'static str;
    /// A bounded channel: (`ChannelSender<T>`, `ChannelReceiver<T>`).
    fn channel(&self, capacity: usize) -> (AnyBox, AnyBox);
    /// The in-flight records of input `input` (0 or 1) in restored channel state `entries`,
    /// as boxed `RecordBatch<T>`s.
    fn in_flight_batches(
        &self,
        entries: &[ListStateEntry],
        input: u8,
    ) -> Result<Vec<AnyBox>, TaskError>;
    /// A record writer to `senders`, the chain node that sends records to other tasks.
    fn record_writer(
        &self,
        senders: Vec<AnyBox>,
        spec: WriterSpec<'_>,
    ) -> Result<Box<dyn ChainedNode>, String>;
    /// A side output of records of this type, named `tag`, consumed by the nodes at
    /// `successors`.
    fn side_output_slot(&self, tag: Arc<str>, successors: Vec<usize>) -> SideOutputSlot;
    /// The `TypeId` of the records.
    fn record_type_id(&self) -> std::any::TypeId;
    /// The sending end (`ChannelSender<T>`) of a channel to another process.
    fn remote_sender(&self, sender: RemoteSender) -> AnyBox;
    /// The receiving end (`ChannelReceiver<T>`) of a channel from another process, with room
    /// for `capacity` elements, and the inbox its connection decodes into.
    fn remote_receiver(
        &self,
        capacity: usize,
        credit: CreditReturn,
    ) -> (AnyBox, Box<dyn ChannelInbox>);
}

/// The [`StreamType`] of records of type `T`.
pub struct TypeOf<T>(PhantomData<fn() -> T>);

impl<T> TypeOf<T> {
    /// The stream type of `T`, shareable between graph nodes.
    pub fn shared() -> Arc<dyn StreamType>
    where
        T: Record,
    {
        Arc::new(TypeOf::<T>(PhantomData))
    }
}

/// Unboxes a runtime object, or says which one had the wrong type (a wiring bug).
pub fn downcast<X: 'static>(boxed: AnyBox, what: &str) -> Result<X, String> {
    boxed
        .downcast::<X>()
        .map(|b| *b)
        .map_err(|_| format!("{what} is not a {}", std::any::type_name::<X>()))
}

impl<T: Record> StreamType for TypeOf<T> {
    fn type_name(&self) -> &'static str {
        std::any::type_name::<T>()
    }

    fn channel(&self, capacity: usize) -> (AnyBox, AnyBox) {
        let (tx, rx) = channel::<T>(capacity);
        (Box::new(tx), Box::new(rx))
    }

    fn in_flight_batches(
        &self,
        entries: &[ListStateEntry],
        input: u8,
    ) -> Result<Vec<AnyBox>, TaskError> {
        Ok(restore_batches::<T>(entries, input)?
            .into_iter()
            .map(|b| Box::new(b) as AnyBox)
            .collect())
    }

    fn record_writer(
        &self,
        senders: Vec<AnyBox>,
        spec: WriterSpec<'_>,
    ) -> Result<Box<dyn ChainedNode>, String> {
        let senders = senders
            .into_iter()
            .map(|s| downcast::<ChannelSender<T>>(s, "channel sender"))
            .collect::<Result<Vec<_>, _>>()?;
        if senders.is_empty() {
            return Err("record writer without channels".into());
        }
        let selector = match spec.partitioner {
            PartitionerKind::Forward => ChannelSelector::Forward,
            PartitionerKind::Rebalance => ChannelSelector::RoundRobin {
                next: spec.producer_subtask as usize % senders.len(),
            },
            PartitionerKind::Broadcast => ChannelSelector::Broadcast,
            PartitionerKind::Hash => {
                let key_group_of = spec
                    .key_selector
                    .and_then(|k| k.downcast_ref::<Arc<dyn KeyGroupOf<T>>>())
                    .ok_or("hash edge without a key selector of its record type")?
                    .clone();
                ChannelSelector::Hash {
                    key_group_of,
                    assigner: KeyGroupAssigner::new(spec.max_parallelism),
                    name: Arc::from(format!("key selector of `{}`", spec.consumer)),
                }
            }
        };
        Ok(Box::new(
            RecordWriter::new(senders, selector, spec.batch_size, spec.cancel)
                .with_metrics(spec.metrics)
                .with_wakeup(spec.wakeup),
        ))
    }

    fn side_output_slot(&self, tag: Arc<str>, successors: Vec<usize>) -> SideOutputSlot {
        SideOutputSlot::new::<T>(tag, successors)
    }

    fn record_type_id(&self) -> std::any::TypeId {
        std::any::TypeId::of::<T>()
    }

    fn remote_sender(&self, sender: RemoteSender) -> AnyBox {
        Box::new(ChannelSender::<T>::remote(sender))
    }

    fn remote_receiver(
        &self,
        capacity: usize,
        credit: CreditReturn,
    ) -> (AnyBox, Box<dyn ChannelInbox>) {
        let (receiver, inbox) = remote_receiver::<T>(capacity, credit);
        (Box::new(receiver), inbox)
    }
}
