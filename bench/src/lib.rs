//! The Weir-vs-Flink benchmark suite: generators of the inputs both engines read (a
//! `key,value` CSV and Nexmark events), the workloads as Weir pipelines and as hand-written
//! single-pass programs (the floor), the runner of the same workloads in Apache Flink, and
//! the report that puts them side by side. `weir-vs-flink` runs it; `bench/README.md` says
//! how.

pub mod compare;
pub mod error;
pub mod flink;
pub mod floor;
pub mod inputs;
pub mod kv_input;
pub mod nexmark;
pub mod process_usage;
pub mod report;
pub mod weir_jobs;
pub mod workload;

pub use error::BenchError;
pub use report::{Engine, RunFigures};
pub use workload::{InputKind, Workload};
