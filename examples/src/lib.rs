//! Code shared by Weir's example jobs and their process-level tests.

pub mod census;
