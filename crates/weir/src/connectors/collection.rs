//! A source over an in-memory collection (Flink's `fromCollection`); not parallel.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::connectors::source::{
    Boundedness, InputStatus, Source, SourceReader, SourceReaderContext, SourceSplit,
};
use crate::connectors::static_enumerator::StaticSplitEnumerator;
use crate::error::BoxError;
use crate::record::Record;
use crate::runtime::output::Collector;

const RECORDS_PER_POLL: usize = 1024;

/// The whole collection; `next` is the reader's position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectionSplit {
    /// Index of the next element to emit.
    pub next: usize,
}

impl SourceSplit for CollectionSplit {
    fn split_id(&self) -> String {
        "collection".into()
    }
}

/// Emits the elements of a vector in order, from one subtask. The elements are part of the
/// job's definition, like its code. `env.from_collection(items)` is the shortcut.
///
/// ```
/// use weir::prelude::*;
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2))?;
/// let doubled = env
///     .from_source(CollectionSource::new(vec![1, 2, 3]), WatermarkStrategy::no_watermarks(), "numbers")
///     .map(|n: i32| n * 2)
///     .collect();
/// env.execute("double")?;
/// let mut doubled = doubled.take();
/// doubled.sort();
/// assert_eq!(doubled, vec![2, 4, 6]);
/// # Ok::<(), WeirError>(())
/// ```
#[derive(Debug, Clone)]
pub struct CollectionSource<T> {
    items: Arc<Vec<T>>,
}

impl<T> CollectionSource<T> {
    /// A source over `items`.
    pub fn new(items: Vec<T>) -> Self {
        Self {
            items: Arc::new(items),
        }
    }
}

impl<T: Record + Sync> Source for CollectionSource<T> {
    type Output = T;
    type Split = CollectionSplit;
    type Enumerator = StaticSplitEnumerator<CollectionSplit>;
    type Reader = CollectionReader<T>;

    fn boundedness(&self) -> Boundedness {
        Boundedness::Bounded
    }

    fn max_parallelism(&self) -> Option<u32> {
        Some(1)
    }

    fn create_enumerator(&self, _parallelism: u32) -> Result<Self::Enumerator, BoxError> {
        Ok(StaticSplitEnumerator::new([CollectionSplit { next: 0 }]))
    }

    fn restore_enumerator(
        &self,
        _parallelism: u32,
        checkpoint: Vec<CollectionSplit>,
    ) -> Result<Self::Enumerator, BoxError> {
        Ok(StaticSplitEnumerator::new(checkpoint))
    }

    fn create_reader(&self, context: SourceReaderContext) -> Result<Self::Reader, BoxError> {
        Ok(CollectionReader {
            items: self.items.clone(),
            split: None,
            no_more_splits: false,
            requested: false,
            context,
        })
    }
}

/// Reads the collection.
pub struct CollectionReader<T> {
    items: Arc<Vec<T>>,
    split: Option<CollectionSplit>,
    no_more_splits: bool,
    requested: bool,
    context: SourceReaderContext,
}

impl<T: Record + Sync> SourceReader for CollectionReader<T> {
    type Output = T;
    type Split = CollectionSplit;

    fn poll_next(&mut self, output: &mut Collector<'_, T>) -> Result<InputStatus, BoxError> {
        let Some(split) = self.split.as_mut() else {
            if self.no_more_splits {
                return Ok(InputStatus::EndOfInput);
            }
            if !self.requested {
                self.requested = true;
                self.context.send_split_request();
            }
            return Ok(InputStatus::NothingAvailable);
        };
        let end = (split.next + RECORDS_PER_POLL).min(self.items.len());
        for item in &self.items[split.next.min(end)..end] {
            output.collect(item.clone());
        }
        split.next = end;
        if end >= self.items.len() {
            self.split = None;
        }
        Ok(InputStatus::MoreAvailable)
    }

    fn add_splits(&mut self, splits: Vec<CollectionSplit>) -> Result<(), BoxError> {
        if let Some(split) = splits.into_iter().next() {
            self.split = Some(split);
        }
        self.requested = false;
        Ok(())
    }

    fn notify_no_more_splits(&mut self) {
        self.no_more_splits = true;
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<CollectionSplit>, BoxError> {
        Ok(self.split.iter().cloned().collect())
    }
}
