//! Checkpoints: configuration, restart strategies, the coordinator's decisions, barrier
//! alignment, statistics, metadata and storage.

pub mod barrier_handler;
pub mod config;
pub mod coordinator;
pub mod metadata;
pub mod restart_strategy;
pub mod restore;
pub mod stats;
pub mod storage;
