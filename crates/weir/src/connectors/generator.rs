//! A source generating records from their sequence number: bounded or unbounded, optionally
//! rate limited (Flink's `DataGeneratorSource`). The number range is split evenly over the
//! readers; a split's position is the next number, so replay after a restore is exact.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::connectors::rate_limiter::RateLimiter;
use crate::connectors::source::{
    Boundedness, InputStatus, Source, SourceReader, SourceReaderContext, SourceSplit,
};
use crate::connectors::split_queue::SplitQueue;
use crate::connectors::static_enumerator::StaticSplitEnumerator;
use crate::error::BoxError;
use crate::record::Record;
use crate::runtime::output::Collector;

/// Records emitted per poll, so the task can react to events between polls.
const RECORDS_PER_POLL: u64 = 1024;

/// A range of sequence numbers `[next, end)`; `next` is the reader's position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumberSequenceSplit {
    /// Split id.
    pub id: u32,
    /// Next number to emit.
    pub next: u64,
    /// One past the last number.
    pub end: u64,
}

impl SourceSplit for NumberSequenceSplit {
    fn split_id(&self) -> String {
        self.id.to_string()
    }
}

/// Generates `f(0), f(1), …` up to a count, or without end.
///
/// ```
/// use weir::prelude::*;
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))?;
/// let squares = env.from_source(GeneratorSource::new(10, |i| i * i), WatermarkStrategy::no_watermarks(), "squares").collect();
/// // An unbounded one, throttled (for demos and tests): it runs until cancelled or stopped.
/// let _ticks = GeneratorSource::unbounded(|i| i).with_rate_limit(100.0);
/// env.execute("squares")?;
/// assert_eq!(squares.take().iter().sum::<u64>(), 285);
/// # Ok::<(), WeirError>(())
/// ```
#[derive(Clone)]
pub struct GeneratorSource<T, F> {
    count: Option<u64>,
    records_per_second: Option<f64>,
    held_tail: Option<HeldTail>,
    f: F,
    _record: PhantomData<fn() -> T>,
}

/// The last numbers of each split, withheld until `release` says so.
#[derive(Clone)]
struct HeldTail {
    numbers: u64,
    release: Arc<dyn Fn() -> bool + Send + Sync>,
}

impl<T: Record, F: Fn(u64) -> T + Clone + Send + 'static> GeneratorSource<T, F> {
    /// A bounded generator of `count` records.
    pub fn new(count: u64, f: F) -> Self {
        Self {
            count: Some(count),
            records_per_second: None,
            held_tail: None,
            f,
            _record: PhantomData,
        }
    }

    /// A generator that never ends.
    pub fn unbounded(f: F) -> Self {
        Self {
            count: None,
            records_per_second: None,
            held_tail: None,
            f,
            _record: PhantomData,
        }
    }

    /// Limits the total rate over all readers to `records_per_second`: shared among the
    /// readers that hold (or held) splits, so that fewer splits than readers (after a restore
    /// at a higher parallelism) do not lower it; once some splits are read to their end, the
    /// rest are read at their share, below the total.
    pub fn with_rate_limit(mut self, records_per_second: f64) -> Self {
        self.records_per_second = Some(records_per_second);
        self
    }

    /// Withholds the last `numbers` numbers of each split (all of them, if a split is
    /// shorter) until `release` returns true; until then the source does not end. Meant for
    /// tests and demos that must act while the job still runs — take a savepoint, stop it,
    /// kill its process after a checkpoint — whatever the machine's speed: instead of a rate
    /// chosen so that the input lasts long enough, the input lasts until the test has seen
    /// what it waits for. Barriers, savepoints and stops pass while numbers are held.
    /// `release` is called on every poll while it is false, so keep it cheap.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    /// use weir::prelude::*;
    /// let released = Arc::new(AtomicBool::new(false));
    /// let release = released.clone();
    /// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))?;
    /// let numbers = GeneratorSource::new(100, |i| i)
    ///     .with_held_tail(10, move || release.load(Ordering::SeqCst));
    /// env.from_source(numbers, WatermarkStrategy::no_watermarks(), "numbers")
    ///     .sink_to(DiscardingSink, "discard");
    /// let client = env.execute_async("numbers")?;
    /// // … act on the running job: it cannot have finished …
    /// assert!(!client.is_finished());
    /// released.store(true, Ordering::SeqCst);
    /// assert_eq!(client.wait()?.status, JobStatus::Finished);
    /// # Ok::<(), WeirError>(())
    /// ```
    pub fn with_held_tail(
        mut self,
        numbers: u64,
        release: impl Fn() -> bool + Send + Sync + 'static,
    ) -> Self {
        self.held_tail = Some(HeldTail {
            numbers,
            release: Arc::new(release),
        });
        self
    }
}

impl<T: Record, F: Fn(u64) -> T + Clone + Send + 'static> Source for GeneratorSource<T, F> {
    type Output = T;
    type Split = NumberSequenceSplit;
    type Enumerator = StaticSplitEnumerator<NumberSequenceSplit>;
    type Reader = GeneratorReader<T, F>;

    fn boundedness(&self) -> Boundedness {
        match self.count {
            Some(_) => Boundedness::Bounded,
            None => Boundedness::ContinuousUnbounded,
        }
    }

    fn create_enumerator(&self, parallelism: u32) -> Result<Self::Enumerator, BoxError> {
        let total = u128::from(self.count.unwrap_or(u64::MAX));
        let p = u128::from(parallelism.max(1));
        let splits = (0..p).map(|i| NumberSequenceSplit {
            id: i as u32,
            next: (total * i / p) as u64,
            end: (total * (i + 1) / p) as u64,
        });
        Ok(StaticSplitEnumerator::new(splits))
    }

    fn restore_enumerator(
        &self,
        _parallelism: u32,
        checkpoint: Vec<NumberSequenceSplit>,
    ) -> Result<Self::Enumerator, BoxError> {
        Ok(StaticSplitEnumerator::new(checkpoint))
    }

    fn validate(&self) -> Result<(), String> {
        crate::connectors::rate_limiter::check_rate(self.records_per_second)
    }

    fn create_reader(&self, context: SourceReaderContext) -> Result<Self::Reader, BoxError> {
        crate::connectors::rate_limiter::check_rate(self.records_per_second)?;
        let limiter = RateLimiter::new(self.records_per_second, context.parallelism());
        Ok(GeneratorReader {
            f: self.f.clone(),
            held_tail: self.held_tail.clone(),
            holding: false,
            splits: SplitQueue::default(),
            context,
            limiter,
            _record: PhantomData,
        })
    }
}

/// Reads the number ranges assigned to one subtask.
pub struct GeneratorReader<T, F> {
    f: F,
    /// Numbers withheld until released (`None`: none, or released).
    held_tail: Option<HeldTail>,
    /// Whether the last poll found only held numbers.
    holding: bool,
    splits: SplitQueue<NumberSequenceSplit>,
    context: SourceReaderContext,
    limiter: RateLimiter,
    _record: PhantomData<fn() -> T>,
}

impl<T: Record, F: Fn(u64) -> T + Clone + Send + 'static> SourceReader for GeneratorReader<T, F> {
    type Output = T;
    type Split = NumberSequenceSplit;

    fn poll_next(&mut self, output: &mut Collector<'_, T>) -> Result<InputStatus, BoxError> {
        let allowed = self.limiter.allowed(RECORDS_PER_POLL);
        if let Some(status) = self.splits.status_when_empty(&self.context) {
            return Ok(status);
        }
        if allowed == 0 {
            return Ok(InputStatus::NothingAvailable);
        }
        let held = match &self.held_tail {
            Some(held) if (held.release)() => {
                self.held_tail = None;
                0
            }
            Some(held) => held.numbers,
            None => 0,
        };
        // With numbers held, read a split that has some left below its held tail.
        for _ in 0..self.splits.len() {
            match self.splits.front() {
                Some(split) if split.next >= split.end.saturating_sub(held) => self.splits.rotate(),
                _ => break,
            }
        }
        let Some(split) = self.splits.front_mut() else {
            return Ok(InputStatus::NothingAvailable);
        };
        let limit = split.end.saturating_sub(held);
        self.holding = split.next >= limit;
        if self.holding {
            return Ok(InputStatus::NothingAvailable);
        }
        output.for_split(&split.split_id());
        let n = allowed.min(limit - split.next);
        let (from, f) = (split.next, &self.f);
        for i in from..from + n {
            output.collect(f(i));
        }
        split.next += n;
        self.limiter.record(n);
        if split.next == split.end {
            output.release_split(&split.split_id());
            self.splits.finish_front(&self.context);
        }
        Ok(InputStatus::MoreAvailable)
    }

    fn poll_delay(&self) -> Duration {
        if self.holding {
            // Waiting for the release: a test's event, not the next record.
            return Duration::from_millis(5);
        }
        self.limiter.delay(Duration::from_millis(1))
    }

    fn add_splits(&mut self, splits: Vec<NumberSequenceSplit>) -> Result<(), BoxError> {
        self.splits.add(splits);
        Ok(())
    }

    fn notify_no_more_splits(&mut self) {
        self.splits.no_more_splits();
    }

    fn set_readers_sharing(&mut self, readers: u32) {
        self.limiter.share_among(readers);
    }

    fn snapshot_state(
        &mut self,
        _checkpoint_id: u64,
    ) -> Result<Vec<NumberSequenceSplit>, BoxError> {
        Ok(self.splits.snapshot())
    }
}
