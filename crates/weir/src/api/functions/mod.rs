//! User function interfaces beyond plain closures, and the contexts they receive.

mod aggregate_function;
mod co_process_function;
mod keyed_context;
mod keyed_process_function;
mod process_function;
mod runtime_context;

pub use aggregate_function::AggregateFunction;
pub use co_process_function::{CoProcessFunction, KeyedCoProcessFunction};
pub use keyed_context::{KeyedContext, KeyedEndContext, TimerService};
pub use keyed_process_function::KeyedProcessFunction;
pub use process_function::{ProcessContext, ProcessFunction};
pub use runtime_context::{FunctionStateContext, RuntimeContext};
