//! The splits a source reader holds, and the bookkeeping of asking the enumerator for more.

use std::collections::VecDeque;

use crate::connectors::source::{InputStatus, SourceReaderContext, SourceSplit};

/// Assigned splits in reading order; the front one is being read and carries the reader's
/// current position.
#[derive(Debug)]
pub struct SplitQueue<S> {
    splits: VecDeque<S>,
    requested: bool,
    no_more_splits: bool,
}

impl<S> Default for SplitQueue<S> {
    fn default() -> Self {
        Self {
            splits: VecDeque::new(),
            requested: false,
            no_more_splits: false,
        }
    }
}

impl<S: SourceSplit> SplitQueue<S> {
    /// What a poll reports when no split is held: the end of input once the enumerator has
    /// no more, otherwise "nothing yet" after asking it (once) for a split. `None` while a
    /// split is held.
    pub fn status_when_empty(&mut self, context: &SourceReaderContext) -> Option<InputStatus> {
        if !self.splits.is_empty() {
            return None;
        }
        if self.no_more_splits {
            return Some(InputStatus::EndOfInput);
        }
        self.request(context);
        Some(InputStatus::NothingAvailable)
    }

    fn request(&mut self, context: &SourceReaderContext) {
        if !self.requested {
            self.requested = true;
            context.send_split_request();
        }
    }

    /// The split being read.
    pub fn front(&self) -> Option<&S> {
        self.splits.front()
    }

    /// The split being read, to advance its position.
    pub fn front_mut(&mut self) -> Option<&mut S> {
        self.splits.front_mut()
    }

    /// How many splits are held.
    pub fn len(&self) -> usize {
        self.splits.len()
    }

    /// Whether no split is held.
    pub fn is_empty(&self) -> bool {
        self.splits.is_empty()
    }

    /// Moves the front split to the back: another one is read first (its position stays in
    /// the split).
    pub fn rotate(&mut self) {
        if let Some(front) = self.splits.pop_front() {
            self.splits.push_back(front);
        }
    }

    /// The front split is read to its end: drops it and, if none is left, asks for more.
    pub fn finish_front(&mut self, context: &SourceReaderContext) {
        self.splits.pop_front();
        if self.splits.is_empty() && !self.no_more_splits {
            self.request(context);
        }
    }

    /// Adds assigned (or restored) splits.
    pub fn add(&mut self, splits: Vec<S>) {
        self.splits.extend(splits);
        self.requested = false;
    }

    /// The enumerator will assign no more splits.
    pub fn no_more_splits(&mut self) {
        self.no_more_splits = true;
    }

    /// The reader's position: every split still held, with its progress.
    pub fn snapshot(&self) -> Vec<S> {
        self.splits.iter().cloned().collect()
    }
}
