//! Error types of the engine.
//!
//! Errors are typed by the layer that raises them: configuration, graph translation, state,
//! and task execution. [`WeirError`] is what the public API returns.

use std::fmt;

/// Error type that user functions and connectors return; the engine wraps it with the
/// operator and subtask it came from.
///
/// ```
/// use weir::prelude::*;
///
/// /// Parses numbers; a line that is not one fails the job, naming the operator.
/// #[derive(Clone)]
/// struct Parse;
///
/// impl ProcessFunction<String, u64> for Parse {
///     fn process_element(&mut self, line: String, _: &mut ProcessContext<'_>, out: &mut Collector<'_, u64>) -> Result<(), BoxError> {
///         out.collect(line.trim().parse::<u64>()?); // any error converts into a BoxError
///         Ok(())
///     }
/// }
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// env.from_collection(vec!["1".to_string(), "two".to_string()]).process(Parse).name("parse").print();
/// let error = env.execute("parse").unwrap_err();
/// assert!(error.to_string().contains("operator `parse` (subtask 1/1) failed: invalid digit"), "{error}");
/// # Ok::<(), WeirError>(())
/// ```
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An invalid configuration value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration `{option}` = {value}: {reason}")]
pub struct ConfigError {
    /// The option's name, as documented on [`crate::ExecutionConfig`].
    pub option: &'static str,
    /// The rejected value, rendered.
    pub value: String,
    /// Why it was rejected.
    pub reason: String,
}

/// A job graph that cannot be translated or run as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    /// The job has no operators.
    #[error("the job has no operators: add a source and a sink before executing it")]
    EmptyJob,
    /// A stream ends without a sink consuming it is fine, but a job without any source is not.
    #[error("the job has no source")]
    NoSource,
    /// Forward partitioning between operators of different parallelism.
    #[error(
        "forward partitioning does not allow a change of parallelism: upstream `{upstream}` has \
         parallelism {upstream_parallelism}, downstream `{downstream}` has {downstream_parallelism}; \
         use rebalance() or hash partitioning instead"
    )]
    ForwardParallelismMismatch {
        /// Upstream operator name.
        upstream: String,
        /// Upstream parallelism.
        upstream_parallelism: u32,
        /// Downstream operator name.
        downstream: String,
        /// Downstream parallelism.
        downstream_parallelism: u32,
    },
    /// An operator's parallelism is out of range.
    #[error("operator `{operator}`: parallelism {parallelism} is invalid: {reason}")]
    InvalidParallelism {
        /// Operator name.
        operator: String,
        /// Requested parallelism.
        parallelism: u32,
        /// Why it is invalid.
        reason: String,
    },
    /// Two operators share a uid.
    #[error("uid `{uid}` is used by both `{first}` and `{second}`; uids must be unique in a job")]
    DuplicateUid {
        /// The uid.
        uid: String,
        /// First operator carrying it.
        first: String,
        /// Second operator carrying it.
        second: String,
    },
    /// An operator works in event time, but no watermark strategy is upstream of it.
    #[error(
        "operator `{operator}` is {what} and works in event time, but no watermarks reach it: \
         give its source a WatermarkStrategy (`from_source(source, strategy, name)`), or call \
         `assign_timestamps_and_watermarks` before it"
    )]
    NoEventTime {
        /// The operator.
        operator: String,
        /// What it is.
        what: &'static str,
    },
    /// A window operator's assigner cannot make windows as configured.
    #[error("window operator `{operator}`: {reason}")]
    InvalidWindow {
        /// The window operator.
        operator: String,
        /// What is wrong.
        reason: String,
    },
    /// The API was used in a way that cannot form a valid graph.
    #[error("invalid use of the DataStream API: {0}")]
    InvalidApiUse(String),
    /// A source's settings cannot work (a rate limit that is not a positive number, …).
    #[error("source `{source_name}`: {reason}")]
    InvalidSource {
        /// The source's name.
        source_name: String,
        /// What is wrong.
        reason: String,
    },
    /// `execute` was called a second time on the same environment.
    #[error(
        "the job `{job}` was already executed from this environment: an environment runs one \
         job; declare the next job on a new StreamExecutionEnvironment"
    )]
    AlreadyExecuted {
        /// The name the job was executed under.
        job: String,
    },
}

/// Errors raised by keyed state and key-group assignment.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// A key or state value could not be serialized or deserialized.
    #[error("state serialization failed: {0}")]
    Codec(#[from] postcard::Error),
    /// A key could not be encoded to find its key group.
    #[error("cannot encode a key to find its key group: {0}")]
    KeyEncoding(String),
    /// Restored state bytes are damaged.
    #[error("restored state `{state}` is corrupt: {reason}")]
    Corrupt {
        /// The state's name (or the file).
        state: String,
        /// What is wrong.
        reason: String,
    },
    /// A key arrived at a subtask that does not own its key group.
    #[error(
        "key group {key_group} does not belong to this subtask (it owns {range}); \
         records were partitioned inconsistently"
    )]
    KeyGroupOutOfRange {
        /// The key's group.
        key_group: u32,
        /// The owned range, rendered.
        range: String,
    },
    /// A state file could not be written to or read from checkpoint storage.
    #[error("state file `{file}`: {reason}")]
    Storage {
        /// The file, relative to its checkpoint's location.
        file: String,
        /// What went wrong.
        reason: String,
    },
    /// A state backend's engine failed.
    #[error("state backend `{backend}` failed to {operation}: {reason}")]
    Backend {
        /// The backend (`state.backend.type`).
        backend: &'static str,
        /// What it was doing.
        operation: &'static str,
        /// The engine's error.
        reason: String,
    },
    /// `state.backend.type` names a backend this process does not have.
    #[error(
        "state.backend.type `{name}` is not a state backend of this job's binary (it has: \
         {known}); link the backend's crate and register it (for example \
         `weir_rocksdb::register()`) before building the job"
    )]
    UnknownBackend {
        /// The name configured.
        name: String,
        /// The backends registered.
        known: String,
    },
    /// Restored keyed state was written by another backend in its own format.
    #[error(
        "the restored keyed state was written by state backend `{written_by}` in its own \
         (incremental) format, but state.backend.type is `{configured}`; restore it with \
         `{written_by}`, or switch backends through a savepoint, which every backend restores"
    )]
    IncompatibleSnapshot {
        /// The backend that wrote it.
        written_by: String,
        /// The backend configured now.
        configured: String,
    },
    /// A state name was registered twice with different value types.
    #[error("state `{state}` is already registered with value type {existing}, not {requested}")]
    TypeMismatch {
        /// The state's name.
        state: String,
        /// The type it was registered with.
        existing: &'static str,
        /// The type now requested.
        requested: &'static str,
    },
}

/// Why a subtask stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// A user function panicked.
    #[error("user function panicked: {message}")]
    UserPanic {
        /// The panic payload, rendered.
        message: String,
    },
    /// A user function, source or sink returned an error.
    #[error("{0}")]
    User(BoxError),
    /// A source read a record it cannot decode, under the policy to fail.
    #[error(transparent)]
    MalformedRecord(#[from] crate::connectors::malformed::MalformedRecordError),
    /// The error happened while an operator processed the record read at `origin`: known in
    /// the attempt after a failure of user code, which traces every record's origin (see
    /// [`WeirError::record_origin`]).
    #[error("{cause}; the record was read at {origin}")]
    AtRecord {
        /// Where the record (or the source record it was computed from) was read.
        origin: crate::connectors::malformed::RecordOrigin,
        /// What went wrong.
        cause: Box<TaskError>,
    },
    /// The error happened in a named operator of the task's chain.
    #[error("in operator `{operator}`: {cause}")]
    Operator {
        /// The operator's name.
        operator: String,
        /// What went wrong there.
        cause: Box<TaskError>,
    },
    /// Keyed state failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// A record without an event timestamp reached an operator that works in event time.
    #[error(
        "a record has no event timestamp, but {what} works in event time: give the source a \
         WatermarkStrategy with a timestamp assigner (`from_source(source, strategy, name)`), \
         or call `assign_timestamps_and_watermarks` before it"
    )]
    MissingTimestamp {
        /// What needed it.
        what: &'static str,
    },
    /// The runtime broke one of its own invariants (a bug in Weir).
    #[error("internal error: {0}")]
    Internal(String),
    /// The job is being cancelled (another task failed or the job was stopped).
    #[error("task cancelled")]
    Cancelled,
    /// The data connection to another TaskManager, carrying some of the task's channels,
    /// failed or was cut.
    #[error("data connection to {peer} lost: {reason}")]
    ConnectionLost {
        /// The peer TaskManager and its address.
        peer: String,
        /// Why, as far as this side knows.
        reason: String,
    },
    /// A task in another process failed; this is what it reported.
    #[error("{message}")]
    Remote {
        /// The error, rendered where it happened.
        message: String,
        /// Whether it was only a consequence of another failure.
        secondary: bool,
    },
    /// The TaskManager running the task was lost: its process died, its connection broke, or
    /// it stopped answering heartbeats.
    #[error("TaskManager `{taskmanager}` was lost: {reason}")]
    TaskManagerLost {
        /// The TaskManager's id.
        taskmanager: String,
        /// How it was lost.
        reason: String,
    },
    /// A peer task went away without ending its stream: it failed or was cancelled.
    #[error("channel to {peer} closed unexpectedly")]
    ChannelClosed {
        /// Which side went away.
        peer: &'static str,
    },
}

impl TaskError {
    /// The malformed record this error is about, if it is one.
    pub fn malformed_record(&self) -> Option<&crate::connectors::malformed::MalformedRecord> {
        match self {
            TaskError::MalformedRecord(e) => Some(&e.record),
            TaskError::Operator { cause, .. } | TaskError::AtRecord { cause, .. } => {
                cause.malformed_record()
            }
            _ => None,
        }
    }

    /// Where the record this error happened on was read, when the attempt traced it.
    pub fn record_origin(&self) -> Option<&crate::connectors::malformed::RecordOrigin> {
        match self {
            TaskError::AtRecord { origin, .. } => Some(origin),
            TaskError::Operator { cause, .. } => cause.record_origin(),
            _ => None,
        }
    }

    /// Says that this error happened on the record read at `origin` (inside the operator
    /// that names it; once, the innermost origin wins). Consequences of other failures, and
    /// failures no user code can have caused, are left as they are.
    pub(crate) fn at_record(self, origin: &crate::connectors::malformed::RecordOrigin) -> Self {
        match self {
            TaskError::Operator { operator, cause } => TaskError::Operator {
                operator,
                cause: Box::new(cause.at_record(origin)),
            },
            error @ TaskError::AtRecord { .. } => error,
            // Only what a record can cause is pinned on it: a state-backend or internal
            // failure in a traced run is no poison record, and must not look like one.
            error if error.is_secondary() || !error.may_come_from_user_code() => error,
            error => TaskError::AtRecord {
                origin: origin.clone(),
                cause: Box::new(error),
            },
        }
    }

    /// Whether user code may have caused this error (a panic or an error of a function,
    /// source or sink, or a failure reported from another process): the next attempt then
    /// traces the origin of every record, so that a record failing again is named.
    pub fn may_come_from_user_code(&self) -> bool {
        match self {
            TaskError::UserPanic { .. } | TaskError::User(_) => true,
            // A key is a user type: its serialization failing is the record's doing.
            TaskError::State(StateError::KeyEncoding(_)) => true,
            TaskError::AtRecord { cause, .. } => cause.may_come_from_user_code(),
            TaskError::Remote { secondary, .. } => !*secondary,
            TaskError::Operator { cause, .. } => cause.may_come_from_user_code(),
            _ => false,
        }
    }

    /// True when this error is only a consequence of another failure (cancellation or a closed
    /// channel), not a root cause worth reporting.
    pub fn is_secondary(&self) -> bool {
        match self {
            TaskError::Cancelled | TaskError::ChannelClosed { .. } => true,
            TaskError::Remote { secondary, .. } => *secondary,
            TaskError::Operator { cause, .. } | TaskError::AtRecord { cause, .. } => {
                cause.is_secondary()
            }
            _ => false,
        }
    }
}

/// A task error located at an operator and subtask.
#[derive(Debug, thiserror::Error)]
#[error("operator `{operator}` (subtask {subtask_display}) failed: {cause}")]
pub struct OperatorFailure {
    /// The operator's name.
    pub operator: String,
    /// Zero-based subtask index.
    pub subtask: u32,
    /// `index+1/parallelism`, as Flink prints it.
    pub subtask_display: SubtaskDisplay,
    /// What went wrong.
    #[source]
    pub cause: TaskError,
}

/// Renders a subtask as Flink does: `2/4` for the second of four.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubtaskDisplay {
    /// Zero-based index.
    pub index: u32,
    /// Parallelism of the operator.
    pub parallelism: u32,
}

impl fmt::Display for SubtaskDisplay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index + 1, self.parallelism)
    }
}

/// Top-level error of the public API.
///
/// Its `Debug` form is its `Display` form, so that `fn main() -> Result<(), WeirError>`
/// prints a readable message (`operator `Map` (subtask 1/2) failed: …`).
///
/// ```
/// use weir::prelude::*;
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// env.generate(3, |i| i).map(|i| if i == 2 { panic!("boom") } else { i }).print();
/// let error = env.execute("fails").unwrap_err();
/// assert_eq!(format!("{error:?}"), error.to_string());
/// assert!(error.to_string().contains("(subtask 1/1) failed: "), "{error}");
/// # Ok::<(), WeirError>(())
/// ```
#[derive(thiserror::Error)]
pub enum WeirError {
    /// Invalid configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A configuration file, environment variable or `-D` argument is invalid.
    #[error(transparent)]
    Configuration(#[from] crate::configuration::ConfigurationError),
    /// The job graph is invalid.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// An operator, source or sink could not be instantiated.
    #[error(
        "cannot create operator `{operator}` ({}): {cause}",
        subtask.map_or_else(|| "its split enumerator".to_string(), |s| format!("subtask {s}"))
    )]
    Setup {
        /// The operator's name.
        operator: String,
        /// The subtask, or `None` for a source's split enumerator.
        subtask: Option<SubtaskDisplay>,
        /// Why.
        cause: BoxError,
    },
    /// The job failed while running.
    #[error("job `{job}` failed: {failure}")]
    JobFailed {
        /// The job's name.
        job: String,
        /// The root cause.
        #[source]
        failure: Box<OperatorFailure>,
    },
    /// A checkpoint or savepoint cannot be restored.
    #[error("cannot restore checkpoint {checkpoint_id}: {reason}")]
    Restore {
        /// The checkpoint.
        checkpoint_id: u64,
        /// Why.
        reason: String,
    },
    /// Checkpoint storage failed.
    #[error(transparent)]
    Storage(#[from] crate::checkpoint::storage::StorageError),
    /// Recovery refuses: restoring what it could would commit output a second time.
    #[error(transparent)]
    Recovery(#[from] crate::checkpoint::recovery::RecoveryError),
    /// This process lost its job to another one and stopped.
    #[error(transparent)]
    Fenced(#[from] crate::checkpoint::fencing::FencedError),
    /// The job was asked for something it cannot do now.
    #[error("{0}")]
    InvalidRequest(String),
    /// Cluster mode failed (a TaskManager or the JobManager could not be reached, a setting
    /// cannot work); the error names the setting or the peer.
    #[error(transparent)]
    Cluster(BoxError),
    /// A runtime thread could not be started.
    #[error("cannot start thread for {what}: {source}")]
    Spawn {
        /// What the thread was for.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The runtime itself broke an invariant (a bug in Weir).
    #[error("internal error: {0}")]
    Internal(String),
}

impl fmt::Debug for WeirError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl WeirError {
    /// The malformed record the job failed on, if it failed on one (the file and line, or
    /// the topic, partition and offset; the column; the raw record).
    pub fn malformed_record(&self) -> Option<&crate::connectors::malformed::MalformedRecord> {
        match self {
            WeirError::JobFailed { failure, .. } => failure.cause.malformed_record(),
            _ => None,
        }
    }

    /// Where the record the job failed on was read (file and line, or topic, partition and
    /// offset), when the failing attempt traced it: the attempts after a failure of user
    /// code do, so that a poison record which fails every restart is named when the restart
    /// strategy gives up. In cluster mode the TaskManager's failure report carries it.
    pub fn record_origin(&self) -> Option<&crate::connectors::malformed::RecordOrigin> {
        match self {
            WeirError::JobFailed { failure, .. } => failure.cause.record_origin(),
            _ => None,
        }
    }
}

/// Renders a panic payload as text.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connectors::malformed::RecordOrigin;

    #[test]
    fn only_failures_a_record_can_cause_are_pinned_on_it() {
        let origin = RecordOrigin::File {
            file: "orders.csv".into(),
            line: 7,
        };
        let user = TaskError::User("bad amount".into()).at_record(&origin);
        assert_eq!(user.record_origin(), Some(&origin));
        assert!(user.may_come_from_user_code());

        // A failure of the runtime in a traced run is not a poison record, and does not make
        // the next run trace again.
        let internal = TaskError::Internal("snapshot channel closed".into()).at_record(&origin);
        assert_eq!(internal.record_origin(), None);
        assert!(!internal.may_come_from_user_code());
        assert!(!TaskError::Cancelled
            .at_record(&origin)
            .may_come_from_user_code());
    }
}
