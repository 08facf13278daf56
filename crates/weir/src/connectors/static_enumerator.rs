//! An enumerator for sources whose splits are all known at start: it hands them out one at a
//! time to readers that ask, then tells each reader that no more will come.

use std::collections::VecDeque;

use crate::connectors::source::{SourceSplit, SplitEnumerator, SplitEnumeratorContext};
use crate::error::BoxError;

/// Hands out a fixed set of splits on request (pull-based, so faster readers take more).
#[derive(Debug, Clone)]
pub struct StaticSplitEnumerator<S> {
    pending: VecDeque<S>,
}

impl<S> StaticSplitEnumerator<S> {
    /// An enumerator over `splits`.
    pub fn new(splits: impl IntoIterator<Item = S>) -> Self {
        Self {
            pending: splits.into_iter().collect(),
        }
    }
}

impl<S: SourceSplit> SplitEnumerator for StaticSplitEnumerator<S> {
    type Split = S;
    type Checkpoint = Vec<S>;

    fn handle_split_request(
        &mut self,
        subtask: u32,
        context: &mut SplitEnumeratorContext<S>,
    ) -> Result<(), BoxError> {
        match self.pending.pop_front() {
            Some(split) => context.assign_split(split, subtask),
            None => context.signal_no_more_splits(subtask),
        }
        Ok(())
    }

    fn add_splits_back(&mut self, splits: Vec<S>, _subtask: u32) -> Result<(), BoxError> {
        self.pending.extend(splits);
        Ok(())
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<S>, BoxError> {
        Ok(self.pending.iter().cloned().collect())
    }
}
