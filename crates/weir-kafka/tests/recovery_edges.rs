//! The edges of recovery for Kafka → count → Kafka, with the reference pipeline as a real
//! process: a crash while a finished job cleans up, a deleted checkpoint, and two processes
//! on one job — a stalled one that keeps its job, and one that lost it (its lock gone while
//! it stalled) and must commit nothing more, although it shares its transactional ids with
//! the process that took over.

mod common;

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use weir::checkpoint::job_record::JobRecord;
use weir_kafka::word_count;
use weir_testkit::crash_points::{self, absolute, inject, read_log, Fault, FileOperation};
use weir_testkit::{kill_after_checkpoint, seeds, wait_bounded};

const PARTITIONS: i32 = 3;
const RECORDS: u64 = 6_000;

struct Job {
    input: String,
    output: String,
    work: PathBuf,
    expected: HashMap<String, u64>,
}

impl Job {
    /// A job over a fresh input topic (or `input`, shared) writing to a fresh output topic.
    fn new(dir: &Path, input: Option<(&str, &HashMap<String, u64>)>) -> Self {
        let (input, expected) = match input {
            Some((topic, expected)) => (topic.to_string(), expected.clone()),
            None => {
                let topic = common::unique("edge-words");
                let expected = word_count::produce_words(
                    &common::bootstrap(),
                    &topic,
                    PARTITIONS,
                    RECORDS,
                    200,
                )
                .expect("produce input");
                (topic, expected)
            }
        };
        let output = common::topic("edge-counts", PARTITIONS);
        let work = absolute(dir).join("work");
        std::fs::create_dir_all(&work).unwrap();
        Self {
            input,
            output,
            work,
            expected,
        }
    }

    fn command(&self, resume: bool, extra: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_weir-kafka-count"));
        command
            .args(["--bootstrap", &common::bootstrap()])
            .args(["--input", &self.input, "--output", &self.output])
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

    fn checkpoints(&self) -> PathBuf {
        self.work.join("checkpoints")
    }

    fn job_dir(&self) -> PathBuf {
        self.checkpoints().join(word_count::JOB_NAME)
    }

    fn committed(&self) -> Vec<(String, u64)> {
        word_count::committed_counts(&common::bootstrap(), &self.output, PARTITIONS)
            .expect("read output")
    }

    fn verify_exact(&self) -> Result<(), String> {
        word_count::verify_counts(&self.committed(), &self.expected, true)
    }

    /// Nothing committed twice (a refused recovery leaves the output incomplete, never
    /// duplicated).
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

    /// Runs `--resume` until it succeeds (at most three times).
    fn recover(&self) -> Result<(), String> {
        let mut last = String::new();
        for _ in 0..3 {
            let output = self.command(true, &[]).output().unwrap();
            if output.status.success() {
                return Ok(());
            }
            last = String::from_utf8_lossy(&output.stderr).into_owned();
        }
        Err(format!("recovery never finished: {last}"))
    }

    /// The file operations of an undisturbed fresh run of this job.
    fn count_operations(&self) -> Vec<FileOperation> {
        let log = self.work.with_file_name("ops.log");
        let mut run = self.command(false, &[]);
        inject(&mut run, &self.work, Fault::None, Some(&log));
        let output = run.output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        read_log(&log)
    }
}

fn newest_location(job: &Job) -> PathBuf {
    let bytes = std::fs::read(job.job_dir().join("_job_record")).expect("job record");
    let record = JobRecord::decode(&bytes).expect("readable record");
    PathBuf::from(&record.completed.last().expect("a restore point").location)
}

#[test]
fn a_crash_while_a_finished_job_cleans_up_does_not_run_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Job::new(&dir.path().join("probe"), None);
    let ops = probe.count_operations();
    probe.verify_exact().expect("the undisturbed run");
    // From the final checkpoint through the clean-up.
    let from = ops
        .iter()
        .rev()
        .find(|o| o.op == "mkdir" && o.path.contains("/checkpoints/kafka-word-count/chk-"))
        .map_or(1, |o| o.n);
    let last = ops.len() as u64;
    let seed = seeds(1)[0];
    for point in crash_points::points(from..=last, 4, seed) {
        let trial = tempfile::tempdir().unwrap();
        let job = Job::new(trial.path(), Some((&probe.input, &probe.expected)));
        let mut run = job.command(false, &[]);
        inject(&mut run, &job.work, Fault::KillAt(point), None);
        run.output().unwrap();
        job.recover()
            .unwrap_or_else(|e| panic!("crash point {point} (seed {seed}): {e}"));
        job.verify_exact()
            .unwrap_or_else(|e| panic!("crash point {point} (seed {seed}): {e}"));
    }
}

#[test]
fn a_deleted_newest_checkpoint_is_read_from_its_copy_or_refused() {
    for copy in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let job = Job::new(dir.path(), None);
        let extra: &[&str] = if copy { &[] } else { &["--no-local-recovery"] };
        let mut child = job.command(false, extra).spawn().unwrap();
        kill_after_checkpoint(
            &mut child,
            &job.checkpoints(),
            word_count::JOB_NAME,
            2,
            Duration::ZERO,
            Duration::from_secs(30),
        );
        std::fs::remove_file(newest_location(&job).join("_metadata")).unwrap();
        let output = job.command(true, extra).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        if copy {
            assert!(output.status.success(), "{stderr}");
            job.verify_exact().unwrap();
        } else {
            assert!(!output.status.success(), "resumed past committed output");
            assert!(
                stderr.contains("cannot restore checkpoint")
                    && stderr.contains("_metadata")
                    && stderr.contains("recovery.fallback-on-corrupt-checkpoint"),
                "{stderr}"
            );
            job.verify_no_duplicates().unwrap();
        }
    }
}

/// Starts the job fresh and stops it (SIGSTOP) right after its third checkpoint entered the
/// job record, before any sink commits it.
fn stall_after_a_checkpoint(job: &Job, probe: &Job) -> Child {
    let ops = probe.count_operations();
    let point = ops
        .iter()
        .filter(|o| {
            o.op == "rename"
                && o.path
                    .ends_with("/checkpoints/kafka-word-count/_job_record")
        })
        .nth(3)
        .map(|o| o.n + 1)
        .expect("the run recorded checkpoints");
    let mut command = job.command(false, &[]);
    inject(&mut command, &job.work, Fault::StopAt(point), None);
    let mut child = command.spawn().unwrap();
    assert!(
        crash_points::wait_stopped(&mut child, Duration::from_secs(60)),
        "the job did not reach operation {point}"
    );
    child
}

#[test]
fn a_stalled_job_keeps_its_transactional_ids_and_a_second_process_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Job::new(&dir.path().join("probe"), None);
    let job = Job::new(
        &dir.path().join("job"),
        Some((&probe.input, &probe.expected)),
    );
    let mut stalled = stall_after_a_checkpoint(&job, &probe);
    let second = job.command(true, &[]).output().unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "a second process ran");
    assert!(
        stderr.contains("locked by another process")
            && stderr.contains(&format!("pid {}", stalled.id())),
        "{stderr}"
    );
    crash_points::resume(&stalled);
    let status = wait_bounded(&mut stalled, Duration::from_secs(120), "stalled job");
    assert!(status.success(), "the stalled job did not finish");
    job.verify_exact().unwrap();
}

#[test]
fn a_job_that_lost_its_lock_while_stalled_commits_nothing_more() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Job::new(&dir.path().join("probe"), None);
    let job = Job::new(
        &dir.path().join("job"),
        Some((&probe.input, &probe.expected)),
    );
    let mut stalled = stall_after_a_checkpoint(&job, &probe);
    // The lock is lost (as a lease that expired); another process takes the job over, with
    // the same transactional ids, and finishes it.
    std::fs::remove_file(job.job_dir().join("_lock")).unwrap();
    job.recover().unwrap();
    job.verify_exact().unwrap();
    crash_points::resume(&stalled);
    let status = wait_bounded(&mut stalled, Duration::from_secs(120), "stalled job");
    let mut stderr = String::new();
    if let Some(mut pipe) = stalled.stderr.take() {
        use std::io::Read;
        let _ = pipe.read_to_string(&mut stderr);
    }
    assert!(
        !status.success() && status.signal().is_none(),
        "the old process went on: {status:?}"
    );
    assert!(stderr.contains("lost the job to epoch"), "{stderr}");
    job.verify_exact()
        .unwrap_or_else(|e| panic!("after the old process woke up: {e}"));
}
