//! The edges of recovery for Kafka → count → Kafka, with the reference pipeline as a real
//! process (the scenarios are `weir_testkit::recovery_scenarios`): a crash while a finished
//! job cleans up, a deleted checkpoint, and two processes on one job — a stalled one that
//! keeps its job, and one that lost it (its lock gone while it stalled) and must commit
//! nothing more, although it shares its transactional ids with the process that took over.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tempfile::TempDir;
use weir::checkpoint::job_record::JobRecord;
use weir_kafka::word_count;
use weir_testkit::crash_points::absolute;
use weir_testkit::recovery_scenarios::{self, ReferenceJob};

const PARTITIONS: i32 = 3;
const RECORDS: u64 = 6_000;

/// Words produced once, read by every job of a test.
struct Input {
    topic: String,
    expected: HashMap<String, u64>,
}

impl Input {
    fn new() -> Self {
        let topic = common::unique("edge-words");
        let expected =
            word_count::produce_words(&common::bootstrap(), &topic, PARTITIONS, RECORDS, 200)
                .expect("produce input");
        Self { topic, expected }
    }
}

struct Job<'a> {
    input: &'a Input,
    output: String,
    work: PathBuf,
    _dir: TempDir,
}

impl<'a> Job<'a> {
    fn new(input: &'a Input) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let work = absolute(dir.path()).join("work");
        std::fs::create_dir_all(&work).unwrap();
        Self {
            input,
            output: common::topic("edge-counts", PARTITIONS),
            work,
            _dir: dir,
        }
    }

    fn committed(&self) -> Vec<(String, u64)> {
        word_count::committed_counts(&common::bootstrap(), &self.output, PARTITIONS)
            .expect("read output")
    }
}

impl ReferenceJob for Job<'_> {
    fn command(&self, resume: bool, extra: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_weir-kafka-count"));
        command
            .args(["--bootstrap", &common::bootstrap()])
            .args(["--input", &self.input.topic, "--output", &self.output])
            .args(["--rate", "8000", "--checkpoint-interval-ms", "150"])
            .args(["--operation-timeout-ms", "10000"])
            .arg("--work-dir")
            .arg(&self.work)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if resume {
            command.arg("--resume");
        }
        command
    }

    fn work(&self) -> &Path {
        &self.work
    }

    fn job_dir(&self) -> PathBuf {
        self.work.join("checkpoints").join(word_count::JOB_NAME)
    }

    fn newest_restore_point(&self) -> PathBuf {
        let file = weir_testkit::job_record_file(&self.job_dir()).expect("a job record");
        let record =
            JobRecord::decode(&std::fs::read(file).expect("job record")).expect("readable record");
        // Recorded relative to the job's directory.
        self.job_dir()
            .join(&record.completed.last().expect("a restore point").location)
    }

    fn verify_exact(&self) -> Result<(), String> {
        word_count::verify_counts(&self.committed(), &self.input.expected, true)
    }

    fn verify_no_duplicates(&self) -> Result<(), String> {
        let mut seen = HashMap::new();
        for pair in self.committed() {
            *seen.entry(pair).or_insert(0u32) += 1;
        }
        match seen.into_iter().find(|(_, n)| *n > 1) {
            Some((pair, n)) => Err(format!("{pair:?} committed {n} times")),
            None => Ok(()),
        }
    }
}

#[test]
fn a_crash_while_a_finished_job_cleans_up_does_not_run_it_again() {
    let input = Input::new();
    recovery_scenarios::crash_while_cleaning_up(&Job::new(&input), || Job::new(&input), 4);
}

#[test]
fn a_deleted_newest_checkpoint_is_read_from_its_copy_or_refused() {
    let input = Input::new();
    recovery_scenarios::deleted_newest_metadata(|| Job::new(&input), 2, "--no-local-recovery");
}

#[test]
fn a_stalled_job_keeps_its_transactional_ids_and_a_second_process_is_refused() {
    let input = Input::new();
    recovery_scenarios::stalled_process_keeps_its_job(&Job::new(&input), &Job::new(&input));
}

#[test]
fn a_job_that_lost_its_lock_while_stalled_commits_nothing_more() {
    let input = Input::new();
    recovery_scenarios::process_that_lost_its_job_commits_nothing(
        &Job::new(&input),
        &Job::new(&input),
        &[],
    );
}
