//! What a finished job reports: status, wall time, record counts per operator, restarts and
//! checkpoint statistics.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::checkpoint::savepoint::Savepoint;
use crate::checkpoint::stats::CheckpointHistory;
use crate::graph::ids::NodeId;
use crate::runtime::output::OperatorMetrics;
use crate::time::Watermark;

/// How a job ended without failing.
///
/// ```
/// use weir::prelude::*;
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// env.from_source(GeneratorSource::unbounded(|i| i).with_rate_limit(1000.0), WatermarkStrategy::no_watermarks(), "ticks")
///     .sink_to(DiscardingSink, "discard");
/// let client = env.execute_async("ticks")?;
/// assert_eq!(client.cancel()?.status, JobStatus::Cancelled);
/// # Ok::<(), WeirError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Every source ended and every record was processed.
    Finished,
    /// Stopped after a savepoint.
    Stopped,
    /// Cancelled.
    Cancelled,
}

/// Record counts of one operator, summed over its subtasks (of the last run, after any
/// restart).
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
    /// Malformed records skipped (sources).
    pub records_skipped: u64,
    /// Malformed records passed on as dead letters (sources; also in `records_out`).
    pub records_dead_lettered: u64,
    /// The operator's event time at the end: the lowest watermark over its subtasks (`None`
    /// while a subtask has received none).
    pub watermark: Option<Watermark>,
    /// Watermarks that went backwards and were ignored, over all subtasks.
    pub backward_watermarks: u64,
    /// Records dropped as too late for every window, over all subtasks.
    pub late_records_dropped: u64,
}

/// The outcome of a job that ended without failing.
///
/// ```
/// use weir::prelude::*;
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))?;
/// env.generate(1000, |i| i).filter(|i| i % 2 == 0).name("evens").sink_to(DiscardingSink, "out");
/// let result: JobExecutionResult = env.execute("evens")?;
/// assert_eq!(result.status, JobStatus::Finished);
/// let evens = result.operator("evens").expect("an operator of that name");
/// assert_eq!((evens.records_in, evens.records_out), (1000, 500));
/// println!("{result}"); // the status, the wall time and a table of operators
/// # Ok::<(), WeirError>(())
/// ```
#[derive(Debug, Clone, Serialize)]
pub struct JobExecutionResult {
    /// The job's name.
    pub job_name: String,
    /// How it ended.
    pub status: JobStatus,
    /// From submission to the end.
    pub wall_time: Duration,
    /// Per operator, in graph order.
    pub operators: Vec<OperatorSummary>,
    /// Per operator subtask.
    pub subtasks: Vec<OperatorMetrics>,
    /// Restarts after failures.
    pub restarts: u32,
    /// Checkpoints (or the savepoint) each run started from, in order.
    pub restored_from: Vec<u64>,
    /// Recent checkpoints.
    pub checkpoints: CheckpointHistory,
    /// The savepoint taken by stop-with-savepoint.
    pub savepoint: Option<Savepoint>,
}

impl JobExecutionResult {
    /// The summary of the operator named `name`.
    pub fn operator(&self, name: &str) -> Option<&OperatorSummary> {
        self.operators.iter().find(|o| o.name == name)
    }

    /// `records` over the wall time.
    pub fn records_per_second(&self, records: u64) -> f64 {
        records as f64 / self.wall_time.as_secs_f64().max(1e-9)
    }
}

impl fmt::Display for JobExecutionResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Job `{}` {:?} in {:.3} s ({} restarts)",
            self.job_name,
            self.status,
            self.wall_time.as_secs_f64(),
            self.restarts
        )?;
        writeln!(
            f,
            "  {:<5} {:<32} {:>4} {:>14} {:>14} {:>20}",
            "id", "operator", "par", "records in", "records out", "watermark"
        )?;
        for o in &self.operators {
            writeln!(
                f,
                "  {:<5} {:<32} {:>4} {:>14} {:>14} {:>20}",
                o.node.to_string(),
                o.name,
                o.parallelism,
                o.records_in,
                o.records_out,
                o.watermark
                    .map_or_else(|| "-".to_string(), |w| w.to_string())
            )?;
        }
        for o in &self.operators {
            if o.records_skipped + o.records_dead_lettered > 0 {
                writeln!(
                    f,
                    "  {}: {} malformed records skipped, {} sent to dead letters",
                    o.name, o.records_skipped, o.records_dead_lettered
                )?;
            }
        }
        if self.checkpoints.completed + self.checkpoints.failed > 0 {
            write!(f, "{}", self.checkpoints)?;
        }
        Ok(())
    }
}
