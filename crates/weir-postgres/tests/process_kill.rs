//! Process-level crash recovery into PostgreSQL: the `weir-pg-count` job runs as a child
//! process and is killed with SIGKILL at random moments — after some checkpoints, right
//! before a `COMMIT PREPARED` (after its checkpoint completed), and while restoring — then
//! resumed from its latest checkpoint until it finishes. The table must then hold exactly the
//! expected rows, and no prepared transaction may be left over.
//!
//! Seeds: `WEIR_SEED=s` replays one, `WEIR_SEEDS=n` runs n.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use weir_postgres::word_count;
use weir_postgres::PostgresConnection;

const RECORDS: u64 = 30_000;
const WORDS: u64 = 300;

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

fn spawn(
    table: &str,
    delivery: &str,
    work: &Path,
    resume: bool,
    kill_before_commit: bool,
) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_weir-pg-count"));
    command
        .args([
            "--url",
            &common::url(),
            "--table",
            table,
            "--delivery",
            delivery,
        ])
        .args([
            "--records",
            &RECORDS.to_string(),
            "--words",
            &WORDS.to_string(),
        ])
        .args(["--rate", "10000", "--checkpoint-interval-ms", "200"])
        .arg("--work-dir")
        .arg(work)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if resume {
        command.arg("--resume");
    }
    if kill_before_commit {
        command.arg("--kill-before-commit");
    }
    command.spawn().expect("spawn weir-pg-count")
}

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

fn run_with_kills(delivery: &str, seed: u64) {
    eprintln!("process_kill: delivery {delivery}, seed {seed} (replay with WEIR_SEED={seed})");
    let mut rng = Rng(seed);
    let table = common::unique("kill_counts");
    let work = tempfile::tempdir().expect("work dir");
    let exactly_once = delivery.starts_with("exactly-once");
    // 1. Killed at a random moment after a few checkpoints.
    let mut child = spawn(&table, delivery, work.path(), false, false);
    kill_after_checkpoint(
        &mut child,
        work.path(),
        1 + rng.below(3),
        Duration::from_millis(rng.below(300)),
    );
    // 2. Killed between a checkpoint's completion and its COMMIT PREPARED.
    let mut child = spawn(&table, delivery, work.path(), true, exactly_once);
    let status = wait_bounded(&mut child, Duration::from_secs(120), "kill before commit");
    if exactly_once {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            status.signal(),
            Some(9),
            "step 2 was not killed before a commit: {status}"
        );
    }
    // 3. Killed while restoring or shortly after.
    let mut child = spawn(&table, delivery, work.path(), true, false);
    kill_after(&mut child, Duration::from_millis(rng.below(400)));
    // 4. Runs to the end.
    let mut child = spawn(&table, delivery, work.path(), true, false);
    let status = wait_bounded(&mut child, Duration::from_secs(120), "final run");
    assert!(status.success(), "final run failed: {status}");

    let rows = word_count::table_rows(&common::url(), &table).expect("read table");
    let expected = word_count::expected_totals(RECORDS, WORDS);
    let verdict = if delivery == "exactly-once-append" {
        word_count::verify_running_counts(&rows, &expected)
    } else {
        word_count::verify_totals(&rows, &expected)
    };
    if let Err(problems) = verdict {
        panic!("seed {seed}, {delivery}: table {table} is wrong: {problems}");
    }
    let mut client = PostgresConnection::new(&common::url())
        .unwrap()
        .connect("weir-test")
        .unwrap();
    let left: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE $1",
            &[&format!("weir-count-{table}:%")],
        )
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "prepared transactions left over");
}

#[test]
fn exactly_once_rows_survive_sigkill_at_any_moment() {
    for seed in seeds(2) {
        run_with_kills("exactly-once-append", seed);
    }
}

#[test]
fn exactly_once_upserts_survive_sigkill_at_any_moment() {
    for seed in seeds(1) {
        run_with_kills("exactly-once-upsert", seed);
    }
}

#[test]
fn upsert_totals_survive_sigkill_at_any_moment() {
    for seed in seeds(1) {
        run_with_kills("upsert", seed);
    }
}
