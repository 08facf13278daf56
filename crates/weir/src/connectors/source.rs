//! The split-based source interface (Flink's FLIP-27 `Source`), which the generator,
//! collection, file and Kafka sources implement.
//!
//! A source's work is divided into **splits** (a file range, a Kafka partition, a number
//! range). A [`SplitEnumerator`] runs once per job, on the coordinator side: it owns the
//! splits and assigns them to readers. A [`SourceReader`] runs in each source subtask and reads
//! its assigned splits. Readers and enumerator talk only by messages. The reader's position is
//! the list of its splits with their progress ([`SourceReader::snapshot_state`]), which a
//! checkpoint stores and a restore hands back through [`SourceReader::add_splits`].

use std::fmt::Debug;

use crossbeam_channel::Sender;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::connectors::malformed::MalformedRecordCounters;
use crate::error::BoxError;
use crate::metrics::MetricGroup;
use crate::record::Record;
use crate::runtime::output::Collector;

/// Whether a source ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Boundedness {
    /// The source ends once all splits are read.
    Bounded,
    /// The source runs until the job is cancelled.
    ContinuousUnbounded,
}

/// A unit of source work, carrying its own progress so that it can be checkpointed and
/// reassigned.
pub trait SourceSplit: Serialize + DeserializeOwned + Clone + Debug + Send + 'static {
    /// A stable id, unique within the source.
    fn split_id(&self) -> String;
}

/// What a reader reports after a poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputStatus {
    /// More records can be read at once.
    MoreAvailable,
    /// Nothing to read now; the task waits briefly (or for new splits) and polls again.
    NothingAvailable,
    /// Every split is read and no more will come: the reader is done.
    EndOfInput,
}

/// A source: a factory of its enumerator and readers (Flink's `Source`). See
/// `tests/custom_source.rs` for a complete one.
///
/// ```
/// use weir::prelude::*;
///
/// /// Reads any source to the end and returns how many records it had.
/// fn count_records<S: Source>(source: S) -> Result<u64, WeirError> {
///     let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
///     env.from_source(source, WatermarkStrategy::no_watermarks(), "input").sink_to(DiscardingSink, "discard");
///     let result = env.execute("count")?;
///     Ok(result.operator("Source: input").map_or(0, |o| o.records_out))
/// }
///
/// assert_eq!(count_records(GeneratorSource::new(7, |i| i))?, 7);
/// assert_eq!(count_records(CollectionSource::new(vec!["a".to_string(), "b".to_string()]))?, 2);
/// # Ok::<(), WeirError>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a source",
    label = "not a `Source`",
    note = "`from_source` takes a `Source`: `FileSource`, `GeneratorSource`, `CollectionSource`, a Kafka source, or a type of yours implementing `Source` with its `SplitEnumerator` and `SourceReader`"
)]
pub trait Source: Send + 'static {
    /// Records it produces.
    type Output: Record;
    /// Its unit of work.
    type Split: SourceSplit;
    /// Its enumerator.
    type Enumerator: SplitEnumerator<Split = Self::Split>;
    /// Its reader.
    type Reader: SourceReader<Output = Self::Output, Split = Self::Split>;

    /// Whether the source ends.
    fn boundedness(&self) -> Boundedness;

    /// Largest parallelism the source supports (`None`: any).
    fn max_parallelism(&self) -> Option<u32> {
        None
    }

    /// Checks the source's settings when the job is declared (`from_source`), so that one
    /// that cannot work is an error naming the source when the job is built, not a failure
    /// of its running tasks.
    fn validate(&self) -> Result<(), String> {
        Ok(())
    }

    /// Creates the enumerator for a fresh start.
    fn create_enumerator(&self, parallelism: u32) -> Result<Self::Enumerator, BoxError>;

    /// Creates the enumerator from its checkpointed state.
    fn restore_enumerator(
        &self,
        parallelism: u32,
        checkpoint: <Self::Enumerator as SplitEnumerator>::Checkpoint,
    ) -> Result<Self::Enumerator, BoxError>;

    /// Creates the reader of one subtask.
    fn create_reader(&self, context: SourceReaderContext) -> Result<Self::Reader, BoxError>;
}

/// Coordinator-side owner of a source's splits.
pub trait SplitEnumerator: Send + 'static {
    /// The split type.
    type Split: SourceSplit;
    /// What a checkpoint stores of the enumerator (typically its unassigned splits).
    type Checkpoint: Serialize + DeserializeOwned + Send + 'static;

    /// Called once before any reader registers.
    fn start(
        &mut self,
        _context: &mut SplitEnumeratorContext<Self::Split>,
    ) -> Result<(), BoxError> {
        Ok(())
    }

    /// A reader subtask has registered.
    fn add_reader(
        &mut self,
        _subtask: u32,
        _context: &mut SplitEnumeratorContext<Self::Split>,
    ) -> Result<(), BoxError> {
        Ok(())
    }

    /// A reader asks for work.
    fn handle_split_request(
        &mut self,
        subtask: u32,
        context: &mut SplitEnumeratorContext<Self::Split>,
    ) -> Result<(), BoxError>;

    /// Splits assigned to a reader that failed before a checkpoint come back.
    fn add_splits_back(&mut self, splits: Vec<Self::Split>, subtask: u32) -> Result<(), BoxError>;

    /// Snapshot of the enumerator for checkpoint `checkpoint_id`.
    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<Self::Checkpoint, BoxError>;

    /// Checkpoint `checkpoint_id` is complete.
    fn notify_checkpoint_complete(&mut self, _checkpoint_id: u64) -> Result<(), BoxError> {
        Ok(())
    }

    /// How often [`SplitEnumerator::on_tick`] runs (`None`: never), e.g. to discover new
    /// files or partitions.
    fn tick_interval(&self) -> Option<std::time::Duration> {
        None
    }

    /// Periodic work, every [`SplitEnumerator::tick_interval`].
    fn on_tick(
        &mut self,
        _context: &mut SplitEnumeratorContext<Self::Split>,
    ) -> Result<(), BoxError> {
        Ok(())
    }
}

/// A message from the enumerator to one reader.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub enum SplitAssignment<S> {
    /// New splits to read.
    AddSplits(Vec<S>),
    /// No more splits will come.
    NoMoreSplits,
    /// How many readers hold splits now (sent by the runtime, not by enumerators): a reader
    /// that paces itself to a share of a total rate divides the rate by it, so that the total
    /// holds when there are fewer splits than readers.
    ReadersSharing(u32),
}

/// What an enumerator can see and do: the readers and their parallelism, and assignments,
/// which the coordinator delivers to readers after the enumerator's call returns.
pub struct SplitEnumeratorContext<S> {
    parallelism: u32,
    registered: Vec<u32>,
    outbox: Vec<(u32, SplitAssignment<S>)>,
}

impl<S> SplitEnumeratorContext<S> {
    pub(crate) fn new(parallelism: u32) -> Self {
        Self {
            parallelism,
            registered: Vec::new(),
            outbox: Vec::new(),
        }
    }
    pub(crate) fn register(&mut self, subtask: u32) {
        if !self.registered.contains(&subtask) {
            self.registered.push(subtask);
        }
    }
    pub(crate) fn take_outbox(&mut self) -> Vec<(u32, SplitAssignment<S>)> {
        std::mem::take(&mut self.outbox)
    }

    /// Number of reader subtasks.
    pub fn current_parallelism(&self) -> u32 {
        self.parallelism
    }
    /// Readers that have registered so far.
    pub fn registered_readers(&self) -> &[u32] {
        &self.registered
    }
    /// Assigns `split` to reader `subtask`.
    pub fn assign_split(&mut self, split: S, subtask: u32) {
        self.outbox
            .push((subtask, SplitAssignment::AddSplits(vec![split])));
    }
    /// Tells reader `subtask` that no more splits will come.
    pub fn signal_no_more_splits(&mut self, subtask: u32) {
        self.outbox.push((subtask, SplitAssignment::NoMoreSplits));
    }
}

/// A message from a reader to the enumerator.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub enum ReaderEvent {
    /// The reader subtask is up.
    Registered(u32),
    /// The reader subtask wants a split.
    SplitRequest(u32),
    /// The reader subtask holds splits restored from a checkpoint.
    Reading(u32),
}

/// What a reader knows of its place in the job, and its line to the enumerator.
pub struct SourceReaderContext {
    subtask: u32,
    parallelism: u32,
    requests: Sender<ReaderEvent>,
    malformed: MalformedRecordCounters,
    metrics: MetricGroup,
}

impl SourceReaderContext {
    /// A context for reader `subtask` of `parallelism`, whose split requests go to
    /// `requests` (the runtime wires this to the source coordinator; tests may read it).
    pub fn new(subtask: u32, parallelism: u32, requests: Sender<ReaderEvent>) -> Self {
        Self {
            subtask,
            parallelism,
            requests,
            malformed: MalformedRecordCounters::default(),
            metrics: MetricGroup::detached(),
        }
    }

    /// The same context, reporting into `metrics` (the runtime gives each reader its
    /// operator's group): the malformed-record counts, and what the reader registers.
    pub fn with_metric_group(mut self, metrics: MetricGroup) -> Self {
        self.malformed = MalformedRecordCounters::registered_in(&metrics);
        self.metrics = metrics;
        self
    }

    /// Where the reader registers its metrics (Flink's `SourceReaderContext.metricGroup()`):
    /// a Kafka reader's lag per partition, for instance.
    pub fn metric_group(&self) -> &MetricGroup {
        &self.metrics
    }
    /// Where the reader counts malformed records it skips or passes on as dead letters
    /// (give it to a [`MalformedRecordHandler`](crate::connectors::malformed::MalformedRecordHandler)):
    /// the job's result reports these counts per source.
    pub fn malformed_record_counters(&self) -> MalformedRecordCounters {
        self.malformed.clone()
    }
    /// Zero-based index of the reader's subtask.
    pub fn subtask_index(&self) -> u32 {
        self.subtask
    }
    /// Number of reader subtasks.
    pub fn parallelism(&self) -> u32 {
        self.parallelism
    }
    /// Asks the enumerator for a split; the answer arrives through
    /// [`SourceReader::add_splits`] or [`SourceReader::notify_no_more_splits`].
    pub fn send_split_request(&self) {
        // The coordinator only goes away when the job is cancelled; the task sees that itself.
        let _ = self.requests.send(ReaderEvent::SplitRequest(self.subtask));
    }
}

/// Reads the splits assigned to one subtask.
pub trait SourceReader: Send + 'static {
    /// Records it produces.
    type Output;
    /// The split type.
    type Split: SourceSplit;

    /// Called once before the first poll (after restored splits were added).
    fn start(&mut self) -> Result<(), BoxError> {
        Ok(())
    }

    /// Emits the records available now (a bounded number, so the task can react to events
    /// between polls) and tells whether more are available.
    fn poll_next(
        &mut self,
        output: &mut Collector<'_, Self::Output>,
    ) -> Result<InputStatus, BoxError>;

    /// How long to wait before polling again after [`InputStatus::NothingAvailable`].
    fn poll_delay(&self) -> std::time::Duration {
        std::time::Duration::from_millis(1)
    }

    /// Adds splits to read (assigned by the enumerator, or restored from a checkpoint).
    fn add_splits(&mut self, splits: Vec<Self::Split>) -> Result<(), BoxError>;

    /// The enumerator will assign no more splits.
    fn notify_no_more_splits(&mut self);

    /// `readers` of the source's readers hold splits now (those assigned one, or restored
    /// with one). A reader that limits a rate given for the whole source
    /// ([`RateLimiter`](crate::connectors::rate_limiter::RateLimiter)) shares it among them,
    /// so that the total holds whatever the number of splits.
    fn set_readers_sharing(&mut self, _readers: u32) {}

    /// The reader's position: its unfinished splits with their progress. Called between two
    /// records, so the position is exact.
    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<Vec<Self::Split>, BoxError>;

    /// Checkpoint `checkpoint_id` is complete.
    fn notify_checkpoint_complete(&mut self, _checkpoint_id: u64) -> Result<(), BoxError> {
        Ok(())
    }
}
