//! The runtime: channels, record writers, input gates, operators, tasks, and the local
//! mini-cluster that runs them.

pub mod batch;
pub mod chain;
pub mod channel;
pub mod channel_state;
pub mod deployment;
pub mod input_gate;
pub mod job_definition;
pub mod job_master;
pub mod job_result;
pub mod key_selector;
pub mod mini_cluster;
pub mod network;
pub mod operator_factory;
pub mod operators;
pub mod output;
pub mod record_writer;
pub mod snapshot;
pub mod source_task;
pub mod source_watermarks;
pub mod stream_element;
pub mod stream_task;
pub mod stream_type;
pub mod task;
pub mod task_executors;
pub mod task_inputs;
pub mod transport;
pub mod watermark_valve;
