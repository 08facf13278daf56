//! Keyed state: key groups and the heap state backend.

pub mod heap_keyed_state_backend;
pub mod key_group;
pub mod value_state;

pub use heap_keyed_state_backend::HeapKeyedStateBackend;
pub use key_group::{KeyGroupAssigner, KeyGroupRange};
pub use value_state::ValueState;
