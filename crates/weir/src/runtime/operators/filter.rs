//! `filter`: keeps the records a predicate accepts.

use crate::error::TaskError;
use crate::record::Record;
use crate::runtime::operators::{pass_events_through, OperatorCore};
use crate::runtime::output::{call_user, Output};
use crate::runtime::task::OperatorSetup;

/// Passes on the records for which the predicate is true.
pub struct FilterOperator<T, F> {
    core: OperatorCore,
    predicate: F,
    output: Box<dyn Output<T>>,
}

impl<T, F> FilterOperator<T, F> {
    /// A filter with `predicate`, emitting into `output`.
    pub fn new(setup: &OperatorSetup, predicate: F, output: Box<dyn Output<T>>) -> Self {
        Self {
            core: OperatorCore::new(setup),
            predicate,
            output,
        }
    }
}

impl<T: Record, F: FnMut(&T) -> bool + Send> Output<T> for FilterOperator<T, F> {
    #[inline]
    fn collect(&mut self, record: T) -> Result<(), TaskError> {
        self.core.records_in += 1;
        let predicate = &mut self.predicate;
        if call_user(&self.core.name, || predicate(&record))? {
            self.core.records_out += 1;
            self.output.collect(record)
        } else {
            Ok(())
        }
    }
    pass_events_through!();
}
