//! The DataStream API: how a program declares a job.

pub mod connected_streams;
pub mod data_stream;
mod dead_letters;
pub mod environment;
pub mod functions;
pub(crate) mod graph_builder;
pub mod join;
pub mod keyed_stream;
pub mod output_tag;
pub mod windowed_stream;
