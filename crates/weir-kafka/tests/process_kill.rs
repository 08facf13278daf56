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
use std::time::{Duration, Instant};

use weir_kafka::client_config::KafkaConnection;
use weir_kafka::word_count;

const PARTITIONS: i32 = 3;
const RECORDS: u64 = 30_000;

fn seeds(default: u64) -> Vec<u64> {
    if let Some(seed) = std::env::var("WEIR_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![seed];
    }
    let n = std::env::var("WEIR_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    (1..=n).collect()
}

/// SplitMix64 stream.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n
    }
}

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

/// Waits for `child`, killing it and failing the test after `limit`.
fn wait_bounded(child: &mut Child, limit: Duration, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: the job did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The highest completed checkpoint in the job's checkpoint directory.
fn latest_checkpoint(work: &Path) -> u64 {
    let dir = work.join("checkpoints").join(word_count::JOB_NAME);
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.path().join("_metadata").exists())
                .filter_map(|e| {
                    e.file_name()
                        .to_str()
                        .and_then(|n| n.strip_prefix("chk-"))
                        .and_then(|id| id.parse().ok())
                })
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

/// Kills `child` with SIGKILL `delay` after a checkpoint beyond `after` completed (or when
/// it ends by itself), so that the kill lands while the job has committed output.
fn kill_after_checkpoint(child: &mut Child, work: &Path, after: u64, delay: Duration) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while latest_checkpoint(work) <= after && Instant::now() < deadline {
        if child.try_wait().expect("wait").is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    kill_after(child, delay);
}

/// Kills `child` with SIGKILL after `delay` unless it ended before.
fn kill_after(child: &mut Child, delay: Duration) {
    let deadline = Instant::now() + delay;
    while Instant::now() < deadline {
        if child.try_wait().expect("wait").is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    let _ = child.wait();
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
    let mut child = job.spawn(false, false);
    kill_after_checkpoint(
        &mut child,
        work.path(),
        1 + rng.below(3),
        Duration::from_millis(rng.below(300)),
    );
    // 2. Killed between a checkpoint's completion and its commit (the job cannot have
    //    finished in step 1, which killed it right after an early checkpoint).
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
    // 3. Killed while restoring or shortly after.
    let mut child = job.spawn(true, false);
    kill_after(&mut child, Duration::from_millis(rng.below(400)));
    // 4. Killed at a random moment after the next checkpoint.
    let mut child = job.spawn(true, false);
    let reached = latest_checkpoint(work.path());
    kill_after_checkpoint(
        &mut child,
        work.path(),
        reached,
        Duration::from_millis(rng.below(300)),
    );
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
