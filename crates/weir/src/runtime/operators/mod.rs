//! Stream operators, one per file. Each is the [`Output`](crate::runtime::output::Output) of
//! its predecessor: records are pushed in by `collect`, results pushed on to its own output.

pub mod filter;
pub mod flat_map;
pub mod keyed_process;
pub mod map;
pub mod process;
pub mod rolling_aggregate;
pub mod sink_writer;

use std::sync::Arc;

use crate::api::functions::RuntimeContext;
use crate::graph::ids::NodeId;
use crate::runtime::output::OperatorMetrics;
use crate::runtime::task::OperatorSetup;

/// Identity and record counts shared by every operator.
#[derive(Debug, Clone)]
pub struct OperatorCore {
    /// The operator.
    pub node: NodeId,
    /// Its name, for errors.
    pub name: Arc<str>,
    /// Zero-based subtask index.
    pub subtask: u32,
    /// Records received.
    pub records_in: u64,
    /// Records emitted.
    pub records_out: u64,
    /// What user functions see of the subtask.
    pub runtime: RuntimeContext,
}

impl OperatorCore {
    /// The core of the operator set up by `setup`.
    pub fn new(setup: &OperatorSetup) -> Self {
        Self {
            node: setup.node,
            name: setup.name.clone(),
            subtask: setup.subtask,
            records_in: 0,
            records_out: 0,
            runtime: RuntimeContext::of(setup),
        }
    }

    /// The counts as metrics.
    pub fn metrics(&self) -> OperatorMetrics {
        OperatorMetrics {
            node: self.node,
            subtask: self.subtask,
            records_in: self.records_in,
            records_out: self.records_out,
        }
    }
}

/// Implements the event, flush and metrics methods of `Output` for an operator with fields
/// `core: OperatorCore` and `output: Box<dyn Output<_>>` that only passes events on.
macro_rules! pass_events_through {
    () => {
        fn emit_event(
            &mut self,
            event: &$crate::runtime::stream_element::StreamEvent,
        ) -> Result<(), $crate::error::TaskError> {
            self.output.emit_event(event)
        }
        fn flush(&mut self) -> Result<(), $crate::error::TaskError> {
            self.output.flush()
        }
        fn report_metrics(&self, into: &mut Vec<$crate::runtime::output::OperatorMetrics>) {
            into.push(self.core.metrics());
            self.output.report_metrics(into);
        }
    };
}
pub(crate) use pass_events_through;
