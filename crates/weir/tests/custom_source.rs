//! A connector-style source implemented outside the crate through the split-based `Source`
//! trait: splits are handed out on request, read exactly once, and their positions
//! snapshotted; a reader error fails the job with the source's name.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use weir::connectors::source::{
    Boundedness, InputStatus, ReaderEvent, Source, SourceReader, SourceReaderContext, SourceSplit,
};
use weir::connectors::static_enumerator::StaticSplitEnumerator;
use weir::runtime::output::VecOutput;
use weir::WatermarkStrategy;
use weir::{BoxError, Collector, ExecutionConfig, StreamExecutionEnvironment, WeirError};

/// A "file" of `lines` lines; `offset` is the next line to read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct LinesSplit {
    file: u32,
    lines: u32,
    offset: u32,
}

impl SourceSplit for LinesSplit {
    fn split_id(&self) -> String {
        format!("file-{}", self.file)
    }
}

#[derive(Clone)]
struct FilesSource {
    files: u32,
    lines_per_file: u32,
    /// Line after which reading fails, to test error reporting.
    fail_at: Option<(u32, u32)>,
    /// What each reader was told of the readers that hold splits: (subtask, readers).
    sharing: Arc<Mutex<Vec<(u32, u32)>>>,
}

struct FilesReader {
    context: SourceReaderContext,
    splits: VecDeque<LinesSplit>,
    waiting: bool,
    done: bool,
    fail_at: Option<(u32, u32)>,
    sharing: Arc<Mutex<Vec<(u32, u32)>>>,
}

impl Source for FilesSource {
    type Output = (u32, u32);
    type Split = LinesSplit;
    type Enumerator = StaticSplitEnumerator<LinesSplit>;
    type Reader = FilesReader;

    fn boundedness(&self) -> Boundedness {
        Boundedness::Bounded
    }
    fn create_enumerator(&self, _parallelism: u32) -> Result<Self::Enumerator, BoxError> {
        Ok(StaticSplitEnumerator::new((0..self.files).map(|file| {
            LinesSplit {
                file,
                lines: self.lines_per_file,
                offset: 0,
            }
        })))
    }
    fn restore_enumerator(
        &self,
        _parallelism: u32,
        checkpoint: Vec<LinesSplit>,
    ) -> Result<Self::Enumerator, BoxError> {
        Ok(StaticSplitEnumerator::new(checkpoint))
    }
    fn create_reader(&self, context: SourceReaderContext) -> Result<FilesReader, BoxError> {
        Ok(FilesReader {
            context,
            splits: VecDeque::new(),
            waiting: false,
            done: false,
            fail_at: self.fail_at,
            sharing: self.sharing.clone(),
        })
    }
}

impl SourceReader for FilesReader {
    type Output = (u32, u32);
    type Split = LinesSplit;

    fn poll_next(
        &mut self,
        output: &mut Collector<'_, (u32, u32)>,
    ) -> Result<InputStatus, BoxError> {
        let Some(split) = self.splits.front_mut() else {
            if self.done {
                return Ok(InputStatus::EndOfInput);
            }
            if !self.waiting {
                self.waiting = true;
                self.context.send_split_request();
            }
            return Ok(InputStatus::NothingAvailable);
        };
        // Read up to 10 lines per poll.
        for _ in 0..10 {
            if split.offset == split.lines {
                break;
            }
            if self.fail_at == Some((split.file, split.offset)) {
                return Err(format!("corrupt line {} in file {}", split.offset, split.file).into());
            }
            output.collect((split.file, split.offset));
            split.offset += 1;
        }
        if split.offset == split.lines {
            self.splits.pop_front();
        }
        Ok(InputStatus::MoreAvailable)
    }
    fn set_readers_sharing(&mut self, readers: u32) {
        let subtask = self.context.subtask_index();
        self.sharing.lock().unwrap().push((subtask, readers));
    }
    fn add_splits(&mut self, splits: Vec<LinesSplit>) -> Result<(), BoxError> {
        self.splits.extend(splits);
        self.waiting = false;
        Ok(())
    }
    fn notify_no_more_splits(&mut self) {
        self.done = true;
    }
    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<LinesSplit>, BoxError> {
        Ok(self.splits.iter().cloned().collect())
    }
}

fn env() -> StreamExecutionEnvironment {
    StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(2)).unwrap()
}

#[test]
fn every_split_is_read_exactly_once_by_pulling_readers() {
    let env = env();
    let source = FilesSource {
        files: 7,
        lines_per_file: 123,
        fail_at: None,
        sharing: Arc::default(),
    };
    let out = env
        .from_source(source, WatermarkStrategy::no_watermarks(), "files")
        .collect();
    let result = env.execute("files").unwrap();
    let mut lines = out.take();
    lines.sort_unstable();
    let expected: Vec<(u32, u32)> = (0..7).flat_map(|f| (0..123).map(move |l| (f, l))).collect();
    assert_eq!(lines, expected);
    assert_eq!(
        result.operator("Source: files").unwrap().records_out,
        7 * 123
    );
}

#[test]
fn restored_split_resumes_at_its_offset_and_snapshots_progress() {
    let source = FilesSource {
        files: 1,
        lines_per_file: 25,
        fail_at: None,
        sharing: Arc::default(),
    };
    let (requests, inbox) = crossbeam_channel::unbounded();
    let mut reader = source
        .create_reader(SourceReaderContext::new(0, 1, requests))
        .unwrap();
    let mut output = VecOutput::default();
    // No split yet: the reader asks the enumerator for one.
    let status = reader.poll_next(&mut Collector::new(&mut output)).unwrap();
    assert_eq!(status, InputStatus::NothingAvailable);
    assert_eq!(inbox.try_recv().unwrap(), ReaderEvent::SplitRequest(0));
    // A split restored from a checkpoint resumes at its offset.
    reader
        .add_splits(vec![LinesSplit {
            file: 0,
            lines: 25,
            offset: 12,
        }])
        .unwrap();
    let status = reader.poll_next(&mut Collector::new(&mut output)).unwrap();
    assert_eq!(status, InputStatus::MoreAvailable);
    assert_eq!(output.records, (12..22).map(|l| (0, l)).collect::<Vec<_>>());
    let position = reader.snapshot_state(1).unwrap();
    assert_eq!(position.len(), 1);
    assert_eq!(position[0].offset, 22);
}

#[test]
fn reader_error_fails_the_job_naming_the_source() {
    let env = env();
    env.from_source(
        FilesSource {
            files: 3,
            lines_per_file: 50,
            sharing: Arc::default(),
            fail_at: Some((1, 42)),
        },
        WatermarkStrategy::no_watermarks(),
        "files",
    )
    .collect();
    match env.execute("failing files") {
        Err(WeirError::JobFailed { failure, .. }) => {
            assert_eq!(failure.operator, "Source: files");
            assert!(
                failure.to_string().contains("corrupt line 42 in file 1"),
                "{failure}"
            );
        }
        other => panic!("expected failure, got {other:?}"),
    }
}

/// A rate given for the whole source is shared among the readers that hold splits: with one
/// split for three readers, every reader is told that one reader reads, so the one that
/// does takes the whole rate.
#[test]
fn readers_are_told_how_many_of_them_hold_splits() {
    let sharing: Arc<Mutex<Vec<(u32, u32)>>> = Arc::default();
    let source = FilesSource {
        files: 1,
        lines_per_file: 50,
        fail_at: None,
        sharing: sharing.clone(),
    };
    let env =
        StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(3)).unwrap();
    let lines = env
        .from_source(source, WatermarkStrategy::no_watermarks(), "files")
        .collect();
    env.execute("sharing").unwrap();
    assert_eq!(lines.take().len(), 50);
    let told = sharing.lock().unwrap().clone();
    for subtask in 0..3 {
        assert!(
            told.contains(&(subtask, 1)),
            "reader {subtask} was told that one reader holds splits: {told:?}"
        );
    }
    assert!(told.iter().all(|(_, readers)| *readers == 1), "{told:?}");
}
