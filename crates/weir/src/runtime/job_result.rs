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

/// Where a job started from, as its result reports it: what a user resuming, restoring or
/// re-running a job needs to see without a logging setup.
///
/// ```
/// use weir::prelude::*;
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// env.generate(3, |i| i).sink_to(DiscardingSink, "out");
/// let result = env.execute("numbers")?;
/// assert_eq!(result.start, Some(JobStart::Fresh));
/// assert_eq!(JobStart::Fresh.to_string(), "Started from empty state");
/// # Ok::<(), WeirError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "from")]
pub enum JobStart {
    /// From empty state: no restore point was asked for, or the job had none.
    Fresh,
    /// From the newest restore point of the job's earlier runs (a retained checkpoint, or
    /// the savepoint it was stopped with): `resume`.
    Resumed {
        /// The checkpoint or savepoint id.
        checkpoint_id: u64,
        /// Where it is.
        location: String,
    },
    /// From the savepoint or retained checkpoint at a path (`execution.savepoint.path`).
    Restored {
        /// The checkpoint or savepoint id.
        checkpoint_id: u64,
        /// Where it is.
        location: String,
    },
    /// Not at all: the job had already run to the end of its input, so nothing ran (its
    /// input is not read again; `weir reset` starts the job over).
    AlreadyFinished {
        /// Its final checkpoint, if it took one.
        final_checkpoint: Option<u64>,
        /// The checkpoint storage that says so.
        storage: String,
    },
}

impl fmt::Display for JobStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fresh => write!(f, "Started from empty state"),
            Self::Resumed {
                checkpoint_id,
                location,
            } => write!(
                f,
                "Resumed from restore point {checkpoint_id} of an earlier run (`{location}`)"
            ),
            Self::Restored {
                checkpoint_id,
                location,
            } => write!(f, "Restored from `{location}` (id {checkpoint_id})"),
            Self::AlreadyFinished {
                final_checkpoint,
                storage,
            } => {
                write!(f, "Nothing to do: `{storage}` records that the job already ran to the end of its input")?;
                if let Some(id) = final_checkpoint {
                    write!(f, " (final checkpoint {id})")?;
                }
                write!(
                    f,
                    "; its input is not read again (`weir reset` starts the job over)"
                )
            }
        }
    }
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
    /// Where the first run started from (`None` in a TaskManager's result: the JobManager
    /// decides it).
    pub start: Option<JobStart>,
    /// What recovery did that a user should know: restore points it found unusable and
    /// skipped, and what falling back past them means for the output. Empty when nothing was
    /// skipped.
    pub recovery_notes: Vec<String>,
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
        if let Some(start) = &self.start {
            writeln!(f, "  {start}.")?;
        }
        if self.restarts > 0 {
            let ids: Vec<String> = self.restored_from.iter().map(u64::to_string).collect();
            if !ids.is_empty() {
                writeln!(f, "  Runs restored restore points {}.", ids.join(", "))?;
            }
        }
        for note in &self.recovery_notes {
            writeln!(f, "  Recovery: {note}")?;
        }
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
