//! Event time: timestamps and watermarks.

pub mod watermark;

pub use watermark::{Watermark, WatermarkStatus};
