//! Zombie sweeps into PostgreSQL: the `weir-pg-count` job (exactly-once append, parallelism
//! 2) is stopped (SIGSTOP) at a point of its run — right before its N-th durable file
//! operation under its work directory, right before its N-th `PREPARE TRANSACTION` (after
//! it checked that it holds the job), or right before its N-th `COMMIT PREPARED` (after the
//! checkpoint completed) — its lock file is removed, a replacement resumes the job and runs
//! it to its end, and the stopped process continues (SIGCONT). Then:
//! - nothing the zombie did may be left prepared: PostgreSQL's fence (`weir_fences`) lets
//!   no process prepare or keep a transaction once a successor took the sink over;
//! - a last `--resume` works (the job is not stranded);
//! - the table holds every running count exactly once, read back with `psql` — not with
//!   Weir's code.
//!
//! CI runs a sample of points; `WEIR_CRASH_SWEEP=full` tries every file operation
//! (`scripts/crash-sweep.sh`), `WEIR_CRASH_SWEEP=n` n of them, and `WEIR_CRASH_POINT=n`
//! replays one file-operation point. Each test prints `zombie sweep <name>: …` with its
//! figures.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use weir_postgres::word_count;
use weir_testkit::crash_points::{self, absolute, inject, wait_stopped, Fault};

const RECORDS: u64 = 6000;
const WORDS: u64 = 60;
const RATE: &str = "6000";
const CHECKPOINT_INTERVAL_MS: &str = "100";
/// How long a stopped or finishing process may take before the trial is called hung.
const HANG: Duration = Duration::from_secs(120);
/// Prepares and commits of one run: about two per checkpoint; points past the end of a run
/// count as "ended before its point".
const TRANSACTION_POINTS: u64 = 16;

/// Where the zombie is stopped.
#[derive(Debug, Clone, Copy)]
enum StopAt {
    /// Before its N-th durable file operation.
    File(u64),
    /// Before its N-th `PREPARE TRANSACTION`.
    Prepare(u64),
    /// Before its N-th `COMMIT PREPARED`.
    Commit(u64),
}

/// What one trial saw.
#[derive(Debug, Default)]
struct Outcome {
    finished_first: bool,
    zombie_failed: bool,
    /// The zombie's last error line, shortened: why it stopped.
    reason: Option<String>,
    /// PostgreSQL refused the zombie a statement: the fence row named its successor, or the
    /// server ended its stalled session.
    refused_by_database: bool,
}

fn pg_count(table: &str, work: &Path, resume: bool) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_weir-pg-count"));
    command
        .args(["--url", &common::url(), "--table", table])
        .args(["--delivery", "exactly-once-append"])
        .args([
            "--records",
            &RECORDS.to_string(),
            "--words",
            &WORDS.to_string(),
        ])
        .args([
            "--rate",
            RATE,
            "--checkpoint-interval-ms",
            CHECKPOINT_INTERVAL_MS,
        ])
        .arg("--work-dir")
        .arg(work)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if resume {
        command.arg("--resume");
    }
    command
}

fn describe(output: &Output) -> String {
    format!(
        "{} — {}",
        output.status,
        tail(&String::from_utf8_lossy(&output.stderr))
    )
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(6)..].join("\n")
}

/// Flags that put the job's checkpoints and record on S3 under a fresh prefix (`s3`: the
/// bucket), or none.
fn storage_args(s3: Option<&str>, table: &str) -> Vec<String> {
    match s3 {
        Some(bucket) => vec![
            "-D".into(),
            format!("state.checkpoints.dir={bucket}/{table}"),
            "--no-local-recovery".into(),
        ],
        None => Vec::new(),
    }
}

fn trial(stop: StopAt, s3: Option<&str>) -> Result<Outcome, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let work = absolute(dir.path()).join("work");
    std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;
    let table = common::unique("zombie");
    let storage = storage_args(s3, &table);
    let pg_count = |table: &str, work: &Path, resume: bool| {
        let mut command = pg_count(table, work, resume);
        command.args(&storage);
        command
    };
    // The zombie resumes too (from nothing, at first): a fresh start would reset the job when
    // it wakes — starting over on purpose, which the sink then refuses over its committed
    // output (tested on its own in `recovery_edges`).
    let mut zombie = pg_count(&table, &work, true);
    std::os::unix::process::CommandExt::process_group(&mut zombie, 0);
    match stop {
        StopAt::File(n) => inject(&mut zombie, &work, Fault::StopAt(n), None),
        StopAt::Prepare(n) => {
            zombie.args(["--stop-before-prepare", &n.to_string()]);
        }
        StopAt::Commit(n) => {
            zombie.args(["--stop-before-commit", &n.to_string()]);
        }
    }
    // Its messages go to a file: a pipe nobody reads while it runs could fill and block it.
    let said = dir.path().join("zombie.stderr");
    zombie.stderr(std::fs::File::create(&said).map_err(|e| e.to_string())?);
    let mut zombie = zombie.spawn().map_err(|e| e.to_string())?;
    let zombie_said = || tail(&std::fs::read_to_string(&said).unwrap_or_default());
    let mut outcome = Outcome::default();
    if wait_stopped(&mut zombie, HANG) {
        let _ = std::fs::remove_file(
            work.join("checkpoints")
                .join(word_count::JOB_NAME)
                .join("_lock"),
        );
        let replacement = pg_count(&table, &work, true)
            .output()
            .map_err(|e| e.to_string())?;
        crash_points::resume(&zombie);
        let status = weir_testkit::wait_bounded(&mut zombie, HANG, "the zombie");
        let stderr = zombie_said();
        outcome.zombie_failed = !status.success();
        if outcome.zombie_failed {
            let text = std::fs::read_to_string(&said).unwrap_or_default();
            outcome.reason = crash_points::ending_reason(&text);
            outcome.refused_by_database = text.contains("no longer owns the sink's transactions")
                || text.contains("idle-in-transaction");
        }
        if !replacement.status.success() {
            return Err(format!(
                "the replacement failed: {}\nthe zombie ({status}) said:\n{stderr}",
                describe(&replacement)
            ));
        }
        let left = common::psql_prepared(&table)?;
        if !left.is_empty() {
            return Err(format!(
                "transactions are left prepared after the zombie ended: {left:?}\nthe zombie ({status}) said:\n{stderr}"
            ));
        }
    } else {
        let status = weir_testkit::wait_bounded(&mut zombie, HANG, "the run");
        if !status.success() {
            return Err(format!(
                "the run failed before its point: {}",
                zombie_said()
            ));
        }
        outcome.finished_first = true;
    }
    let last = pg_count(&table, &work, true)
        .output()
        .map_err(|e| e.to_string())?;
    if !last.status.success() {
        return Err(format!(
            "a resume after the zombie failed: {}",
            describe(&last)
        ));
    }
    let expected = word_count::expected_totals(RECORDS, WORDS);
    word_count::verify_running_counts(&common::psql_rows(&table)?, &expected)
        .map_err(|problems| format!("table {table}: {problems}"))?;
    Ok(outcome)
}

/// The durable file operations of an undisturbed run.
fn file_operations() -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let work = absolute(dir.path()).join("work");
    std::fs::create_dir_all(&work).unwrap();
    let log = absolute(dir.path()).join("ops.log");
    let command = pg_count(&common::unique("zombie_count"), &work, true);
    crash_points::count_operations(command, &work, &log).len() as u64
}

fn sweep(name: &str, stops: Vec<StopAt>, s3: Option<&str>) {
    let (outcomes, failures) = crash_points::run_trials(
        &stops,
        |stop| trial(stop, s3),
        |stop| format!("stopped at {stop:?}"),
    );
    println!(
        "zombie sweep {name}: {} trials ({} ended before their point, {} zombies failed when \
         woken), {} violations",
        stops.len(),
        outcomes.iter().filter(|o| o.finished_first).count(),
        outcomes.iter().filter(|o| o.zombie_failed).count(),
        failures.len()
    );
    crash_points::print_reasons(outcomes.iter().filter_map(|o| o.reason.as_deref()));
    println!(
        "  {} zombies were refused a statement by PostgreSQL (the fence row, or their stalled session ended)",
        outcomes.iter().filter(|o| o.refused_by_database).count()
    );
    crash_points::assert_no_violations(name, stops.len(), &failures);
}

#[test]
fn zombies_stopped_at_prepare_and_commit_commit_nothing() {
    let seed = weir_testkit::seeds(1)[0];
    let sample = if std::env::var("WEIR_CRASH_SWEEP").as_deref() == Ok("full") {
        TRANSACTION_POINTS as usize
    } else {
        4
    };
    let mut stops: Vec<StopAt> = Vec::new();
    let chosen = |offset: u64| {
        // Not `crash_points::points`: WEIR_CRASH_POINT names a file operation.
        let stride = (TRANSACTION_POINTS / sample as u64).max(1);
        (0..sample as u64).map(move |i| 1 + (i * stride + offset) % TRANSACTION_POINTS)
    };
    stops.extend(chosen(seed % 4).map(StopAt::Prepare));
    stops.extend(chosen((seed / 4) % 4).map(StopAt::Commit));
    eprintln!("seed {seed} (replay with WEIR_SEED={seed}): {stops:?}");
    sweep("pg_transactions", stops, None);
}

#[test]
fn zombies_stopped_at_file_operations_commit_nothing() {
    let total = file_operations();
    let seed = weir_testkit::seeds(1)[0];
    let points = crash_points::points(1..=total, 6, seed);
    eprintln!("seed {seed} (replay with WEIR_SEED={seed}): points {points:?} of 1..={total}");
    sweep(
        &format!("pg_file_operations (1..={total})"),
        points.into_iter().map(StopAt::File).collect(),
        None,
    );
}

/// With the checkpoints and the job record on the S3-compatible server, which has no lock:
/// the record's compare-and-swap and the fence row are all that stop the zombie. (No file
/// operation of the job happens in its work directory then: the stop points are the
/// transactions'.)
#[test]
fn zombies_on_s3_stopped_at_prepare_and_commit_commit_nothing() {
    let bucket = std::env::var("WEIR_S3_URL").unwrap_or_else(|_| {
        panic!("WEIR_S3_URL is not set: run through scripts/test.sh, or `eval $(scripts/s3-server.sh start)`")
    });
    let full = std::env::var("WEIR_CRASH_SWEEP").as_deref() == Ok("full");
    let points: Vec<u64> = if full {
        (1..=TRANSACTION_POINTS).collect()
    } else {
        vec![2, 5]
    };
    let stops: Vec<StopAt> = points
        .iter()
        .map(|&n| StopAt::Prepare(n))
        .chain(points.iter().map(|&n| StopAt::Commit(n)))
        .collect();
    sweep("pg_transactions_on_s3", stops, Some(&bucket));
}
