//! A sink that hands records back to the program that ran the job, for tests and small
//! results. Records travel as messages, never through memory shared with the tasks.

use crossbeam_channel::{Receiver, Sender};

use crate::api::functions::RuntimeContext;
use crate::connectors::sink::{Sink, SinkWriter};
use crate::error::BoxError;

/// The sink side; create it with [`collect_sink`] (or use `stream.collect()`).
///
/// ```
/// use weir::prelude::*;
/// use weir::connectors::collect::collect_sink;
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// let (sink, handle) = collect_sink();
/// env.generate(3, |i| i + 1).sink_to(sink, "collect");
/// env.execute("collect")?;
/// assert_eq!(handle.take(), vec![1, 2, 3]);
/// # Ok::<(), WeirError>(())
/// ```
pub struct CollectSink<T> {
    tx: Sender<Vec<T>>,
}

/// The program's side: the records the sink received (see [`CollectSink`]).
///
/// ```
/// use weir::prelude::*;
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// let handle: CollectHandle<u64> = env.generate(2, |i| i).collect();
/// env.execute("collect")?;
/// assert_eq!(handle.take(), vec![0, 1]);
/// assert!(handle.take().is_empty(), "taken once");
/// # Ok::<(), WeirError>(())
/// ```
pub struct CollectHandle<T> {
    rx: Receiver<Vec<T>>,
}

/// A linked collect sink and handle.
pub fn collect_sink<T>() -> (CollectSink<T>, CollectHandle<T>) {
    let (tx, rx) = crossbeam_channel::unbounded();
    (CollectSink { tx }, CollectHandle { rx })
}

impl<T> CollectHandle<T> {
    /// Takes every record received so far (in arrival order per subtask).
    pub fn take(&self) -> Vec<T> {
        self.rx.try_iter().flatten().collect()
    }
}

/// The writer of one [`CollectSink`] subtask: buffers records and sends them on flush.
pub struct CollectWriter<T> {
    tx: Sender<Vec<T>>,
    buffer: Vec<T>,
}

impl<T: Send + 'static> Sink<T> for CollectSink<T> {
    type Writer = CollectWriter<T>;
    /// Collected records live in this process only: a replay after a restart is what the
    /// collected stream shows anyway.
    fn commits_on_checkpoint_completion(&self) -> bool {
        false
    }
    fn create_writer(&self, _context: &RuntimeContext) -> Result<CollectWriter<T>, BoxError> {
        Ok(CollectWriter {
            tx: self.tx.clone(),
            buffer: Vec::new(),
        })
    }
}

impl<T: Send + 'static> SinkWriter<T> for CollectWriter<T> {
    fn write(&mut self, record: T) -> Result<(), BoxError> {
        // Handed over at once, so a cancelled job's records are visible too.
        self.buffer.push(record);
        self.flush(false)
    }
    fn flush(&mut self, _end_of_input: bool) -> Result<(), BoxError> {
        if !self.buffer.is_empty() {
            // A dropped handle means nobody wants the records: not a failure of the job.
            let _ = self.tx.send(std::mem::take(&mut self.buffer));
        }
        Ok(())
    }
}
