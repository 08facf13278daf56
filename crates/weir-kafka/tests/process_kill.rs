//! Process-level crash recovery of Kafka → key_by → count → Kafka: the job runs as a child
//! process and is killed with SIGKILL at random moments — at random times, right between a
//! checkpoint's completion and its transaction's commit, and while it restores — then
//! resumed from its latest checkpoint until it finishes. The committed output (read from the
//! log with its transaction markers) must equal the expected running counts exactly with
//! `exactly_once`, and contain all of them with `at_least_once`.
//!
//! Seeds: `WEIR_SEED=s` replays one, `WEIR_SEEDS=n` runs n.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

use weir_testkit::{
    kill_after, kill_after_checkpoint, latest_checkpoint, report_kill, seeds, wait_bounded, Rng,
};

use weir_kafka::client_config::KafkaConnection;
use weir_kafka::word_count;

const PARTITIONS: i32 = 3;
const RECORDS: u64 = 30_000;

struct Job<'a> {
    input: &'a str,
    output: &'a str,
    guarantee: &'a str,
    work: &'a Path,
}

impl Job<'_> {
    fn spawn(&self, resume: bool, kill_before_commit: bool) -> Child {
        let mut command = Command::new(env!("CARGO_BIN_EXE_weir-kafka-count"));
        command
            .args(["--bootstrap", &common::bootstrap()])
            .args(["--input", self.input, "--output", self.output])
            .args(["--guarantee", self.guarantee])
            .args(["--rate", "10000", "--checkpoint-interval-ms", "200"])
            .args(["--operation-timeout-ms", "10000"])
            .arg("--work-dir")
            .arg(self.work)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        if resume {
            command.arg("--resume");
        }
        if kill_before_commit {
            command.arg("--kill-before-commit");
        }
        command.spawn().expect("spawn weir-kafka-count")
    }
}

fn run_with_kills(guarantee: &str, seed: u64) {
    eprintln!("process_kill: guarantee {guarantee}, seed {seed} (replay with WEIR_SEED={seed})");
    let mut rng = Rng(seed);
    let input = common::unique("kill-words");
    let output = common::unique("kill-counts");
    let connection = KafkaConnection::new(common::bootstrap());
    weir_kafka::admin::ensure_topic(&connection, &output, PARTITIONS).expect("output topic");
    let expected =
        word_count::produce_words(&common::bootstrap(), &input, PARTITIONS, RECORDS, 300)
            .expect("produce input");
    let work = tempfile::tempdir().expect("work dir");
    let job = Job {
        input: &input,
        output: &output,
        guarantee,
        work: work.path(),
    };
    // 1. Killed at a random moment after a few checkpoints committed their output.
    let checkpoints = work.path().join("checkpoints");
    let since = SystemTime::now();
    let mut child = job.spawn(false, false);
    let killed = kill_after_checkpoint(
        &mut child,
        &checkpoints,
        word_count::JOB_NAME,
        1 + rng.below(3),
        Duration::from_millis(rng.below(300)),
        Duration::from_millis(1500),
    );
    report_kill(&checkpoints, word_count::JOB_NAME, "mid-run", killed, since);
    // 2. Killed between a checkpoint's completion and its commit (the job cannot have
    //    finished in step 1, which killed it right after an early checkpoint).
    let since = SystemTime::now();
    let mut child = job.spawn(true, true);
    let status = wait_bounded(&mut child, Duration::from_secs(120), "kill before commit");
    if guarantee == "exactly_once" {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            status.signal(),
            Some(9),
            "step 2 was not killed before a commit: {status}"
        );
    }
    {
        use std::os::unix::process::ExitStatusExt;
        let killed = status.signal() == Some(9);
        report_kill(
            &checkpoints,
            word_count::JOB_NAME,
            "between-completion-and-commit",
            killed,
            since,
        );
    }
    // 3. Killed while restoring or shortly after.
    let since = SystemTime::now();
    let mut child = job.spawn(true, false);
    let killed = kill_after(&mut child, Duration::from_millis(rng.below(400)));
    report_kill(
        &checkpoints,
        word_count::JOB_NAME,
        "during-restore",
        killed,
        since,
    );
    // 4. Killed at a random moment after the next checkpoint.
    let since = SystemTime::now();
    let mut child = job.spawn(true, false);
    let reached = latest_checkpoint(&checkpoints, word_count::JOB_NAME);
    let killed = kill_after_checkpoint(
        &mut child,
        &checkpoints,
        word_count::JOB_NAME,
        reached,
        Duration::from_millis(rng.below(300)),
        Duration::from_millis(1500),
    );
    report_kill(&checkpoints, word_count::JOB_NAME, "mid-run", killed, since);
    // 5. Runs to the end.
    let mut child = job.spawn(true, false);
    let status = wait_bounded(&mut child, Duration::from_secs(120), "final run");
    assert!(status.success(), "final run failed: {status}");

    let committed = word_count::committed_counts(&common::bootstrap(), &output, PARTITIONS)
        .expect("read output");
    let exactly = guarantee == "exactly_once";
    if let Err(problems) = word_count::verify_counts(&committed, &expected, exactly) {
        panic!("seed {seed}, {guarantee}: output is wrong: {problems}");
    }
}

#[test]
fn exactly_once_output_survives_sigkill_at_any_moment() {
    for seed in seeds(2) {
        run_with_kills("exactly_once", seed);
    }
}

#[test]
fn at_least_once_output_loses_nothing_after_sigkill() {
    for seed in seeds(1) {
        run_with_kills("at_least_once", seed);
    }
}
