//! `assign_timestamps_and_watermarks`: gives records event timestamps and generates
//! watermarks in the middle of a pipeline (Flink's `TimestampsAndWatermarksOperator`).
//! Watermarks from upstream are dropped, except the end of event time at the end of input.

use crate::error::TaskError;
use crate::record::Record;
use crate::runtime::chain::ChainOutput;
use crate::runtime::operators::{OneInputStreamOperator, StreamOperator};
use crate::runtime::output::OperatorMetrics;
use crate::runtime::snapshot::now_millis;
use crate::runtime::source_watermarks::SourceWatermarks;
use crate::runtime::task::OperatorSetup;
use crate::time::{Watermark, WatermarkStrategy};

/// Assigns timestamps and generates watermarks after a strategy.
pub struct TimestampsAndWatermarksOperator<T> {
    watermarks: SourceWatermarks<T>,
    /// The periodic emission interval in milliseconds (`None`: never).
    interval: Option<i64>,
    next_periodic: i64,
}

impl<T> TimestampsAndWatermarksOperator<T> {
    /// An operator after `strategy`, emitting periodically at the job's
    /// `auto_watermark_interval`.
    pub fn new(setup: &OperatorSetup, strategy: WatermarkStrategy<T>) -> Self {
        let interval = setup.config.auto_watermark_interval;
        Self {
            watermarks: SourceWatermarks::new(strategy),
            interval: (!interval.is_zero())
                .then(|| i64::try_from(interval.as_millis()).unwrap_or(i64::MAX)),
            next_periodic: now(),
        }
    }

    fn emit_changes<O: Record>(&mut self, out: &mut ChainOutput<'_, O>) -> Result<(), TaskError> {
        let (status, watermark) = self.watermarks.combine();
        if let Some(status) = status {
            out.emit_watermark_status(status)?;
        }
        if let Some(watermark) = watermark {
            out.emit_watermark(watermark)?;
        }
        Ok(())
    }
}

fn now() -> i64 {
    i64::try_from(now_millis()).unwrap_or(i64::MAX)
}

impl<T: Record> StreamOperator for TimestampsAndWatermarksOperator<T> {
    fn add_metrics(&self, metrics: &mut OperatorMetrics) {
        metrics.backward_watermarks = self.watermarks.backward_watermarks();
    }
}

impl<T: Record> OneInputStreamOperator<T, T> for TimestampsAndWatermarksOperator<T> {
    #[inline]
    fn process_element(
        &mut self,
        record: T,
        out: &mut ChainOutput<'_, T>,
    ) -> Result<(), TaskError> {
        match self.watermarks.on_record(&record, out.timestamp()) {
            Some(t) => out.collect_with_timestamp(record, t)?,
            None => out.collect(record)?,
        }
        if self.watermarks.is_pending() {
            self.emit_changes(out)?;
        }
        Ok(())
    }

    fn process_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut ChainOutput<'_, T>,
    ) -> Result<(), TaskError> {
        // Upstream event time is replaced by this operator's, except its end.
        if watermark == Watermark::MAX && self.watermarks.advance_to(watermark) {
            out.emit_watermark(watermark)?;
        }
        Ok(())
    }

    fn next_processing_time(&self) -> Option<i64> {
        self.interval.map(|_| self.next_periodic)
    }

    fn on_processing_time(
        &mut self,
        time: i64,
        out: &mut ChainOutput<'_, T>,
    ) -> Result<(), TaskError> {
        let Some(interval) = self.interval else {
            return Ok(());
        };
        if time < self.next_periodic {
            return Ok(());
        }
        self.next_periodic = time.saturating_add(interval);
        self.watermarks.on_periodic_emit(std::time::Instant::now());
        self.emit_changes(out)
    }
}
