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
use std::time::{Duration, SystemTime};

use weir_testkit::{kill_after, kill_after_checkpoint, report_kill, seeds, wait_bounded, Rng};

use weir_postgres::word_count;

const RECORDS: u64 = 30_000;
const WORDS: u64 = 300;

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

fn run_with_kills(delivery: &str, seed: u64) {
    eprintln!("process_kill: delivery {delivery}, seed {seed} (replay with WEIR_SEED={seed})");
    let mut rng = Rng(seed);
    let table = common::unique("kill_counts");
    let work = tempfile::tempdir().expect("work dir");
    let exactly_once = delivery.starts_with("exactly-once");
    // 1. Killed at a random moment after a few checkpoints.
    let checkpoints = work.path().join("checkpoints");
    let since = SystemTime::now();
    let mut child = spawn(&table, delivery, work.path(), false, false);
    let killed = kill_after_checkpoint(
        &mut child,
        &checkpoints,
        word_count::JOB_NAME,
        1 + rng.below(3),
        Duration::from_millis(rng.below(300)),
        Duration::from_millis(1500),
    );
    report_kill(&checkpoints, word_count::JOB_NAME, "mid-run", killed, since);
    // 2. Killed between a checkpoint's completion and its COMMIT PREPARED.
    let since = SystemTime::now();
    let mut child = spawn(&table, delivery, work.path(), true, exactly_once);
    let status = wait_bounded(&mut child, Duration::from_secs(120), "kill before commit");
    if exactly_once {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            status.signal(),
            Some(9),
            "step 2 was not killed before a commit: {status}"
        );
        report_kill(
            &checkpoints,
            word_count::JOB_NAME,
            "between-completion-and-commit",
            true,
            since,
        );
    }
    // 3. Killed while restoring or shortly after.
    let since = SystemTime::now();
    let mut child = spawn(&table, delivery, work.path(), true, false);
    let killed = kill_after(&mut child, Duration::from_millis(rng.below(400)));
    report_kill(
        &checkpoints,
        word_count::JOB_NAME,
        "during-restore",
        killed,
        since,
    );
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
    let left = common::prepared_transactions(&common::url(), &format!("weir-count-{table}:%"));
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
