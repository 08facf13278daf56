//! What operators and user functions emit into: an [`Output`] of records and watermarks, and
//! the [`Collector`] that user functions see. Inside a task the output is a
//! [`ChainOutput`](crate::runtime::chain::ChainOutput), which hands batches to the next
//! operators of the chain and to the record writers.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::connectors::origin::TracedOrigin;
use crate::error::{panic_message, BoxError, TaskError};
use crate::graph::ids::NodeId;
use crate::time::Watermark;

/// Record counts of one operator subtask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    /// The last watermark the operator received (a source: emitted), if any.
    pub watermark: Option<Watermark>,
    /// Watermarks a generator emitted below its earlier ones, which were ignored.
    pub backward_watermarks: u64,
    /// Records a window operator dropped as too late for every window.
    pub late_records_dropped: u64,
}

/// Where an operator writes: records, and watermarks in order with them. The lifecycle
/// (open, checkpoints, end of input) is driven by the task over the
/// [`OperatorChain`](crate::runtime::chain::OperatorChain), not passed along here.
pub trait Output<T>: Send {
    /// Emits one record, with the timestamp of the record being processed (if any).
    fn collect(&mut self, record: T) -> Result<(), TaskError>;
    /// Emits one record with event timestamp `timestamp` (milliseconds).
    fn collect_with_timestamp(&mut self, record: T, timestamp: i64) -> Result<(), TaskError>;
    /// Emits a watermark, after every record emitted before it.
    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), TaskError>;
    /// The records that follow come from source split `split`, which keeps its own
    /// watermark (source readers; elsewhere nothing).
    fn enter_split(&mut self, _split: &str) {}
    /// Source split `split` is finished: it no longer holds the watermark back.
    fn release_split(&mut self, _split: &str) -> Result<(), TaskError> {
        Ok(())
    }
    /// Whether the source writing here should say where each record was read (see
    /// [`Collector::collect_from`]): only in the attempt after a failure of user code.
    fn traces_origins(&self) -> bool {
        false
    }
    /// The records that follow were read at `origin`.
    fn set_origin(&mut self, _origin: Option<TracedOrigin>) {}
}

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
    error: Option<TaskError>,
    /// Whether the output wants each record's origin (asked once, not per record).
    traces_origins: bool,
}

impl<'a, T> Collector<'a, T> {
    /// A collector emitting into `output` (the runtime makes these; tests of readers and
    /// functions can use a [`VecOutput`]).
    pub fn new(output: &'a mut dyn Output<T>) -> Self {
        let traces_origins = output.traces_origins();
        Self {
            output,
            error: None,
            traces_origins,
        }
    }

    /// Emits one record that a source read at `origin` (a line of a file, an offset of a
    /// Kafka partition: [`OriginPlace::at`](crate::connectors::origin::OriginPlace::at), or
    /// any [`RecordOrigin`](crate::connectors::malformed::RecordOrigin) converted with
    /// `(&origin).into()`). `origin` is called only in an attempt that traces record origins
    /// (after a failure of user code, by default): a record that makes a function fail again
    /// is then named in the error, and the restart strategy gives up naming it. The records
    /// collected after this one, until the next `collect_from`, count as read there too.
    #[inline]
    pub fn collect_from(&mut self, record: T, origin: impl FnOnce() -> TracedOrigin) {
        if self.traces_origins {
            self.output.set_origin(Some(origin()));
        }
        self.collect(record);
    }

    /// [`collect_from`](Self::collect_from) with event timestamp `timestamp`.
    #[inline]
    pub fn collect_from_with_timestamp(
        &mut self,
        record: T,
        timestamp: i64,
        origin: impl FnOnce() -> TracedOrigin,
    ) {
        if self.traces_origins {
            self.output.set_origin(Some(origin()));
        }
        self.collect_with_timestamp(record, timestamp);
    }

    /// Emits one record downstream.
    #[inline]
    pub fn collect(&mut self, record: T) {
        if self.error.is_none() {
            if let Err(e) = self.output.collect(record) {
                self.error = Some(e);
            }
        }
    }

    /// Emits one record with event timestamp `timestamp` (milliseconds), for sources and
    /// functions that set event time themselves.
    #[inline]
    pub fn collect_with_timestamp(&mut self, record: T, timestamp: i64) {
        if self.error.is_none() {
            if let Err(e) = self.output.collect_with_timestamp(record, timestamp) {
                self.error = Some(e);
            }
        }
    }

    /// The records that follow come from split `split_id` (source readers): each split has
    /// its own watermark generator, and the source emits the minimum over its active splits,
    /// as Flink's `ReaderOutput::createOutputForSplit`. Readers that never name a split have
    /// one implicit split.
    pub fn for_split(&mut self, split_id: &str) {
        self.output.enter_split(split_id);
    }

    /// Split `split_id` is finished (Flink's `releaseOutputForSplit`): its watermark no
    /// longer holds the source's back.
    pub fn release_split(&mut self, split_id: &str) {
        if self.error.is_none() {
            if let Err(e) = self.output.release_split(split_id) {
                self.error = Some(e);
            }
        }
    }

    /// Whether downstream has failed; a long-running function may stop early when it has.
    pub fn is_failed(&self) -> bool {
        self.error.is_some()
    }

    /// The first downstream error.
    pub(crate) fn finish(self) -> Result<(), TaskError> {
        self.error.map_or(Ok(()), Err)
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

/// Runs a fallible user function that emits into `output` through a [`Collector`]: raises a
/// downstream failure first (it is the root cause), then the function's own panic or error,
/// attributed to `operator`.
pub(crate) fn call_with_collector<O>(
    operator: &Arc<str>,
    output: &mut dyn Output<O>,
    f: impl FnOnce(&mut Collector<'_, O>) -> Result<(), BoxError>,
) -> Result<(), TaskError> {
    let mut out = Collector::new(output);
    let result = call_user(operator, || f(&mut out));
    out.finish()?;
    result?.map_err(|e| user_error(operator, e))
}

/// An output that keeps records in a vector: for testing readers and functions by hand.
#[derive(Debug, Default)]
pub struct VecOutput<T> {
    /// The records collected so far.
    pub records: Vec<T>,
    /// The timestamps of the records collected with one, by index in `records`.
    pub timestamps: Vec<(usize, i64)>,
    /// The watermarks received so far.
    pub watermarks: Vec<Watermark>,
}

impl<T: Send> Output<T> for VecOutput<T> {
    fn collect(&mut self, record: T) -> Result<(), TaskError> {
        self.records.push(record);
        Ok(())
    }
    fn collect_with_timestamp(&mut self, record: T, timestamp: i64) -> Result<(), TaskError> {
        self.timestamps.push((self.records.len(), timestamp));
        self.records.push(record);
        Ok(())
    }
    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), TaskError> {
        self.watermarks.push(watermark);
        Ok(())
    }
}
