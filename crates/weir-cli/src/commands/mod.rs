//! One module per group of commands.

pub mod config;
pub mod inspect;
pub mod jobs;
pub mod reset;
pub mod run;
pub mod savepoints;
