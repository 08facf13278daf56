//! Code shared by Weir's example jobs and their process-level tests.

pub mod census;
pub mod clicks;

/// The README's code (the engine's and the connectors'), compiled and run as doc tests so
/// that it cannot go stale; it lives here because this crate sees all of them.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
