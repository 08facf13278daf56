//! Splitting a source's dead letters off its records, so that each goes to a sink of its own.

use crate::api::data_stream::DataStream;
use crate::api::functions::{ProcessContext, ProcessFunction};
use crate::api::output_tag::OutputTag;
use crate::connectors::malformed::MalformedRecord;
use crate::error::BoxError;
use crate::record::Record;
use crate::runtime::output::Collector;

/// The side output the dead letters leave [`split_dead_letters`](DataStream::split_dead_letters)
/// through.
const DEAD_LETTERS: &str = "dead-letters";

impl<T: Record> DataStream<Result<T, MalformedRecord>> {
    /// Splits the stream of a source built `.with_dead_letters()` into its records and its
    /// dead letters (the records it could not decode, with where they were read and why).
    ///
    /// The split is one operator chained to the source, the dead letters leaving it through a
    /// side output: no record is copied or shuffled. Given to an exactly-once sink (the
    /// transactional [`FileSink::json_lines`](crate::connectors::file_sink::FileSink::json_lines),
    /// Kafka's or PostgreSQL's exactly-once sinks), each dead letter is committed once, with the
    /// checkpoint that covers the source's position past it, even when the job fails and is
    /// restored in between.
    ///
    /// ```
    /// use weir::prelude::*;
    /// use weir::connectors::file_sink::committed_files;
    /// # #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
    /// # struct Person { name: String, age: u32 }
    /// let input = tempfile::tempdir()?;
    /// std::fs::write(input.path().join("people.csv"), "name,age\nada,36\nbob,x\n")?;
    /// let dead_letters = tempfile::tempdir()?;
    ///
    /// let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
    /// let (people, malformed) = env
    ///     .from_source(
    ///         FileSource::<Person>::csv(input.path()).with_dead_letters(),
    ///         WatermarkStrategy::no_watermarks(),
    ///         "people",
    ///     )
    ///     .split_dead_letters();
    /// malformed.sink_to(FileSink::json_lines(dead_letters.path()), "dead letters");
    /// let people = people.collect();
    /// env.execute("people")?;
    ///
    /// assert_eq!(people.take(), vec![Person { name: "ada".into(), age: 36 }]);
    /// let [file] = &committed_files(dead_letters.path())?[..] else { panic!("one file") };
    /// let letter: MalformedRecord = serde_json::from_str(std::fs::read_to_string(file)?.trim())?;
    /// assert_eq!(letter.raw, "bob,x");
    /// assert!(matches!(letter.origin, RecordOrigin::File { line: 3, .. }));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[track_caller]
    pub fn split_dead_letters(&self) -> (DataStream<T>, DataStream<MalformedRecord>) {
        let tag = OutputTag::<MalformedRecord>::new(DEAD_LETTERS);
        let records = self
            .process(SplitDeadLetters { tag: tag.clone() })
            .name("split dead letters");
        let dead_letters = records.side_output(&tag);
        (records, dead_letters)
    }
}

/// Passes `Ok` records on and sends `Err` dead letters to the side output.
#[derive(Clone)]
struct SplitDeadLetters {
    tag: OutputTag<MalformedRecord>,
}

impl<T: Record> ProcessFunction<Result<T, MalformedRecord>, T> for SplitDeadLetters {
    fn process_element(
        &mut self,
        value: Result<T, MalformedRecord>,
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_, T>,
    ) -> Result<(), BoxError> {
        match value {
            Ok(record) => out.collect(record),
            Err(dead_letter) => ctx.output(&self.tag, dead_letter)?,
        }
        Ok(())
    }
}
