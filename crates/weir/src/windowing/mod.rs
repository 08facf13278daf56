//! Windows (Flink's windowing API): assigners that put records into windows, triggers that
//! decide when a window fires, and the functions that turn a window into results. Used from
//! [`KeyedStream::window`](crate::KeyedStream::window) and
//! [`DataStream::window_all`](crate::DataStream::window_all).

pub mod assigners;
pub mod contents;
pub mod function;
pub mod trigger;
pub mod window;

pub use assigners::{
    EventTimeSessionWindows, GlobalWindows, SlidingEventTimeWindows, SlidingProcessingTimeWindows,
    TumblingEventTimeWindows, TumblingProcessingTimeWindows, WindowAssigner, WindowTime,
};
pub use function::{ProcessWindowFunction, WindowContext};
pub use trigger::{
    CountTrigger, EventTimeTrigger, NeverTrigger, ProcessingTimeTrigger, PurgingTrigger, Trigger,
    TriggerContext, TriggerResult,
};
pub use window::{GlobalWindow, TimeWindow, Window};
