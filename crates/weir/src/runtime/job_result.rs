//! What `execute` returns: wall time and record counts per operator.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::graph::ids::NodeId;
use crate::runtime::output::OperatorMetrics;

/// Record counts of one operator, summed over its subtasks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OperatorSummary {
    /// The operator.
    pub node: NodeId,
    /// Its name.
    pub name: String,
    /// Its parallelism.
    pub parallelism: u32,
    /// Records received.
    pub records_in: u64,
    /// Records emitted.
    pub records_out: u64,
}

/// The outcome of a job that ran to its end.
#[derive(Debug, Clone, Serialize)]
pub struct JobExecutionResult {
    /// The job's name.
    pub job_name: String,
    /// From deployment to the last task's end.
    pub wall_time: Duration,
    /// Per operator, in graph order.
    pub operators: Vec<OperatorSummary>,
    /// Per operator subtask.
    pub subtasks: Vec<OperatorMetrics>,
}

impl JobExecutionResult {
    /// The summary of the operator named `name`.
    pub fn operator(&self, name: &str) -> Option<&OperatorSummary> {
        self.operators.iter().find(|o| o.name == name)
    }

    /// Records emitted by every source together.
    pub fn records_per_second(&self, records: u64) -> f64 {
        records as f64 / self.wall_time.as_secs_f64().max(1e-9)
    }
}

impl fmt::Display for JobExecutionResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Job `{}` finished in {:.3} s",
            self.job_name,
            self.wall_time.as_secs_f64()
        )?;
        writeln!(
            f,
            "  {:<5} {:<32} {:>4} {:>14} {:>14}",
            "id", "operator", "par", "records in", "records out"
        )?;
        for o in &self.operators {
            writeln!(
                f,
                "  {:<5} {:<32} {:>4} {:>14} {:>14}",
                o.node.to_string(),
                o.name,
                o.parallelism,
                o.records_in,
                o.records_out
            )?;
        }
        Ok(())
    }
}
