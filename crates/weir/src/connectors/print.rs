//! A sink that prints each record to standard output, as Flink's `print()` does.

use std::fmt::Debug;
use std::io::Write;

use crate::api::functions::RuntimeContext;
use crate::connectors::sink::{Sink, SinkWriter};
use crate::error::BoxError;

/// Prints records with `{:?}`, prefixed by `i> ` (the subtask, from 1) when the sink runs
/// with parallelism above 1, and by an optional identifier. `stream.print()` is the shortcut.
///
/// ```
/// use weir::prelude::*;
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// env.generate(3, |i| i).sink_to(PrintSink::with_identifier("numbers"), "print");
/// let result = env.execute("print")?; // prints `numbers: 0`, `numbers: 1`, `numbers: 2`
/// assert_eq!(result.operator("Sink: print").map(|o| o.records_in), Some(3));
/// # Ok::<(), WeirError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct PrintSink {
    identifier: Option<String>,
}

impl PrintSink {
    /// A print sink whose lines start with `identifier:`.
    pub fn with_identifier(identifier: impl Into<String>) -> Self {
        Self {
            identifier: Some(identifier.into()),
        }
    }
}

/// The writer of one [`PrintSink`] subtask.
#[derive(Debug)]
pub struct PrintWriter {
    prefix: String,
}

impl<T: Debug + Send + 'static> Sink<T> for PrintSink {
    type Writer = PrintWriter;
    /// Printing is at-least-once: a replay prints again, as it always may.
    fn commits_on_checkpoint_completion(&self) -> bool {
        false
    }
    fn create_writer(&self, context: &RuntimeContext) -> Result<PrintWriter, BoxError> {
        let mut prefix = String::new();
        if let Some(id) = &self.identifier {
            prefix.push_str(id);
            prefix.push(':');
        }
        if context.parallelism() > 1 {
            prefix.push_str(&format!("{}> ", context.subtask_index() + 1));
        } else if !prefix.is_empty() {
            prefix.push(' ');
        }
        Ok(PrintWriter { prefix })
    }
}

impl<T: Debug + Send + 'static> SinkWriter<T> for PrintWriter {
    fn write(&mut self, record: T) -> Result<(), BoxError> {
        writeln!(std::io::stdout().lock(), "{}{:?}", self.prefix, record)?;
        Ok(())
    }
    fn flush(&mut self, _end_of_input: bool) -> Result<(), BoxError> {
        std::io::stdout().lock().flush()?;
        Ok(())
    }
}
