//! Checkpoints: configuration, restart strategies, the coordinator's decisions, barrier
//! alignment, statistics, metadata and storage, and what recovery may restore: the job record,
//! the job's lock and epoch (fencing), and the recovery rules.

pub mod barrier_handler;
pub mod checksummed;
pub mod completed_store;
pub mod config;
pub mod coordinator;
pub mod fencing;
pub mod inspect;
pub mod job_lock;
pub mod job_record;
pub mod job_record_versions;
pub mod metadata;
pub mod recovery;
pub mod reset;
pub mod restart_strategy;
pub mod restore;
pub mod savepoint;
pub mod shared_state_registry;
pub mod stats;
pub mod storage;
