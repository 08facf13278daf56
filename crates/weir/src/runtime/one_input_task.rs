//! The loop of a task whose chain head reads from channels.

use std::time::Instant;

use crate::error::TaskError;
use crate::record::Record;
use crate::runtime::input_gate::InputGate;
use crate::runtime::output::{OperatorMetrics, Output};
use crate::runtime::stream_element::{StreamElement, StreamEvent};
use crate::runtime::task::Invokable;

/// Reads the input gate and pushes records through the chain.
///
/// Partly filled output batches are flushed when the input runs dry (so an idle pipeline
/// has no added latency) and at the latest after the buffer timeout while busy.
pub struct OneInputStreamTask<T> {
    gate: InputGate<T>,
    head: Box<dyn Output<T>>,
    buffer_timeout: std::time::Duration,
}

impl<T: Record> OneInputStreamTask<T> {
    /// A task reading `gate` into the chain starting at `head`.
    pub fn new(
        gate: InputGate<T>,
        head: Box<dyn Output<T>>,
        buffer_timeout: std::time::Duration,
    ) -> Self {
        Self {
            gate,
            head,
            buffer_timeout,
        }
    }

    fn on_event(&mut self, channel: usize, event: StreamEvent) -> Result<bool, TaskError> {
        match event {
            StreamEvent::EndOfStream => {
                self.gate.mark_finished(channel);
                if self.gate.is_finished() {
                    self.head.emit_event(&StreamEvent::EndOfStream)?;
                    return Ok(true);
                }
                Ok(false)
            }
            StreamEvent::Barrier(barrier) => Err(TaskError::Internal(format!(
                "received barrier of checkpoint {} but checkpointing is not enabled",
                barrier.checkpoint_id
            ))),
        }
    }
}

impl<T: Record> Invokable for OneInputStreamTask<T> {
    fn invoke(&mut self) -> Result<(), TaskError> {
        if self.gate.num_channels() == 0 {
            return self.head.emit_event(&StreamEvent::EndOfStream);
        }
        let mut flush_deadline = Instant::now() + self.buffer_timeout;
        loop {
            let (channel, element) = match self.gate.poll()? {
                Some(ready) => ready,
                None => {
                    self.head.flush()?;
                    flush_deadline = Instant::now() + self.buffer_timeout;
                    self.gate.next_blocking()?
                }
            };
            match element {
                StreamElement::Records(batch) => {
                    for record in batch {
                        self.head.collect(record)?;
                    }
                    let now = Instant::now();
                    if now >= flush_deadline {
                        self.head.flush()?;
                        flush_deadline = now + self.buffer_timeout;
                    }
                }
                StreamElement::Event(event) => {
                    if self.on_event(channel, event)? {
                        return Ok(());
                    }
                }
            }
        }
    }

    fn report_metrics(&self, into: &mut Vec<OperatorMetrics>) {
        self.head.report_metrics(into);
    }
}
