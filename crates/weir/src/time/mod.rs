//! Event time: timestamps, watermarks and how sources generate them.

pub mod generator;
pub mod strategy;
pub mod watermark;

pub use crate::api::functions::TimerService;
pub use crate::state::timers::TimeDomain;
pub use generator::{BoundedOutOfOrderness, WatermarkGenerator, WatermarkOutput};
pub use strategy::{TimestampAssigner, WatermarkStrategy};
pub use watermark::{Watermark, WatermarkStatus};
