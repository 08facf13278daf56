//! The push interface between operators: an operator emits into an [`Output`], which is the
//! next chained operator, a record writer to other subtasks, or a fan-out of several.
//! Chained operators thus call each other directly, with no channel in between.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::error::{panic_message, BoxError, TaskError};
use crate::graph::ids::NodeId;
use crate::record::Record;
use crate::runtime::snapshot::{CheckpointNotification, OperatorSnapshot};
use crate::runtime::stream_element::StreamEvent;

/// Record counts of one operator subtask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct OperatorMetrics {
    /// The operator.
    pub node: NodeId,
    /// Zero-based subtask index.
    pub subtask: u32,
    /// Records the operator received.
    pub records_in: u64,
    /// Records the operator emitted.
    pub records_out: u64,
    /// Malformed records a source skipped.
    pub records_skipped: u64,
    /// Malformed records a source passed on as dead letters (also counted in `records_out`).
    pub records_dead_lettered: u64,
}

/// Where records of type `T` go; an operator is the `Output` of its predecessor, so these
/// methods also carry the chain's lifecycle, in chain order.
pub trait Output<T>: Send {
    /// Opens this operator and everything after it: called once on the task thread before
    /// the first record (user functions' `initialize_state` and `open` run here).
    fn open(&mut self) -> Result<(), TaskError>;
    /// Emits one record.
    fn collect(&mut self, record: T) -> Result<(), TaskError>;
    /// Passes an in-band event on: each operator reacts (end of input, snapshot at a barrier)
    /// and forwards it, so events follow the records that precede them.
    fn emit_event(&mut self, event: &StreamEvent) -> Result<(), TaskError>;
    /// Sends partly filled batches downstream.
    fn flush(&mut self) -> Result<(), TaskError>;
    /// The synchronous part of checkpoint `checkpoint_id`: appends this operator's frozen
    /// state, then recurses down the chain. Called after the barrier was passed on.
    fn snapshot_state(
        &mut self,
        checkpoint_id: u64,
        into: &mut Vec<OperatorSnapshot>,
    ) -> Result<(), TaskError>;
    /// Tells this operator and everything after it that a checkpoint completed or aborted.
    fn notify_checkpoint(&mut self, notification: CheckpointNotification) -> Result<(), TaskError>;
    /// Appends the record counts of this operator and of everything downstream in the chain.
    fn report_metrics(&self, into: &mut Vec<OperatorMetrics>);
}

/// Implements the lifecycle methods of an `Output` that ends a chain (no operator state,
/// nothing downstream in the task).
macro_rules! chain_end_lifecycle {
    () => {
        fn open(&mut self) -> Result<(), $crate::error::TaskError> {
            Ok(())
        }
        fn snapshot_state(
            &mut self,
            _checkpoint_id: u64,
            _into: &mut Vec<$crate::runtime::snapshot::OperatorSnapshot>,
        ) -> Result<(), $crate::error::TaskError> {
            Ok(())
        }
        fn notify_checkpoint(
            &mut self,
            _notification: $crate::runtime::snapshot::CheckpointNotification,
        ) -> Result<(), $crate::error::TaskError> {
            Ok(())
        }
        fn report_metrics(&self, _into: &mut Vec<$crate::runtime::output::OperatorMetrics>) {}
    };
}
pub(crate) use chain_end_lifecycle;

/// What user functions emit into. Errors from downstream are kept and raised by the operator
/// after the user function returns, so user code calls `collect` without handling them.
///
/// ```
/// use weir::prelude::*;
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// let pairs = env
///     .generate(3, |i| i)
///     .flat_map(|n: u64, out: &mut Collector<'_, (u64, u64)>| {
///         for k in 0..n {
///             out.collect((n, k)); // any number of records per input
///         }
///     })
///     .collect();
/// env.execute("pairs")?;
/// assert_eq!(pairs.take(), vec![(1, 0), (2, 0), (2, 1)]);
/// # Ok::<(), WeirError>(())
/// ```
pub struct Collector<'a, T> {
    output: &'a mut dyn Output<T>,
    emitted: u64,
    error: Option<TaskError>,
}

impl<'a, T> Collector<'a, T> {
    /// A collector emitting into `output` (the runtime makes these; tests of readers and
    /// functions can use a [`VecOutput`]).
    pub fn new(output: &'a mut dyn Output<T>) -> Self {
        Self {
            output,
            emitted: 0,
            error: None,
        }
    }

    /// Emits one record downstream.
    #[inline]
    pub fn collect(&mut self, record: T) {
        if self.error.is_none() {
            match self.output.collect(record) {
                Ok(()) => self.emitted += 1,
                Err(e) => self.error = Some(e),
            }
        }
    }

    /// Whether downstream has failed; a long-running function may stop early when it has.
    pub fn is_failed(&self) -> bool {
        self.error.is_some()
    }

    /// Number of records emitted, and the first downstream error.
    pub(crate) fn finish(self) -> (u64, Result<(), TaskError>) {
        (self.emitted, self.error.map_or(Ok(()), Err))
    }
}

/// Runs user code, turning a panic into an error that names the operator.
#[inline]
pub(crate) fn call_user<R>(operator: &Arc<str>, f: impl FnOnce() -> R) -> Result<R, TaskError> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        in_operator(
            operator,
            TaskError::UserPanic {
                message: panic_message(payload.as_ref()),
            },
        )
    })
}

/// Attributes a user error to an operator.
pub(crate) fn user_error(operator: &Arc<str>, error: BoxError) -> TaskError {
    // A malformed record stays typed, so that callers can read where it was.
    let cause = match error.downcast::<crate::connectors::malformed::MalformedRecordError>() {
        Ok(malformed) => TaskError::MalformedRecord(*malformed),
        Err(error) => TaskError::User(error),
    };
    in_operator(operator, cause)
}

/// Wraps `cause` with the operator it happened in.
pub(crate) fn in_operator(operator: &Arc<str>, cause: TaskError) -> TaskError {
    TaskError::Operator {
        operator: operator.to_string(),
        cause: Box::new(cause),
    }
}

/// Sends each record to several outputs (an operator with more than one consumer).
pub struct FanOut<T> {
    outputs: Vec<Box<dyn Output<T>>>,
}

impl<T> FanOut<T> {
    /// Fans out to `outputs` (at least two).
    pub fn new(outputs: Vec<Box<dyn Output<T>>>) -> Self {
        Self { outputs }
    }
}

impl<T: Record> Output<T> for FanOut<T> {
    fn open(&mut self) -> Result<(), TaskError> {
        self.outputs.iter_mut().try_for_each(|o| o.open())
    }
    fn snapshot_state(
        &mut self,
        checkpoint_id: u64,
        into: &mut Vec<OperatorSnapshot>,
    ) -> Result<(), TaskError> {
        self.outputs
            .iter_mut()
            .try_for_each(|o| o.snapshot_state(checkpoint_id, into))
    }
    fn notify_checkpoint(&mut self, notification: CheckpointNotification) -> Result<(), TaskError> {
        self.outputs
            .iter_mut()
            .try_for_each(|o| o.notify_checkpoint(notification))
    }
    fn collect(&mut self, record: T) -> Result<(), TaskError> {
        if let Some((last, rest)) = self.outputs.split_last_mut() {
            for out in rest {
                out.collect(record.clone())?;
            }
            last.collect(record)?;
        }
        Ok(())
    }
    fn emit_event(&mut self, event: &StreamEvent) -> Result<(), TaskError> {
        self.outputs
            .iter_mut()
            .try_for_each(|o| o.emit_event(event))
    }
    fn flush(&mut self) -> Result<(), TaskError> {
        self.outputs.iter_mut().try_for_each(|o| o.flush())
    }
    fn report_metrics(&self, into: &mut Vec<OperatorMetrics>) {
        self.outputs.iter().for_each(|o| o.report_metrics(into));
    }
}

/// Drops records: the output of sinks and of streams nobody consumes.
pub struct Discard;

impl<T: Send> Output<T> for Discard {
    #[inline]
    fn collect(&mut self, _record: T) -> Result<(), TaskError> {
        Ok(())
    }
    fn emit_event(&mut self, _event: &StreamEvent) -> Result<(), TaskError> {
        Ok(())
    }
    fn flush(&mut self) -> Result<(), TaskError> {
        Ok(())
    }
    chain_end_lifecycle!();
}

/// Runs a fallible user function that emits into `output` through a [`Collector`]: counts
/// what it emitted, raises a downstream failure first (it is the root cause), then the
/// function's own panic or error, attributed to `operator`.
pub(crate) fn call_with_collector<O>(
    operator: &Arc<str>,
    output: &mut dyn Output<O>,
    records_out: &mut u64,
    f: impl FnOnce(&mut Collector<'_, O>) -> Result<(), BoxError>,
) -> Result<(), TaskError> {
    let mut out = Collector::new(output);
    let result = call_user(operator, || f(&mut out));
    let (emitted, downstream) = out.finish();
    *records_out += emitted;
    downstream?;
    result?.map_err(|e| user_error(operator, e))
}

/// An output that keeps records in a vector: for testing readers and functions by hand.
#[derive(Debug, Default)]
pub struct VecOutput<T> {
    /// The records collected so far.
    pub records: Vec<T>,
    /// The events received so far.
    pub events: Vec<StreamEvent>,
}

impl<T: Send> Output<T> for VecOutput<T> {
    fn collect(&mut self, record: T) -> Result<(), TaskError> {
        self.records.push(record);
        Ok(())
    }
    fn emit_event(&mut self, event: &StreamEvent) -> Result<(), TaskError> {
        self.events.push(*event);
        Ok(())
    }
    fn flush(&mut self) -> Result<(), TaskError> {
        Ok(())
    }
    chain_end_lifecycle!();
}
