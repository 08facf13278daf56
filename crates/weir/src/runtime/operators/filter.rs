//! `filter`: keeps the records a predicate accepts.

use std::marker::PhantomData;

use crate::error::TaskError;
use crate::record::Record;
use crate::runtime::chain::ChainOutput;
use crate::runtime::operators::{OneInputStreamOperator, OperatorCore, StreamOperator};
use crate::runtime::output::call_user;
use crate::runtime::task::OperatorSetup;

/// Passes on the records for which the predicate is true.
pub struct FilterOperator<T, F> {
    core: OperatorCore,
    predicate: F,
    _types: PhantomData<fn(T)>,
}

impl<T, F> FilterOperator<T, F> {
    /// A filter with `predicate`.
    pub fn new(setup: &OperatorSetup, predicate: F) -> Self {
        Self {
            core: OperatorCore::new(setup),
            predicate,
            _types: PhantomData,
        }
    }
}

impl<T, F: Send> StreamOperator for FilterOperator<T, F> {}

impl<T: Record, F: FnMut(&T) -> bool + Send> OneInputStreamOperator<T, T> for FilterOperator<T, F> {
    #[inline]
    fn process_element(
        &mut self,
        record: T,
        out: &mut ChainOutput<'_, T>,
    ) -> Result<(), TaskError> {
        let predicate = &mut self.predicate;
        if call_user(&self.core.name, || predicate(&record))? {
            out.collect(record)
        } else {
            Ok(())
        }
    }
}
