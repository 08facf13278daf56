//! `OutputTag`: names a side output of an operator and the type of its records.

use std::marker::PhantomData;
use std::sync::Arc;

/// A side output of type `T` (Flink's `OutputTag`): functions emit to it with
/// `ctx.output(&tag, value)`, and [`DataStream::side_output`](crate::DataStream::side_output)
/// reads it. Records sent to a tag nobody reads are dropped.
///
/// ```
/// use weir::prelude::*;
///
/// /// Passes even numbers on and sends odd ones to a side output.
/// #[derive(Clone)]
/// struct SplitOdd {
///     odd: OutputTag<u64>,
/// }
///
/// impl ProcessFunction<u64, u64> for SplitOdd {
///     fn process_element(
///         &mut self,
///         value: u64,
///         ctx: &mut ProcessContext<'_>,
///         out: &mut Collector<'_, u64>,
///     ) -> Result<(), BoxError> {
///         if value % 2 == 0 {
///             out.collect(value);
///         } else {
///             ctx.output(&self.odd, value)?;
///         }
///         Ok(())
///     }
/// }
///
/// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
/// let odd = OutputTag::<u64>::new("odd");
/// let evens = env.generate(6, |i| i).process(SplitOdd { odd: odd.clone() });
/// let odds = evens.side_output(&odd).map(|i| i * 10).collect();
/// let evens = evens.collect();
/// env.execute("split")?;
/// assert_eq!(evens.take(), vec![0, 2, 4]);
/// assert_eq!(odds.take(), vec![10, 30, 50]);
/// # Ok::<(), WeirError>(())
/// ```
pub struct OutputTag<T> {
    id: Arc<str>,
    _type: PhantomData<fn() -> T>,
}

impl<T> Clone for OutputTag<T> {
    fn clone(&self) -> Self {
        Self {
            id: self.id.clone(),
            _type: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for OutputTag<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OutputTag({}: {})", self.id, std::any::type_name::<T>())
    }
}

impl<T> OutputTag<T> {
    /// The side output named `id` (unique per operator).
    pub fn new(id: &str) -> Self {
        Self {
            id: id.into(),
            _type: PhantomData,
        }
    }

    /// Its name.
    pub fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn shared_id(&self) -> Arc<str> {
        self.id.clone()
    }
}
