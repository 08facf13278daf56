//! A source whose end waits: every record is read as usual, but the readers report the end
//! of their input only once a release says so. For tests and demos that must act on a
//! running job — kill its process once checkpoints committed output, stop it with a
//! savepoint — whatever the machine's speed: instead of an input rate chosen so that the job
//! lasts long enough, the job lasts until the test has seen what it waits for.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::connectors::source::{
    Boundedness, InputStatus, Source, SourceReader, SourceReaderContext, SplitEnumerator,
};
use crate::error::BoxError;
use crate::runtime::output::Collector;

/// When a held end may come.
type Release = Arc<dyn Fn() -> bool + Send + Sync>;

/// Wraps a source so that its readers end their input only once `release` returns true;
/// meanwhile the job runs on (checkpoints, savepoints and stops included) with nothing to
/// read. Until then a bounded source does not end, so neither does the job.
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::sync::Arc;
/// use weir::connectors::held_end::HeldEnd;
/// use weir::prelude::*;
/// let released = Arc::new(AtomicBool::new(false));
/// let release = released.clone();
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))?;
/// let numbers = HeldEnd::new(GeneratorSource::new(100, |i| i), move || release.load(Ordering::SeqCst));
/// let numbers = env.from_source(numbers, WatermarkStrategy::no_watermarks(), "numbers").collect();
/// let client = env.execute_async("numbers")?;
/// assert!(!client.is_finished(), "the end waits for the release");
/// released.store(true, Ordering::SeqCst);
/// assert_eq!(client.wait()?.status, JobStatus::Finished);
/// assert_eq!(numbers.take().len(), 100);
/// # Ok::<(), WeirError>(())
/// ```
pub struct HeldEnd<S> {
    source: S,
    release: Release,
}

impl<S: Source> HeldEnd<S> {
    /// `source`, whose readers end once `release` returns true (called on every poll at the
    /// end of the input until then, so keep it cheap).
    pub fn new(source: S, release: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        Self {
            source,
            release: Arc::new(release),
        }
    }

    /// `source`, whose readers end once a file exists at `path` (for a job in another
    /// process: the test creates the file, or kills the job first).
    pub fn until_file_exists(source: S, path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        Self::new(source, move || path.exists())
    }
}

impl<S: Source> Source for HeldEnd<S> {
    type Output = S::Output;
    type Split = S::Split;
    type Enumerator = S::Enumerator;
    type Reader = HeldEndReader<S::Reader>;

    fn boundedness(&self) -> Boundedness {
        self.source.boundedness()
    }

    fn max_parallelism(&self) -> Option<u32> {
        self.source.max_parallelism()
    }

    fn validate(&self) -> Result<(), String> {
        self.source.validate()
    }

    fn create_enumerator(&self, parallelism: u32) -> Result<Self::Enumerator, BoxError> {
        self.source.create_enumerator(parallelism)
    }

    fn restore_enumerator(
        &self,
        parallelism: u32,
        checkpoint: <Self::Enumerator as SplitEnumerator>::Checkpoint,
    ) -> Result<Self::Enumerator, BoxError> {
        self.source.restore_enumerator(parallelism, checkpoint)
    }

    fn create_reader(&self, context: SourceReaderContext) -> Result<Self::Reader, BoxError> {
        Ok(HeldEndReader {
            reader: self.source.create_reader(context)?,
            release: Some(self.release.clone()),
            holding: false,
        })
    }
}

/// The reader of a [`HeldEnd`] source.
pub struct HeldEndReader<R> {
    reader: R,
    /// `None` once released.
    release: Option<Release>,
    /// Whether the input ended and its end is held.
    holding: bool,
}

impl<R: SourceReader> SourceReader for HeldEndReader<R> {
    type Output = R::Output;
    type Split = R::Split;

    fn start(&mut self) -> Result<(), BoxError> {
        self.reader.start()
    }

    fn poll_next(
        &mut self,
        output: &mut Collector<'_, Self::Output>,
    ) -> Result<InputStatus, BoxError> {
        if self.holding {
            if self.release.as_ref().is_some_and(|release| !release()) {
                return Ok(InputStatus::NothingAvailable);
            }
            self.release = None;
            return Ok(InputStatus::EndOfInput);
        }
        match self.reader.poll_next(output)? {
            InputStatus::EndOfInput if self.release.is_some() => {
                self.holding = true;
                Ok(InputStatus::NothingAvailable)
            }
            status => Ok(status),
        }
    }

    fn poll_delay(&self) -> Duration {
        if self.holding {
            // Waiting for the release: an event of the test's, not the next record.
            return Duration::from_millis(5);
        }
        self.reader.poll_delay()
    }

    fn add_splits(&mut self, splits: Vec<Self::Split>) -> Result<(), BoxError> {
        self.reader.add_splits(splits)
    }

    fn notify_no_more_splits(&mut self) {
        self.reader.notify_no_more_splits();
    }

    fn set_readers_sharing(&mut self, readers: u32) {
        self.reader.set_readers_sharing(readers);
    }

    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<Vec<Self::Split>, BoxError> {
        self.reader.snapshot_state(checkpoint_id)
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), BoxError> {
        self.reader.notify_checkpoint_complete(checkpoint_id)
    }
}
