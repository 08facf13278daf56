//! State: key groups, the heap keyed state backend and its snapshots, keyed state handles
//! (value, list, map, reducing, aggregating) and operator list state.

pub mod backend;
pub mod backend_factory;
pub mod canonical_snapshot;
#[cfg(any(test, feature = "testing"))]
pub mod conformance;
pub mod heap_keyed_state_backend;
pub mod key_bytes;
pub mod key_group;
pub mod keyed_state_snapshot;
pub mod keyed_state_store;
pub mod keyed_state_table;
#[cfg(test)]
mod memory_backend;
pub mod operator_state;
pub mod serialized_keyed_state;
pub mod state_handles;
#[cfg(test)]
mod store_tests;
pub mod timers;
pub mod ttl;

pub use backend::{KeyedStateBackend, StateDescriptor, StateId, StateKind};
pub use heap_keyed_state_backend::HeapKeyedStateBackend;
pub use key_group::{KeyGroupAssigner, KeyGroupRange};
pub use keyed_state_store::KeyedStateStore;
pub use operator_state::OperatorStateBackend;
pub use state_handles::{
    AggregatingState, KeyedState, ListState, MapState, ReducingState, ValueState,
};
