//! Checkpoints: configuration, restart strategies, the coordinator's decisions, barrier
//! alignment, metadata and storage.

pub mod config;
pub mod metadata;
pub mod restart_strategy;
pub mod storage;
